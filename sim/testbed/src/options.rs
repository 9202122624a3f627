//! A scenario's options in one typed form.
//!
//! A scenario's binary parses its options with clap, a shard report stores
//! them as JSON (serde), and every repro line prints them as flags: one
//! struct serves all three, so no option is written out by hand and parsed
//! back. [`flags`] writes the flags of the fields that differ from the
//! defaults (serde gives the fields, clap's default naming gives the
//! flag: a field `fail_fast` is `--fail-fast`), and [`parse`] reads them
//! with the struct's own clap parser. [`check_round_trip`] proves the two
//! agree; campaigns call it before they start, so a repro line that would
//! not replay its campaign is a loud error, never a silent one.
//!
//! What a field may be: a `bool` flag that defaults to false, a number or a
//! string (`--name VALUE`), an `Option` of one (`None` writes nothing), or
//! a list written as one comma-separated value, which writes `none` when
//! empty (so its parser must read `none` as the empty list, as
//! [`FaultList`] does). Enums serialize as the name clap parses: derive
//! `clap::ValueEnum` and `#[serde(rename_all = "kebab-case")]`.

use std::fmt;
use std::str::FromStr;

use durlog_vfs::FaultKind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// What a scenario's options must be: parsed by clap, stored by serde,
/// compared and defaulted. Every such type is one (a blanket impl).
pub trait Options:
    clap::Args
    + clap::FromArgMatches
    + Serialize
    + DeserializeOwned
    + Clone
    + Default
    + PartialEq
    + fmt::Debug
    + Send
    + Sync
{
}

impl<T> Options for T where
    T: clap::Args
        + clap::FromArgMatches
        + Serialize
        + DeserializeOwned
        + Clone
        + Default
        + PartialEq
        + fmt::Debug
        + Send
        + Sync
{
}

/// The flags that give `options` (those of each field that differs from
/// the defaults, in field-name order), one argument each: `--steps`,
/// `40`, `--canary`.
///
/// # Panics
/// If a field is of a kind the module doc does not allow (a flag cannot
/// say `false`, nor `None` for a field whose default is `Some`).
pub fn flags<O: Options>(options: &O) -> Vec<String> {
    let (Value::Object(fields), Value::Object(defaults)) =
        (to_value(options), to_value(&O::default()))
    else {
        panic!("options must serialize as a struct: {options:?}");
    };
    let mut args = Vec::new();
    for (name, value) in &fields {
        if defaults.get(name) == Some(value) {
            continue;
        }
        let flag = format!("--{}", name.replace('_', "-"));
        match value {
            Value::Bool(true) => args.push(flag),
            Value::Null | Value::Bool(false) => panic!(
                "option {name}: {value} differs from its default and no flag can say it ({options:?})"
            ),
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|item| scalar(name, item)).collect();
                let list = if items.is_empty() {
                    "none".to_string()
                } else {
                    items.join(",")
                };
                args.extend([flag, list]);
            }
            other => args.extend([flag, scalar(name, other)]),
        }
    }
    args
}

/// The flags of `options` as one string for a command line, each with a
/// leading space ("" for the defaults); a value with a space or a quote in
/// it is quoted for a POSIX shell.
pub fn flags_text<O: Options>(options: &O) -> String {
    flags(options)
        .iter()
        .map(|arg| format!(" {}", shell_quote(arg)))
        .collect()
}

/// Options parsed from flags (as [`flags`] writes them), by the options'
/// own clap parser.
pub fn parse<O: Options>(args: &[String]) -> Result<O, String> {
    let command = O::augment_args(clap::Command::new("options").no_binary_name(true));
    let matches = command
        .try_get_matches_from(args)
        .map_err(|error| error.to_string())?;
    O::from_arg_matches(&matches).map_err(|error| error.to_string())
}

/// Fails, saying which, unless `options` written as flags and parsed back
/// are `options` again.
pub fn check_round_trip<O: Options>(options: &O) -> Result<(), String> {
    let args = flags(options);
    match parse::<O>(&args) {
        Ok(back) if back == *options => Ok(()),
        Ok(back) => Err(format!(
            "the options {options:?} written as flags {args:?} read back as {back:?}: a repro line would not replay them"
        )),
        Err(error) => Err(format!(
            "the options {options:?} written as flags {args:?} do not parse: {error}"
        )),
    }
}

/// The options as JSON, for shard reports.
pub fn to_value<O: Serialize + fmt::Debug>(options: &O) -> Value {
    serde_json::to_value(options)
        .unwrap_or_else(|error| panic!("options {options:?} do not serialize: {error}"))
}

fn scalar(name: &str, value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        other => panic!("option {name}: {other} is not a number or a string"),
    }
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,/:=+@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The options of a scenario that has none.
#[derive(clap::Args, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoOptions {}

/// A list of fault kinds as one option: `torn-write,crash` on a command
/// line, `none` for the empty list; a list of names in JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultList(pub Vec<FaultKind>);

impl FromStr for FaultList {
    type Err = String;

    fn from_str(text: &str) -> Result<FaultList, String> {
        if text.trim() == "none" {
            return Ok(FaultList(Vec::new()));
        }
        text.split(',')
            .map(|name| name.trim().parse::<FaultKind>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()
            .map(FaultList)
    }
}

impl fmt::Display for FaultList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.0.iter().map(|kind| kind.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for FaultList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let names: Vec<&str> = self.0.iter().map(|kind| kind.name()).collect();
        names.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FaultList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FaultList, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        names
            .iter()
            .map(|name| name.parse::<FaultKind>())
            .collect::<Result<_, _>>()
            .map(FaultList)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Args, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    struct Example {
        #[arg(long)]
        faults: Option<FaultList>,
        #[arg(long)]
        steps: Option<u32>,
        #[arg(long)]
        canary: bool,
        #[arg(long, default_value = "")]
        label: String,
    }

    #[test]
    fn defaults_write_no_flags_and_others_round_trip() {
        assert!(flags(&Example::default()).is_empty());
        let cases = [
            Example::default(),
            Example {
                faults: Some(FaultList(vec![FaultKind::TornWrite, FaultKind::Crash])),
                steps: Some(40),
                canary: true,
                label: "two words".into(),
            },
            Example {
                faults: Some(FaultList(Vec::new())),
                ..Example::default()
            },
        ];
        for case in &cases {
            check_round_trip(case).unwrap();
        }
        assert_eq!(
            flags_text(&cases[1]),
            " --canary --faults torn-write,crash --label 'two words' --steps 40"
        );
        assert_eq!(flags(&cases[2]), ["--faults", "none"]);
    }

    #[derive(clap::Args, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    struct ClapDefault {
        /// `Default` says 0, clap says 3: no flag is written for 0, and
        /// the parse gives 3.
        #[arg(long, default_value_t = 3)]
        shrink: u32,
    }

    #[test]
    fn a_default_that_clap_does_not_share_is_caught() {
        let error = check_round_trip(&ClapDefault::default()).unwrap_err();
        assert!(error.contains("read back as"), "{error}");
    }

    #[derive(clap::Args, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    struct Renamed {
        /// serde and clap disagree on the name: the round trip says so.
        #[arg(long = "other")]
        steps: Option<u32>,
    }

    #[test]
    fn a_flag_that_does_not_parse_back_is_caught() {
        let error = check_round_trip(&Renamed { steps: Some(4) }).unwrap_err();
        assert!(error.contains("do not parse"), "{error}");
    }
}

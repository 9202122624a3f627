//! A state of an exhaustive check, named so that it replays exactly.

use std::fmt;
use std::str::FromStr;

/// Where the fault of a state strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultPoint {
    /// Power fails during this counted disk operation (1-based).
    Crash(u64),
    /// This counted operation (a write or a sync) fails.
    Fail(u64),
    /// Nothing fails until the power loss after the last operation.
    End,
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultPoint::Crash(op) => write!(f, "c{op}"),
            FaultPoint::Fail(op) => write!(f, "f{op}"),
            FaultPoint::End => f.write_str("end"),
        }
    }
}

/// One state, exactly: the workload, the fault point, the crash during
/// the recovery after the first power loss (the n-th counted operation
/// after it), and the choices of every scripted decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateId<W> {
    pub workload: W,
    pub point: FaultPoint,
    pub recovery_crash: Option<u64>,
    pub choices: Vec<u32>,
}

/// `Pal:c7:r2:0.1.1` (workload : fault point : recovery crash or `-` :
/// choices or `-`).
impl<W: fmt::Display> fmt::Display for StateId<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.workload, self.point)?;
        match self.recovery_crash {
            Some(op) => write!(f, "r{op}:")?,
            None => f.write_str("-:")?,
        }
        if self.choices.is_empty() {
            return f.write_str("-");
        }
        let choices: Vec<String> = self.choices.iter().map(u32::to_string).collect();
        f.write_str(&choices.join("."))
    }
}

impl<W: FromStr<Err = String>> FromStr for StateId<W> {
    type Err = String;

    fn from_str(text: &str) -> Result<StateId<W>, String> {
        let bad = |what: &str| format!("{text:?}: {what} (expected e.g. Pal:c7:r2:0.1.1)");
        let parts: Vec<&str> = text.trim().split(':').collect();
        let [ops, point, recovery, choices] = parts[..] else {
            return Err(bad("not four fields separated by ':'"));
        };
        let workload: W = ops.parse()?;
        let number = |digits: &str| digits.parse::<u64>().ok().filter(|&op| op > 0);
        let point = match (point, point.get(..1), point.get(1..)) {
            ("end", ..) => FaultPoint::End,
            (_, Some("c"), Some(op)) => FaultPoint::Crash(number(op).ok_or_else(|| bad("c0"))?),
            (_, Some("f"), Some(op)) => FaultPoint::Fail(number(op).ok_or_else(|| bad("f0"))?),
            _ => return Err(bad("the fault point is not cN, fN or end")),
        };
        let recovery_crash = match recovery {
            "-" => None,
            _ => Some(
                recovery
                    .strip_prefix('r')
                    .and_then(number)
                    .ok_or_else(|| bad("the recovery crash is not rN or -"))?,
            ),
        };
        let choices = match choices {
            "-" => Vec::new(),
            _ => choices
                .split('.')
                .map(|choice| choice.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("the choices are not numbers separated by '.'"))?,
        };
        Ok(StateId {
            workload,
            point,
            recovery_crash,
            choices,
        })
    }
}

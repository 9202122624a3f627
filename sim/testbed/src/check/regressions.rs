//! Regression files: the seeds that failed a check, one `seed N faults
//! LIST` line each, run first every time the check runs.

use std::path::Path;

use super::CheckFailure;
use crate::options::FaultList;

/// The regression file's header.
const REGRESSIONS_HEADER: &str = "\
# Seeds that failed a durlog-testbed check: each runs first, before the
# check's range, every time the check runs. Check this file in.
# `seed N faults LIST`; the rest of a line after `#` is a note.
";

pub(super) fn parse_regressions(text: &str) -> Result<Vec<(u64, Option<FaultList>)>, String> {
    let mut entries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "line {}: {line:?} is not `seed N [faults LIST]`",
                number + 1
            )
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let entry = match words[..] {
            ["seed", seed] => (seed.parse().map_err(|_| bad())?, None),
            ["seed", seed, "faults", list] => (
                seed.parse().map_err(|_| bad())?,
                Some(list.parse().map_err(|_| bad())?),
            ),
            _ => return Err(bad()),
        };
        entries.push(entry);
    }
    Ok(entries)
}

/// Adds `seed` (run with `faults`) to the regression file at `path`
/// (once), and says so.
pub(super) fn save_regression(
    path: &Path,
    seed: u64,
    faults: &FaultList,
    failure: &CheckFailure,
) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let known = parse_regressions(&text).unwrap_or_default();
    if known.iter().any(|(known, _)| *known == seed) {
        return format!("\n(seed {seed} is in {} already)", path.display());
    }
    let mut text = if text.is_empty() {
        REGRESSIONS_HEADER.to_string()
    } else {
        text
    };
    let note: String = failure.message.chars().take(120).collect();
    text.push_str(&format!(
        "seed {seed} faults {faults} # {}\n",
        note.replace('\n', " ")
    ));
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, &text));
    match written {
        Ok(()) => format!(
            "\nsaved to {}: it runs first from now on (check it in)",
            path.display()
        ),
        Err(error) => format!("\n(could not save the seed to {}: {error})", path.display()),
    }
}

//! Words for counts in the commands' one-line verdicts, shared by every
//! command that prints them (`verify`, `dump`, `purge`, the tables'
//! summaries), so that none has to reach into another command for them.

/// `1 segment`, `2 segments`.
pub fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

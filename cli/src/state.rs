//! The log's state file (`durlog.state`, SPEC section 11) as the read-only
//! commands show it: read straight from the directory and decoded by the
//! engine's `LogState::decode`, never written. A log that was never purged
//! or truncated has none.

use std::path::Path;

use durlog::{LogState, STATE_FILE_NAME};

use crate::escape::escape;

/// The state file of the log in `dir`, decoded; `None` if there is none,
/// or if it cannot be read or decoded. The callers go on to the recovery
/// scan (or `Log::open_read_only`), which refuses a damaged or unreadable
/// state file with an error naming it: reporting it here too would say
/// the same thing twice.
pub fn read_state(dir: &Path) -> Option<LogState> {
    let bytes = std::fs::read(dir.join(STATE_FILE_NAME)).ok()?;
    LogState::decode(&bytes).ok()
}

/// `dump`'s lines for a state file: one with the first seq kept and the
/// truncation under way (if any), then one per stream with the versions
/// a purge removed, in name order. Each starts with `# state: `.
pub fn state_lines(state: &LogState) -> Vec<String> {
    let truncation = match state.truncate_after {
        Some(seq) => {
            format!("a truncation after seq {seq} under way (the next writer's open finishes it)")
        }
        None => "no truncation under way".to_owned(),
    };
    let mut lines = vec![format!(
        "# state: {STATE_FILE_NAME}: first seq {}; {truncation}",
        state.first_seq
    )];
    lines.extend(state.purged_versions.iter().map(|(stream, version)| {
        format!(
            "# state: stream {}: versions 1..{version} purged",
            escape(stream.as_bytes())
        )
    }));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_lines_name_the_first_seq_the_truncation_and_each_purged_stream() {
        let state = LogState {
            first_seq: 5,
            truncate_after: Some(7),
            purged_versions: [("s".to_owned(), 4), ("a\tb".to_owned(), 1)].into(),
        };
        assert_eq!(
            state_lines(&state),
            [
                "# state: durlog.state: first seq 5; a truncation after seq 7 under way (the next writer's open finishes it)",
                "# state: stream a\\tb: versions 1..1 purged",
                "# state: stream s: versions 1..4 purged",
            ]
        );
        let plain = LogState {
            first_seq: 1,
            ..LogState::default()
        };
        assert_eq!(
            state_lines(&plain),
            ["# state: durlog.state: first seq 1; no truncation under way"]
        );
    }
}

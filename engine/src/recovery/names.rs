//! The names in a log directory, sorted into the log's own files (where
//! anything unexpected is damage) and the rest, which is passed over.

use std::path::{Path, PathBuf};

use durlog_vfs::Vfs;

use crate::format::file_names;
use crate::format::{
    CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, LOCK_FILE_NAME, NEXT_SEGMENT_NAME, STATE_FILE_NAME,
    STATE_TEMP_NAME, STREAMS_FILE_NAME, STREAMS_TEMP_NAME, looks_like_a_segment,
    parse_index_file_name, parse_segment_name,
};

use super::{Refusal, Rule, StateFiles, corrupt};

/// What a log directory holds, sorted by name.
pub(super) struct Names {
    /// Segment files, by first seq.
    pub segments: Vec<(u64, PathBuf)>,
    /// The prepared next segment, if one was left.
    pub next_segment: Option<PathBuf>,
    /// Index files, by the first seq their names name.
    pub index_files: Vec<(u64, PathBuf)>,
    pub state_files: StateFiles,
    /// Entries that are not the log's.
    pub ignored: Vec<PathBuf>,
}

/// Sorts the entries of `dir` (SPEC 2.4, "Directory contents"): the log's
/// own names (segments, anything else ending in `.log`, the prepared next
/// segment, index files, the lock file), where anything unexpected is
/// damage; and the rest, which is not the log's business and is passed
/// over.
pub(super) fn segment_names(vfs: &dyn Vfs, dir: &Path) -> Result<Names, Refusal> {
    let mut names = Names {
        segments: Vec::new(),
        next_segment: None,
        index_files: Vec::new(),
        state_files: StateFiles::default(),
        ignored: Vec::new(),
    };
    for entry in vfs.list_dir(dir)? {
        let path = file_names::join(dir, &entry.name);
        let owned_file = |what: &str| match entry.is_dir {
            false => Ok(()),
            true => Err(corrupt(
                Rule::Structure,
                &path,
                0,
                format!("a directory where {what} belongs"),
            )),
        };
        if entry.name == NEXT_SEGMENT_NAME {
            // Zeros, or (after a crash mid-roll) a second name of the new
            // last segment: never read as part of the log.
            owned_file("the prepared next segment")?;
            names.next_segment = Some(path);
        } else if entry.name == LOCK_FILE_NAME {
            owned_file("the lock file")?;
        } else if entry.name == STATE_FILE_NAME {
            owned_file("the log's state file")?;
            names.state_files.state = true;
        } else if entry.name == STREAMS_FILE_NAME {
            owned_file("the table of stream metadata")?;
            names.state_files.streams = true;
        } else if entry.name == CONSUMERS_FILE_NAME {
            owned_file("the table of consumer positions")?;
            names.state_files.consumers = true;
        } else if [STATE_TEMP_NAME, STREAMS_TEMP_NAME, CONSUMERS_TEMP_NAME]
            .contains(&entry.name.as_str())
        {
            // A new bookkeeping file a crash left before its rename: the
            // old one (or none) still rules, and Open removes this.
            owned_file("a new bookkeeping file")?;
            names.state_files.temps.push(path);
        } else if let Some(first_seq) = parse_segment_name(&entry.name) {
            owned_file("a segment file")?;
            names.segments.push((first_seq, path));
        } else if let Some(first_seq) = parse_index_file_name(&entry.name) {
            owned_file("an index file")?;
            names.index_files.push((first_seq, path));
        } else if looks_like_a_segment(&entry.name) {
            return Err(corrupt(
                Rule::Structure,
                &path,
                0,
                "named like a segment (.log) but not one (segments are named by 20 decimal digits and .log): a damaged name or a foreign file where the log keeps its own; move it elsewhere".into(),
            ));
        } else {
            names.ignored.push(path);
        }
    }
    names.segments.sort();
    names.index_files.sort();
    Ok(names)
}

//! Recovery's side of retention and truncation: the state file read back,
//! and the segments sorted by it into the purged ones a purge left behind
//! (removed by a writer's Open), the kept ones (scanned), and the ones a
//! truncation under way had still to remove (removed too). A crash during
//! a purge or a truncation thus leaves a directory that Open completes,
//! never a mix (FORMAT.md, "Retention and truncation").

use std::path::{Path, PathBuf};

use std::io;

use durlog_vfs::{OpenMode, Vfs};

use crate::format::{
    CONSUMERS_FILE_NAME, LogState, STATE_FILE_NAME, STATE_TEMP_NAME, STREAMS_FILE_NAME,
    decode_consumers, decode_streams,
};
use crate::index::Index;

use super::reread::{Read, read_until_two_agree};
use super::{Refusal, Rule, StateFiles, Tables, corrupt};

/// The state file's content, or a new log's (first seq 1, nothing
/// purged, no truncation) if there is none. A damaged state file is
/// corruption: without it, purged versions and the purge boundary are
/// unknown.
pub(super) fn read_state(vfs: &dyn Vfs, dir: &Path, present: bool) -> Result<LogState, Refusal> {
    if !present {
        return Ok(LogState {
            first_seq: 1,
            ..LogState::default()
        });
    }
    read_bookkeeping(
        vfs,
        &dir.join(STATE_FILE_NAME),
        LogState::decode,
        "the log's state file",
    )
}

/// The tables of stream metadata and consumer positions (empty when a log
/// has none). Damaged, they are corruption: a hard deletion or a
/// consumer's position forgotten would let a deleted stream come back or
/// a consumer skip or replay unseen.
pub(super) fn read_tables(
    vfs: &dyn Vfs,
    dir: &Path,
    files: &StateFiles,
) -> Result<Tables, Refusal> {
    let mut tables = Tables::default();
    if files.streams {
        let path = dir.join(STREAMS_FILE_NAME);
        tables.streams =
            read_bookkeeping(vfs, &path, decode_streams, "the table of stream metadata")?;
    }
    if files.consumers {
        let path = dir.join(CONSUMERS_FILE_NAME);
        tables.consumers = read_bookkeeping(
            vfs,
            &path,
            decode_consumers,
            "the table of consumer positions",
        )?;
    }
    Ok(tables)
}

/// A bookkeeping file at `path`, decoded; refused as `Corrupt` naming it
/// (`what`) if damaged. A flaky read must not refuse the log: damage is
/// believed only when two reads in a row return the same bytes, each read
/// reading the file afresh.
fn read_bookkeeping<T, E: std::fmt::Display + PartialEq>(
    vfs: &dyn Vfs,
    path: &Path,
    decode: impl Fn(&[u8]) -> Result<T, E>,
    what: &str,
) -> Result<T, Refusal> {
    let file = vfs.open(path, OpenMode::ReadOnly)?;
    let agreed = read_until_two_agree(path, None, |_again| {
        let len = file.len()?;
        // Never trust a file's length to size a buffer past what memory
        // holds.
        let mut bytes = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(1 << 30)];
        durlog_vfs::read_exact_at(file.as_ref(), &mut bytes, 0)?;
        Ok(match decode(&bytes) {
            Ok(decoded) => Read::Accepted(decoded),
            Err(error) => Read::Suspect((error, bytes)),
        })
    })?;
    match agreed {
        Read::Accepted(decoded) => Ok(decoded),
        Read::Suspect((error, _)) => Err(corrupt(
            Rule::Structure,
            path,
            0,
            format!("{what} is damaged ({error}); restore it from a backup"),
        )),
    }
}

/// The segments of a directory, sorted by the state file.
pub(crate) struct Sorted {
    /// Segments a purge removed from the log (all before `first_seq`),
    /// left by a crash before their removal was durable.
    pub purged: Vec<PathBuf>,
    /// The segments that hold the log, by first seq.
    pub kept: Vec<(u64, PathBuf)>,
    /// Segments after a truncation's last seq, left by a crash before
    /// their removal was durable.
    pub truncated: Vec<PathBuf>,
}

impl Sorted {
    pub fn new(segments: Vec<(u64, PathBuf)>, state: &LogState) -> Sorted {
        let mut sorted = Sorted {
            purged: Vec::new(),
            kept: Vec::new(),
            truncated: Vec::new(),
        };
        for (first_seq, path) in segments {
            // No record has seq 0, so no purge leaves a segment named 0:
            // such a file is misnamed, and kept for the scan to refuse
            // (removing it would lose whatever records it holds).
            if first_seq < state.first_seq && first_seq > 0 {
                sorted.purged.push(path);
            } else if state
                .truncate_after
                .is_some_and(|last| first_seq > last.max(state.first_seq))
            {
                // Every record in it is after the truncation's last, and
                // it is not the first kept (which stays, maybe emptied).
                sorted.truncated.push(path);
            } else {
                sorted.kept.push((first_seq, path));
            }
        }
        sorted
    }
}

/// The index a scan starts from: every stream a purge emptied (or
/// shortened) at the version it had before the first kept record.
pub(super) fn seeded_index(state: &LogState) -> Index {
    let mut index = Index::default();
    for (stream, version) in &state.purged_versions {
        index.seed(stream, *version);
    }
    index
}

/// Replaces the log's state file with `state`, durably: see
/// [`replace_file`].
pub(crate) fn write_state(vfs: &dyn Vfs, dir: &Path, state: &LogState) -> Result<(), StateWrite> {
    replace_file(vfs, dir, STATE_FILE_NAME, STATE_TEMP_NAME, &state.encode())
}

/// Replaces the bookkeeping file `name` in `dir` with `bytes`, durably:
/// written whole under `temp` and synced, renamed over the old one, and
/// the directory synced. A crash anywhere leaves the old file or the new
/// one (the rename is atomic; the temporary file is never read). Returns
/// before the rename if writing the new file fails: nothing changed then.
/// After the rename, an error leaves the outcome to the next recovery.
pub(crate) fn replace_file(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    temp: &str,
    bytes: &[u8],
) -> Result<(), StateWrite> {
    let temp = dir.join(temp);
    let written = (|| {
        // One left by an earlier failure is never read: replace it.
        match vfs.remove_file(&temp) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        let file = vfs.open(&temp, OpenMode::CreateNew)?;
        file.write_at(bytes, 0)?;
        file.sync_data()
    })();
    written.map_err(StateWrite::Before)?;
    vfs.rename(&temp, &dir.join(name))
        .and_then(|()| vfs.sync_dir(dir))
        .map_err(StateWrite::After)
}

/// How writing the state file failed.
#[derive(Debug)]
pub(crate) enum StateWrite {
    /// Before the rename: the old state file still rules.
    Before(io::Error),
    /// At or after the rename: either file may rule after a crash.
    After(io::Error),
}

impl StateWrite {
    pub fn into_io(self) -> io::Error {
        match self {
            StateWrite::Before(error) | StateWrite::After(error) => error,
        }
    }
}

//! Opening a log: recovery's scan, then (for a writer) everything the scan
//! found made durable before anything is built on it, then the `Log`
//! assembled. A read-only opening runs the scan alone and has no writer.

use std::io;
use std::path::Path;
use std::sync::Arc;

use durlog_vfs::{FileLock, OpenMode, PosixVfs, Vfs, VfsFile};

use crate::error::Error;
use crate::format::{CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, LogState, encode_consumers};
use crate::recovery::{self, RecoveryReport, Scanned, Tail, replace_file, write_state};
use crate::segment::Handles;
use crate::stats::Stats;
use crate::sync::{Mutex, Rank};

use super::feed::Feed;
use super::group::{GroupCommit, Published};
use super::index_files::Indexer;
use super::settings::{NextSegment, Options, Settings, Tuning};
use super::streams::take_back;
use super::writer::{Writer, WriterSide};
use super::{Log, Retention, Shared};

impl Log {
    /// Opens (creating it if missing) the log in `dir` on the host's file
    /// system, recovering from any crash. The next segment is prepared in
    /// the background ([`NextSegment::Background`]).
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Log, Error> {
        Log::open_tuned(PosixVfs, dir, options, Tuning::default())
    }

    /// Opens the log in `dir` on any file system backend. The log starts no
    /// thread of its own, so that on a simulated disk a run depends on its
    /// seed alone: the next segment is prepared only when the caller calls
    /// [`Log::prepare_next_segment`] ([`NextSegment::OnCall`]), else the
    /// roll creates it.
    pub fn open_with_vfs(
        vfs: impl Vfs + 'static,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Log, Error> {
        let tuning = Tuning {
            next_segment: NextSegment::OnCall,
            ..Tuning::default()
        };
        Log::open_tuned(vfs, dir, options, tuning)
    }

    /// [`Log::open_with_vfs`] with [`Tuning`] knobs.
    pub fn open_tuned(
        vfs: impl Vfs + 'static,
        dir: impl AsRef<Path>,
        options: Options,
        tuning: Tuning,
    ) -> Result<Log, Error> {
        let settings = Arc::new(Settings::new(Arc::new(vfs), dir.as_ref(), options, tuning));
        let (vfs, dir) = (settings.vfs.as_ref(), settings.dir.as_path());
        vfs.create_dir_all(dir)?;
        let lock = take_lock(&settings)?;
        let trust = settings.tuning.open_trusts_index_files;
        let scanned = recovery::scan(vfs, dir, settings.group_bytes_max, &mut |_| {}, trust)?;
        let mut scanned = scanned;
        let (report, active) = make_durable(vfs, dir, scanned.report.clone(), &mut scanned)?;
        let active_len = scanned.segments.last().map_or(0, |segment| segment.len);
        let size = report.record_bytes;
        let writer = Writer::new(active, active_len, size - active_len);
        let writer = WriterSide::new(Arc::clone(&settings), writer);
        // The scan synced the active segment once: the first sync counted.
        let syncs = u64::from(scanned.segments.last().is_some());
        let mut log = assemble(settings, scanned, report, Some(writer), syncs);
        log.lock = lock;
        // Sealed segments an earlier life left without index files.
        if crate::sync::lock(&log.shared).state.segments.len() > 1 {
            log.indexer.wake();
        }
        Ok(log)
    }

    /// Opens the log in `dir` for reading only: nothing on disk changes (no
    /// directory is created, no torn tail truncated, nothing synced), and
    /// appends fail with `Error::ReadOnly`. Reads see the valid records.
    pub fn open_read_only(vfs: impl Vfs + 'static, dir: impl AsRef<Path>) -> Result<Log, Error> {
        let settings = Settings::new(
            Arc::new(vfs),
            dir.as_ref(),
            Options::default(),
            Tuning::default(),
        );
        let (vfs, dir) = (settings.vfs.as_ref(), settings.dir.as_path());
        let scanned = recovery::scan(vfs, dir, settings.group_bytes_max, &mut |_| {}, false)?;
        log_opened(dir, &scanned.report);
        let report = scanned.report.clone();
        Ok(assemble(Arc::new(settings), scanned, report, None, 0))
    }
}

/// Takes the writer's lock on the directory: one process (and one `Log`)
/// writes a log at a time, or acknowledged appends interleave and vanish.
/// A Vfs that cannot lock is warned about and used without one.
fn take_lock(settings: &Settings) -> Result<Option<Box<dyn FileLock>>, Error> {
    match settings.vfs.lock_file(&settings.lock_path) {
        Ok(lock) => Ok(Some(lock)),
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => Err(Error::Locked {
            dir: settings.dir.clone(),
        }),
        Err(error) if error.kind() == io::ErrorKind::Unsupported => {
            log::warn!(
                "durlog: {} is opened without a lock ({error}): nothing stops a second writer",
                settings.dir.display()
            );
            Ok(None)
        }
        Err(error) => Err(Error::Io(error)),
    }
}

/// Makes durable what the scan found, before anything is built on it: the
/// torn or zero tail cut, the active segment synced (a killed predecessor
/// may have left records, or this cut, only in the page cache), a leftover
/// prepared segment removed, what a purge or a truncation under way had
/// still to remove removed, stale index files removed, and the directory
/// synced; then consumer
/// positions past the end taken back, and a truncation's end recorded in
/// the state file. Returns the report with what was cut,
/// and the active segment's handle.
fn make_durable(
    vfs: &dyn Vfs,
    dir: &Path,
    mut report: RecoveryReport,
    scanned: &mut Scanned,
) -> Result<(RecoveryReport, Option<Arc<dyn VfsFile>>), Error> {
    let leftovers = &scanned.leftovers;
    let active = match scanned.segments.last() {
        None => None,
        Some(last) => {
            let file: Arc<dyn VfsFile> = Arc::from(vfs.open(&last.path, OpenMode::ReadWrite)?);
            // Truncate, never skip: garbage left in place would make the
            // next recovery drop the records written after it. A zero
            // tail is cut too, so every segment ends at its last record.
            if let Tail::Torn { offset, bytes, .. } | Tail::Zeros { offset, bytes, .. } =
                &report.tail
            {
                file.set_len(*offset)?;
                report.bytes_truncated = *bytes;
            }
            if let Some((path, offset)) = &leftovers.cut {
                debug_assert_eq!(
                    path, &last.path,
                    "a truncation ends in the last segment kept"
                );
                debug_assert_eq!(*offset, last.len, "the cut is at the last record kept");
                file.set_len(*offset)?;
            }
            warn_torn_tail(&report);
            file.sync_data()?;
            Some(file)
        }
    };
    // A next segment prepared by an earlier life goes: after a crash in
    // the middle of a roll it may even be a second name of the last
    // segment. The directory sync below makes the removal durable.
    let next_segment = scanned.next_segment.iter();
    let temps = scanned.state_files.temps.iter();
    // Segments a purge or a truncation had still to remove: the state
    // file already says they are not the log's.
    let removed = leftovers.purged.iter().chain(&leftovers.truncated);
    // Index files that do not agree with their segments: derived data,
    // written again by `Log::write_index_files`.
    let stale = report.stale_index_files.iter().map(|(path, _)| path);
    for path in next_segment.chain(temps).chain(removed).chain(stale) {
        vfs.remove_file(path)?;
    }
    vfs.sync_dir(dir)?;
    // Positions past the log's end name seqs that will be used again: a
    // truncation's (finished here, as it would have done) or records the
    // disk lost (acknowledged ones too, when damage took them). They go
    // back with the records, or a consumer would skip the new ones.
    let last_seq = scanned
        .state
        .truncate_after
        .map_or(report.last_seq, |last| last.min(report.last_seq));
    let consumers = &mut scanned.tables.consumers;
    if take_back(consumers, last_seq) {
        let bytes = encode_consumers(consumers);
        replace_file(vfs, dir, CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, &bytes)
            .map_err(|error| Error::Io(error.into_io()))?;
    }
    if scanned.state.truncate_after.is_some() {
        // Only now that the removals and the cut are durable may the state
        // file stop naming the truncation.
        let finished = LogState {
            truncate_after: None,
            ..scanned.state.clone()
        };
        write_state(vfs, dir, &finished).map_err(|error| Error::Io(error.into_io()))?;
    }
    log_opened(dir, &report);
    Ok((report, active))
}

fn warn_torn_tail(report: &RecoveryReport) {
    if let Tail::Torn {
        file,
        offset,
        bytes,
        reason,
        may_be_acknowledged,
    } = &report.tail
    {
        let what = if *may_be_acknowledged {
            "one flipped bit would make it valid, so it may have been an acknowledged record damaged at rest"
        } else {
            "an append that was never acknowledged"
        };
        log::warn!(
            "durlog: truncated a torn tail of {bytes} bytes at {}:{offset} ({reason}; {what}); last good seq {}",
            file.display(),
            report.last_seq
        );
    }
}

fn log_opened(dir: &Path, report: &RecoveryReport) {
    log::info!(
        "durlog: opened {}: {} segments, {} records, last seq {}, {:?}",
        dir.display(),
        report.segments,
        report.records,
        report.last_seq,
        report.tail
    );
}

/// The `Log` over what the scan found.
fn assemble(
    settings: Arc<Settings>,
    scanned: Scanned,
    report: RecoveryReport,
    writer: Option<Arc<WriterSide>>,
    syncs: u64,
) -> Log {
    let mut state = Published {
        index: scanned.index,
        next_id: scanned.segments.len() as u32,
        segments: scanned.segments,
        first_seq: report.first_seq,
        changes: 0,
        last_seq: report.last_seq,
        size: report.record_bytes,
        tables: scanned.tables,
    };
    state.seal_indexed();
    let feed = Arc::new(Feed::new(state.first_seq, state.last_seq));
    feed.set_stream_rules(!state.tables.streams.is_empty());
    let shared = Arc::new(Mutex::new(
        Rank::Shared,
        Shared {
            commit: GroupCommit::default(),
            state,
            stats: Stats {
                syncs,
                ..Stats::default()
            },
            retention: Retention::default(),
        },
    ));
    let indexer = Arc::new(Indexer::new(Arc::clone(&settings), Arc::clone(&shared)));
    Log {
        settings,
        recovery: report,
        feed,
        shared,
        writer,
        indexer,
        tables_file: Mutex::new(Rank::Tables, Default::default()),
        handles: Mutex::new(Rank::Leaf, Handles::default()),
        index_cache: Mutex::new(Rank::Leaf, Default::default()),
        spare_payloads: Mutex::new(Rank::Leaf, Vec::new()),
        lock: None,
    }
}

//! The real engine (`Log::open`, the POSIX backend, its preallocation and
//! the thread that prepares segments) on real failing disks: an ext4 image
//! and a tmpfs that fill, a segment roll that finds no room, a purge on a
//! full disk, a thin-provisioned device whose ENOSPC comes late (from
//! `fdatasync`), one whose journaled ext4 then turns read-only, and a
//! file-size limit (a short write, then EFBIG). In every case the append
//! that cannot be written is an `Error::Io` naming its segment file (the
//! purge's names its state file), nothing it wrote stays behind (where the
//! cut-back itself failed, the log is poisoned and its reopen keeps the
//! failed append whole or drops it), every acknowledged event reads back
//! exactly after a reopen (after a remount, where the device keeps what it
//! was told), and appends resume with the next version once there is room.
//! SPEC section 3 and FORMAT.md's "Failures are not crashes" are the
//! contract; the simulator checks the same on `SimVfs`, which never
//! reaches `PosixVfs`.

#[path = "../../vfs/tests/real_disk/mod.rs"]
mod real_disk;

use std::io;
use std::path::{Path, PathBuf};

use durlog::{Error, Event, Expected, Log, Options, Tail, segment_name};
use real_disk::{CHILD_ENV, Ext4, SmallFs};

const STREAM: &str = "orders";

/// Appends past this many have not filled the disk: the test is wrong.
const APPENDS_MAX: u64 = 20_000;

/// The data of `version`'s event: its number, then a pattern, `len` bytes
/// in all, so that a record read back from the wrong place cannot match.
fn event_data(version: u64, len: usize) -> Vec<u8> {
    let mut data = format!("event {version}:").into_bytes();
    data.extend((0..len).map(|at| b'a' + ((at as u64 + version) % 26) as u8));
    data.truncate(len);
    data
}

/// Event sizes of about `bytes`, varied so that records straddle blocks.
fn size_near(bytes: usize) -> impl Fn(u64) -> usize {
    move |version| bytes + (version as usize * 37) % (bytes / 4 + 1)
}

/// What filling the log left: the data of every acknowledged event (that
/// of version v at v - 1) and the error of the append that failed.
struct Filled {
    acked: Vec<Vec<u8>>,
    error: Error,
}

/// Appends one event at a time until an append fails.
fn append_until_failure(log: &Log, size: &impl Fn(u64) -> usize) -> Filled {
    let mut acked = Vec::new();
    for version in 1..=APPENDS_MAX + 1 {
        assert!(
            version <= APPENDS_MAX,
            "{APPENDS_MAX} appends and the disk is still not full"
        );
        let data = event_data(version, size(version));
        match log.append(STREAM, Expected::Any, &[Event::new("put", data.clone())]) {
            Ok(appended) => {
                assert_eq!(appended, version, "versions are dense");
                acked.push(data);
            }
            Err(error) => return Filled { acked, error },
        }
    }
    unreachable!("the loop ends at APPENDS_MAX")
}

/// Asserts `error` is an `Error::Io` of `kind` whose message names `file`
/// (and so the log's directory); returns the message.
fn assert_io_naming(error: &Error, kind: io::ErrorKind, file: &Path) -> String {
    assert_io_naming_one_of(error, &[kind], file)
}

/// [`assert_io_naming`] for an error of any of `kinds`.
fn assert_io_naming_one_of(error: &Error, kinds: &[io::ErrorKind], file: &Path) -> String {
    let message = error.to_string();
    let Error::Io(io_error) = error else {
        panic!("an I/O error, not {error:?}: {message}");
    };
    assert!(
        kinds.contains(&io_error.kind()),
        "an error of {kinds:?}: {message}"
    );
    assert!(
        message.contains(&format!(" {}: ", file.display())),
        "the message names {}: {message}",
        file.display()
    );
    message
}

/// Linux's EIO (the workspace has no libc).
const EIO: i32 = 5;

/// The log's segment files, oldest first.
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list the log")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    files.sort();
    files
}

/// What a failed append must leave, while the log is still open: the
/// versions of the acknowledged appends only, and on disk exactly their
/// records (the cut-back took the failed write's bytes and any zeros
/// preallocated with it).
fn assert_cut_back(log: &Log, dir: &Path, acked: usize) {
    assert_eq!(log.version(STREAM), acked as u64, "the stream's version");
    assert_eq!(log.last_seq(), acked as u64, "one record per append");
    let on_disk: u64 = segment_files(dir)
        .iter()
        .map(|file| std::fs::metadata(file).expect("stat a segment").len())
        .sum();
    assert_eq!(
        on_disk,
        log.size(),
        "the segment files hold exactly the acknowledged records: no partial record, no zeros"
    );
}

/// Reopens the log and checks it holds exactly `acked`, with a clean tail
/// (a cut-back left nothing for recovery to cut).
fn reopen_and_check(dir: &Path, options: &Options, acked: &[Vec<u8>]) -> Log {
    reopen_and_check_after(dir, options, acked, false)
}

/// [`reopen_and_check`]; after a cut-back that failed (`poisoned`), the
/// append it could not cut may be there torn or as zeros (the device
/// refused its pages: seen here once, a record with a bad CRC where the
/// failed append was), and recovery must cut it, never an acknowledged
/// record.
fn reopen_and_check_after(dir: &Path, options: &Options, acked: &[Vec<u8>], poisoned: bool) -> Log {
    let log = Log::open(dir, options.clone()).expect("the log reopens");
    let tail = &log.recovery().tail;
    let expected = match tail {
        Tail::Clean => true,
        Tail::Torn {
            may_be_acknowledged,
            ..
        } => poisoned && !may_be_acknowledged,
        Tail::Zeros { .. } => poisoned,
        _ => false,
    };
    assert!(
        expected,
        "nothing half-written after the failed append (poisoned: {poisoned}): {tail:?}"
    );
    assert_reads_back(&log, acked);
    log
}

fn assert_reads_back(log: &Log, acked: &[Vec<u8>]) {
    let events = log.read(STREAM, 1, usize::MAX).expect("read the stream");
    assert_eq!(
        events.len(),
        acked.len(),
        "every acknowledged event and nothing else"
    );
    for (event, data) in events.iter().zip(acked) {
        assert!(
            event.data == *data,
            "version {} reads back exactly",
            event.version
        );
    }
    assert_eq!(log.version(STREAM), acked.len() as u64);
}

/// With room again, appends resume at the next version; appends `count`.
fn append_more(log: &Log, acked: &mut Vec<Vec<u8>>, count: u64) {
    for _ in 0..count {
        let version = acked.len() as u64 + 1;
        let data = event_data(version, 3000);
        let appended = log
            .append(STREAM, Expected::Any, &[Event::new("put", data.clone())])
            .unwrap_or_else(|error| panic!("with room again, append {version}: {error}"));
        assert_eq!(appended, version, "appends resume at the next version");
        acked.push(data);
    }
}

/// Which segment file the append that fails writes to.
#[derive(Clone, Copy, Debug)]
enum Failing {
    /// The active one, the last file of the log.
    Last,
    /// A new one, for the record after the acknowledged ones (a roll).
    New,
}

/// How a disk is filled through the log.
struct Filling {
    options: Options,
    /// Room left before the log starts.
    room_bytes: u64,
    /// Events of about this size.
    event_bytes: usize,
    failing: Failing,
    /// Drop the page cache (unmount and mount again) before each reopen,
    /// as a reboot would: ext4 only.
    remount: bool,
}

/// Fills a disk through the log until an append fails for lack of room,
/// and checks the failure, a reopen, and the appends once room is made.
fn check_a_disk_that_fills(mut fs: SmallFs, filling: Filling) {
    let Filling {
        options,
        room_bytes,
        event_bytes,
        failing,
        remount,
    } = filling;
    let dir = fs.path().join("log");
    let filler = fs.fill(room_bytes);
    let log = Log::open(&dir, options.clone()).expect("open the log");
    let size = size_near(event_bytes);
    let Filled { mut acked, error } = append_until_failure(&log, &size);
    let file = match failing {
        Failing::Last => segment_files(&dir).pop().expect("a segment"),
        Failing::New => dir.join(segment_name(acked.len() as u64 + 1)),
    };
    let message = assert_io_naming(&error, io::ErrorKind::StorageFull, &file);
    let free = fs.available_bytes();
    eprintln!(
        "after {} appends, {free} bytes free: {message}",
        acked.len()
    );
    // The append failed because its record did not fit, not because of
    // the zeros preallocated after it.
    let record_bytes_max = size(acked.len() as u64 + 1) as u64 + 256;
    assert!(
        free < record_bytes_max + 4096,
        "the log filled the disk: {free} bytes were free when an append of at most {record_bytes_max} bytes failed"
    );
    assert!(
        !log.is_poisoned(),
        "the cut-back succeeded: the log goes on"
    );
    assert_cut_back(&log, &dir, acked.len());
    // Still full: the next append fails the same way and changes nothing.
    let again = log
        .append(STREAM, Expected::Any, &[Event::new("put", vec![7; 3000])])
        .expect_err("the disk is still full");
    assert!(
        matches!(&again, Error::Io(error) if error.kind() == io::ErrorKind::StorageFull),
        "{again}"
    );
    assert_cut_back(&log, &dir, acked.len());
    log.close().expect("close");

    if remount {
        fs.remount();
    }
    let log = reopen_and_check(&dir, &options, &acked);
    std::fs::remove_file(&filler).expect("free the space");
    append_more(&log, &mut acked, 20);
    log.close().expect("close");
    if remount {
        fs.remount();
    }
    let log = Log::open(&dir, options).expect("reopen");
    assert_reads_back(&log, &acked);
}

/// The default options: 64 MiB segments, zeros preallocated a chunk (1
/// MiB) ahead of the records, a next segment prepared by the log's thread.
#[test]
fn a_full_ext4_fails_the_append_that_does_not_fit_and_keeps_every_acknowledged_one() {
    let test = "a_full_ext4_fails_the_append";
    let Some(fs) = SmallFs::ext4(test, 16 << 20, Ext4::Journaled) else {
        return;
    };
    let filling = Filling {
        options: Options::default(),
        room_bytes: 2 << 20,
        event_bytes: 3000,
        failing: Failing::Last,
        remount: true,
    };
    check_a_disk_that_fills(fs, filling);
}

#[test]
fn a_full_tmpfs_fails_the_append_that_does_not_fit_and_keeps_every_acknowledged_one() {
    let Some(fs) = SmallFs::tmpfs("a_full_tmpfs_fails_the_append", 4 << 20) else {
        return;
    };
    let filling = Filling {
        options: Options::default(),
        room_bytes: 2 << 20,
        event_bytes: 3000,
        failing: Failing::Last,
        remount: false,
    };
    check_a_disk_that_fills(fs, filling);
}

/// Segments smaller than a record: every append rolls to a new segment
/// (created, or renamed from the one the log's thread prepared), so the
/// append that finds no room is a roll's, and its error names the new
/// segment.
#[test]
fn a_roll_that_finds_no_room_fails_and_the_log_goes_on() {
    let test = "a_roll_that_finds_no_room";
    let Some(fs) = SmallFs::ext4(test, 16 << 20, Ext4::Journaled) else {
        return;
    };
    let filling = Filling {
        options: Options {
            segment_bytes: 1024,
            ..Options::default()
        },
        room_bytes: 256 << 10,
        event_bytes: 3000,
        failing: Failing::New,
        remount: true,
    };
    check_a_disk_that_fills(fs, filling);
}

/// A purge writes the state file before it removes a segment (FORMAT.md,
/// "Retention and truncation"): on a full disk that write fails, and the
/// purge must fail before anything changed. With a block of room it
/// succeeds, and the room it frees takes appends again.
#[test]
fn a_purge_on_a_full_disk_fails_before_its_state_file_changes_anything() {
    let test = "a_purge_on_a_full_disk";
    let Some(mut fs) = SmallFs::ext4(test, 16 << 20, Ext4::Journaled) else {
        return;
    };
    let dir = fs.path().join("log");
    let options = Options {
        segment_bytes: 16 << 10,
        ..Options::default()
    };
    let filler = fs.fill(256 << 10);
    let log = Log::open(&dir, options.clone()).expect("open the log");
    let Filled { mut acked, error } = append_until_failure(&log, &size_near(3000));
    assert!(
        matches!(&error, Error::Io(error) if error.kind() == io::ErrorKind::StorageFull),
        "{error}"
    );
    // Whatever room the failed append left, none is left now.
    let last_room = fs.fill_with("filler-2", 0);
    let segments = segment_files(&dir);
    assert!(segments.len() > 4, "sealed segments to purge: {segments:?}");
    let half = acked.len() as u64 / 2;

    let error = log
        .purge_before(half)
        .expect_err("no room for the state file");
    let message = assert_io_naming(
        &error,
        io::ErrorKind::StorageFull,
        &dir.join("durlog.state.new"),
    );
    eprintln!("purge on a full disk: {message}");
    assert_eq!(log.first_seq(), 1, "the failed purge purged nothing");
    assert!(
        !log.is_poisoned(),
        "it failed before the state file changed"
    );
    assert_eq!(segment_files(&dir), segments, "no segment was removed");
    assert_reads_back(&log, &acked);

    std::fs::remove_file(&last_room).expect("remove the second filler");
    give_back(&filler, 64 << 10);
    let first_seq = log.purge_before(half).expect("a purge with room");
    assert!(
        first_seq > 1,
        "the purge removed segments: first seq {first_seq}"
    );
    let segments_left = segment_files(&dir).len();
    assert!(segments_left < segments.len(), "segments removed");
    // What the purge freed takes appends again, with the filler in place.
    append_more(&log, &mut acked, 3);
    log.close().expect("close");
    fs.remount();
    let log = Log::open(&dir, options).expect("reopen");
    assert_eq!(log.first_seq(), first_seq, "the purge is durable");
    let kept = log
        .read(STREAM, first_seq, usize::MAX)
        .expect("read what the purge kept");
    assert_eq!(kept.len(), acked.len() - (first_seq as usize - 1));
    for event in &kept {
        assert!(
            event.data == acked[event.version as usize - 1],
            "version {} reads back exactly",
            event.version
        );
    }
    drop(log);
    std::fs::remove_file(filler).expect("free the space");
}

/// A thin-provisioned device fills under a file system that believes it
/// has room: every write succeeds and the ENOSPC comes from `fdatasync`,
/// or an EIO: one CI run got EIO from that `fdatasync` where every other
/// run, and dozens here, got ENOSPC. A data page whose writeback fails
/// records the device's errno, a metadata block (a bitmap, an inode table)
/// only that its write failed, and which reaches the full device first is
/// the kernel's choice. The log's contract is the same for both.
/// The append fails naming its segment and, in the same mount, the log
/// reopens with every acknowledged event and nothing else; once the device
/// has room, appends resume.
///
/// No remount here: on this device (a loop device over a full tmpfs),
/// ext4 without a journal loses the whole page whose writeback failed,
/// the acknowledged bytes it already held included (seen with Python
/// alone, no durlog: records of 1000 bytes lose the last acknowledged one
/// from its page boundary on; records of exactly 4096 bytes lose nothing).
/// An append shares the last, partly filled page with acknowledged
/// records, so after a remount the test would measure that, not the log
/// (FORMAT.md, "Assumptions about the medium").
/// `a_thin_device_under_a_journal` below does remount.
#[test]
fn a_late_enospc_from_fdatasync_fails_the_append_and_cuts_it_back() {
    let test = "a_late_enospc_from_fdatasync";
    let kind = Ext4::ThinNoJournal {
        headroom_bytes: 512 << 10,
    };
    let Some(fs) = SmallFs::ext4(test, 64 << 20, kind) else {
        return;
    };
    let dir = fs.path().join("log");
    let options = Options::default();
    let log = Log::open(&dir, options.clone()).expect("open the log");
    let Filled { mut acked, error } = append_until_failure(&log, &size_near(3000));
    let last = segment_files(&dir).pop().expect("a segment");
    // EIO has no stable `ErrorKind` of its own: its kind is the one that
    // `from_raw_os_error` gives it.
    let eio = io::Error::from_raw_os_error(EIO).kind();
    let message = assert_io_naming_one_of(&error, &[io::ErrorKind::StorageFull, eio], &last);
    assert!(
        message.contains(&format!("fdatasync {}", last.display())),
        "the error came from the sync, not the write: {message}"
    );
    eprintln!(
        "after {} appends, poisoned: {}: {message}",
        acked.len(),
        log.is_poisoned()
    );
    if log.is_poisoned() {
        // The cut-back's own sync met the full device too.
        let refused = log
            .append(STREAM, Expected::Any, &[Event::new("put", vec![7; 30])])
            .expect_err("a poisoned log refuses appends");
        assert!(matches!(refused, Error::Poisoned), "{refused}");
    } else {
        assert_cut_back(&log, &dir, acked.len());
    }
    let poisoned = log.is_poisoned();
    log.close().expect("close");

    let log = reopen_and_check_after(&dir, &options, &acked, poisoned);
    fs.free_device();
    append_more(&log, &mut acked, 20);
    log.close().expect("close");
    let log = Log::open(&dir, options).expect("reopen");
    assert_reads_back(&log, &acked);
}

/// The same device under a journaled ext4: the device's refusal aborts the
/// journal, `fdatasync` fails with EIO and the file system turns
/// read-only, so the cut-back cannot be made durable and the log is
/// poisoned. After a remount (the journal replayed, the device given room)
/// every acknowledged event reads back from the device; the append that
/// failed may be there whole or not at all (FORMAT.md: a reopen recovers
/// from what is really on disk), never in part.
#[test]
fn a_thin_device_under_a_journal_poisons_the_log_and_keeps_every_acknowledged_event() {
    let test = "a_thin_device_under_a_journal";
    let kind = Ext4::ThinJournaled {
        headroom_bytes: 512 << 10,
    };
    let Some(mut fs) = SmallFs::ext4(test, 64 << 20, kind) else {
        return;
    };
    let dir = fs.path().join("log");
    let options = Options::default();
    let log = Log::open(&dir, options.clone()).expect("open the log");
    let size = size_near(3000);
    let Filled { mut acked, error } = append_until_failure(&log, &size);
    let message = error.to_string();
    let last = segment_files(&dir).pop().expect("a segment");
    assert!(
        matches!(&error, Error::Io(_)) && message.contains(&format!(" {}: ", last.display())),
        "an I/O error naming the segment: {message}"
    );
    eprintln!(
        "after {} appends, poisoned: {}: {message}",
        acked.len(),
        log.is_poisoned()
    );
    assert!(
        log.is_poisoned(),
        "a read-only file system takes no cut-back"
    );
    let refused = log
        .append(STREAM, Expected::Any, &[Event::new("put", vec![7; 30])])
        .expect_err("a poisoned log refuses appends");
    assert!(matches!(refused, Error::Poisoned), "{refused}");
    drop(log);

    fs.free_device();
    fs.remount();
    let log = Log::open(&dir, options.clone()).expect("the log reopens after the remount");
    let events = log.read(STREAM, 1, usize::MAX).expect("read the stream");
    let failed = event_data(acked.len() as u64 + 1, size(acked.len() as u64 + 1));
    assert!(
        events.len() == acked.len() || events.len() == acked.len() + 1,
        "every acknowledged event, and at most the one that failed: {} of {}",
        events.len(),
        acked.len()
    );
    for event in &events {
        let expected = acked.get(event.version as usize - 1).unwrap_or(&failed);
        assert!(
            event.data == *expected,
            "version {} reads back exactly",
            event.version
        );
    }
    if events.len() > acked.len() {
        acked.push(failed);
    }
    append_more(&log, &mut acked, 20);
    log.close().expect("close");
    fs.remount();
    let log = Log::open(&dir, options).expect("reopen");
    assert_reads_back(&log, &acked);
}

/// The file-size limit of the child that appends (`RLIMIT_FSIZE`), above
/// the preallocation threshold (64 KiB) so that zeros ahead of the records
/// meet it first, and not a multiple of the records' sizes.
const LIMIT_BYTES: u64 = 100 << 10;

/// Under a file-size limit the kernel writes up to the limit and returns
/// the short count, then refuses with EFBIG (SIGXFSZ ignored). The append
/// that crosses the limit must fail, naming the segment, and be cut back;
/// every acknowledged event reads back after a reopen without the limit,
/// and appends resume.
#[test]
fn a_file_size_limit_fails_the_append_that_crosses_it_and_cuts_it_back() {
    let test = "a_file_size_limit_fails_the_append_that_crosses_it_and_cuts_it_back";
    let options = Options {
        segment_bytes: 1 << 20,
        ..Options::default()
    };
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        return append_under_the_limit(Path::new(&dir), options);
    }
    let root = tempfile::tempdir().expect("a temporary directory");
    let dir = root.path().join("log");
    let report = real_disk::run_with_file_size_limit(test, LIMIT_BYTES, text(&dir));
    let field = |name: &str| -> String {
        let prefix = format!("{name} ");
        report
            .lines
            .iter()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("the child reports {name}: {:?}", report.lines))
            .to_owned()
    };
    let acked: u64 = field("acked").parse().expect("a number");
    let size: u64 = field("size").parse().expect("a number");
    let segment = dir.join(segment_name(1));
    let expected = format!(
        "FileTooLarge: I/O error: write {}: File too large (os error 27)",
        segment.display()
    );
    assert_eq!(
        field("error"),
        expected,
        "the append across the limit fails"
    );
    assert_eq!(field("poisoned"), "false", "the cut-back succeeded");
    assert_eq!(
        field("segment-bytes"),
        size.to_string(),
        "the segment holds exactly the acknowledged records"
    );
    // The failing append began below the limit: the kernel wrote part of
    // it (a short write) before EFBIG. And the zeros preallocated ahead of
    // the records did not stop the log short of the limit.
    let record_bytes_max = size_near(3000)(acked + 1) as u64 + 256;
    assert!(
        size < LIMIT_BYTES && LIMIT_BYTES - size < record_bytes_max,
        "the log filled the file to within a record of the limit: {size} of {LIMIT_BYTES}"
    );
    eprintln!(
        "under a file-size limit of {LIMIT_BYTES} bytes, after {acked} appends ({size} bytes): {}",
        field("error")
    );

    let mut acked: Vec<Vec<u8>> = (1..=acked)
        .map(|version| event_data(version, size_near(3000)(version)))
        .collect();
    let log = reopen_and_check(&dir, &options, &acked);
    append_more(&log, &mut acked, 20);
    log.close().expect("close");
    let log = Log::open(&dir, options).expect("reopen");
    assert_reads_back(&log, &acked);
}

/// The child's side: appends until one fails, and reports.
fn append_under_the_limit(dir: &Path, options: Options) {
    real_disk::assert_file_size_limit();
    let log = Log::open(dir, options).expect("open the log");
    let Filled { acked, error } = append_until_failure(&log, &size_near(3000));
    let kind = match &error {
        Error::Io(error) => format!("{:?}", error.kind()),
        other => format!("not I/O: {other:?}"),
    };
    let segment = std::fs::metadata(dir.join(segment_name(1))).expect("stat the segment");
    real_disk::report(format!("acked {}", acked.len()));
    real_disk::report(format!("error {kind}: {error}"));
    real_disk::report(format!("poisoned {}", log.is_poisoned()));
    real_disk::report(format!("size {}", log.size()));
    real_disk::report(format!("segment-bytes {}", segment.len()));
    log.close().expect("close");
}

/// Cuts `bytes` off the end of `filler` and syncs it, which makes them
/// free (ext4 reuses freed blocks once the journal commits).
fn give_back(filler: &Path, bytes: u64) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(filler)
        .expect("open the filler");
    let len = file.metadata().expect("stat the filler").len();
    file.set_len(len - bytes)
        .and_then(|()| file.sync_all())
        .expect("shrink the filler");
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temporary path")
}

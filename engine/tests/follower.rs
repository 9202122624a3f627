//! `Follower`: a reader of the segment files for processes that share no
//! memory with the writer. Over seeded random logs (small segments, so it
//! crosses many rolls; purges; metadata and deletions), every poll hands
//! over exactly what the writer's own `read_all_filtered` gives from the
//! same seq at the same moment; a purge of unread records is `Purged`, a
//! truncation that cut records it read is refused, named, for good; a
//! damaged record before a later segment is refused, named. And
//! `PositionFile`, where such a consumer keeps its position: what it
//! acknowledged survives every fault the simulated disk injects.

use durlog::vfs::{FaultConfig, FaultKind, OpenMode, SimVfs, Vfs};
use durlog::{
    Commit, Deletion, Error, Event, Expected, Filter, Follower, Log, Options, PositionFile,
    StreamMetadata, segment_name,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;

use common::clock;

fn options(rng: &mut ChaCha8Rng) -> Options {
    Options {
        segment_bytes: rng.random_range(150..1500),
        ..clock(7)
    }
}

fn append_random(log: &Log, rng: &mut ChaCha8Rng) {
    let stream = format!("s{}", rng.random_range(0..3));
    let events: Vec<Event> = (0..rng.random_range(1..4))
        .map(|_| {
            let data = vec![rng.random_range(1..=255u8); rng.random_range(0..120)];
            Event::new(["a", "b"][rng.random_range(0..2)], data)
        })
        .collect();
    match log.append(&stream, Expected::Any, &events) {
        Ok(_) | Err(Error::StreamDeleted { .. }) => {}
        Err(error) => panic!("append to {stream}: {error}"),
    }
}

fn random_filter(rng: &mut ChaCha8Rng) -> Filter {
    let mut filter = Filter::all();
    if rng.random_bool(0.3) {
        filter = filter.stream_prefix(&format!("s{}", rng.random_range(0..3)));
    }
    if rng.random_bool(0.3) {
        filter = filter.event_type("a");
    }
    if rng.random_bool(0.5) {
        filter = filter.applying_metadata();
    }
    filter
}

/// Polls until a poll finds nothing, checking each against the writer's
/// `read_all_filtered` from the follower's seq before it.
fn drain(
    seed: u64,
    log: &Log,
    vfs: &SimVfs,
    follower: &mut Follower<SimVfs>,
    filter: &Filter,
) -> usize {
    let mut handed = 0;
    loop {
        let from = follower.next_seq();
        let want = match log.read_all_filtered(from, usize::MAX, filter) {
            Ok(want) => want,
            Err(Error::Purged { first_seq }) => {
                match follower.poll() {
                    Err(Error::Purged { first_seq: told }) => assert_eq!(told, first_seq),
                    other => panic!("seed {seed}: from {from} after a purge: {other:?}"),
                }
                *follower =
                    Follower::new(vfs.clone(), "/log", first_seq).with_filter(filter.clone());
                continue;
            }
            Err(error) => panic!("seed {seed}: read_all_filtered({from}): {error}"),
        };
        let got: Vec<Commit> = follower
            .poll()
            .unwrap_or_else(|error| panic!("seed {seed}: poll from {from}: {error}"));
        // Records under 2 KiB each: a poll (256 KiB) reads all that is new.
        assert_eq!(got, want, "seed {seed}: poll from seq {from}");
        let end = log.last_seq() + 1;
        assert_eq!(follower.next_seq(), from.max(end), "seed {seed}");
        if got.is_empty() {
            return handed;
        }
        handed += got.len();
    }
}

#[test]
fn each_poll_hands_over_what_the_writer_reads_from_the_same_seq() {
    let mut handed = 0;
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let log = Log::open_with_vfs(vfs.clone(), "/log", options(&mut rng)).unwrap();
        let filter = random_filter(&mut rng);
        let from = rng.random_range(0..4);
        let mut follower = Follower::new(vfs.clone(), "/log", from).with_filter(filter.clone());
        for _ in 0..rng.random_range(0..80) {
            match rng.random_range(0..100) {
                0..70 => append_random(&log, &mut rng),
                70..90 => handed += drain(seed, &log, &vfs, &mut follower, &filter),
                90..94 => {
                    let before = rng.random_range(1..=log.last_seq() + 1);
                    log.purge_before(before).unwrap();
                }
                94..97 => {
                    let mut metadata = StreamMetadata::default();
                    metadata.max_count = Some(rng.random_range(1..4));
                    log.set_stream_metadata("s1", metadata).unwrap();
                }
                _ => {
                    let deletion = [Deletion::Soft, Deletion::Hard][rng.random_range(0..2)];
                    match log.delete_stream("s2", deletion) {
                        Ok(()) | Err(Error::StreamDeleted { .. }) => {}
                        Err(error) => panic!("seed {seed}: delete: {error}"),
                    }
                }
            }
        }
        handed += drain(seed, &log, &vfs, &mut follower, &filter);
    }
    assert!(handed > 1000, "the seeds handed over only {handed} records");
}

/// A writer's log of `records` appends of one event each to stream "s".
fn log_of(vfs: &SimVfs, records: u64, segment_bytes: u64) -> Log {
    let options = Options {
        segment_bytes,
        ..clock(7)
    };
    let log = Log::open_with_vfs(vfs.clone(), "/log", options).unwrap();
    for i in 0..records {
        let event = Event::new("t", vec![i as u8 + 1; 40]);
        log.append("s", Expected::Any, &[event]).unwrap();
    }
    log
}

fn poll_all(follower: &mut Follower<SimVfs>) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        let commits = follower.poll().unwrap();
        if commits.is_empty() {
            return seqs;
        }
        seqs.extend(commits.iter().map(|commit| commit.seq));
    }
}

#[test]
fn a_truncation_under_a_follower_is_refused_for_good() {
    for (keep, appended_after) in [(5, 0), (5, 3), (5, 9), (9, 0), (1, 12)] {
        let vfs = SimVfs::new(keep);
        let log = log_of(&vfs, 10, 400);
        let mut follower = Follower::new(vfs.clone(), "/log", 1);
        assert_eq!(poll_all(&mut follower), (1..=10).collect::<Vec<_>>());
        log.truncate_after(keep).unwrap();
        for _ in 0..appended_after {
            log.append("s", Expected::Any, &[Event::new("u", vec![9; 40])])
                .unwrap();
        }
        for attempt in 0..2 {
            match follower.poll() {
                Err(Error::Corrupt { reason, file, .. }) => {
                    assert!(reason.contains("seq 10"), "{reason}");
                    assert!(reason.contains("truncated"), "{reason}");
                    assert!(file.starts_with("/log"), "{file:?}");
                }
                other => panic!("keep {keep}, +{appended_after}, poll {attempt}: {other:?}"),
            }
        }
        // A new follower from a seq the truncation kept reads on.
        let mut again = Follower::new(vfs.clone(), "/log", keep + 1);
        let want: Vec<u64> = (keep + 1..=keep + appended_after).collect();
        assert_eq!(poll_all(&mut again), want, "keep {keep}");
    }
}

#[test]
fn a_purge_of_records_it_has_not_read_is_purged() {
    let vfs = SimVfs::new(3);
    let log = log_of(&vfs, 3, 300);
    let mut follower = Follower::new(vfs.clone(), "/log", 2);
    assert_eq!(poll_all(&mut follower), [2, 3]);
    for i in 0..27 {
        log.append("s", Expected::Any, &[Event::new("t", vec![i; 40])])
            .unwrap();
    }
    let first_seq = log.purge_before(20).unwrap();
    assert!(first_seq > follower.next_seq(), "the purge reached it");
    // One that has read nothing yet finds out at its first poll.
    let mut fresh = Follower::new(vfs.clone(), "/log", 2);
    assert!(matches!(fresh.poll(), Err(Error::Purged { first_seq: told }) if told == first_seq));
    for _ in 0..2 {
        match follower.poll() {
            Err(Error::Purged { first_seq: told }) => assert_eq!(told, first_seq),
            other => panic!("{other:?}"),
        }
    }
    // Records it had read to the end of their segment may go unnoticed.
    let mut ahead = Follower::new(vfs.clone(), "/log", first_seq);
    let read = poll_all(&mut ahead);
    log.purge_before(log.last_seq()).unwrap();
    log.append("s", Expected::Any, &[Event::new("t", vec![1])])
        .unwrap();
    assert_eq!(poll_all(&mut ahead), vec![log.last_seq()], "after {read:?}");
}

#[test]
fn a_damaged_record_before_a_later_segment_is_named() {
    let vfs = SimVfs::new(4);
    let log = log_of(&vfs, 20, 300);
    log.close().unwrap();
    let first = segment_name(1);
    let path = std::path::Path::new("/log").join(&first);
    let file = vfs.open(&path, OpenMode::ReadWrite).unwrap();
    // A byte inside the second record: its CRC fails.
    let mut bytes = vec![0; 4096];
    let read = file.read_at(&mut bytes, 0).unwrap();
    let at = durlog::parse_record(&bytes[..read]).unwrap().len as u64 + 20;
    let mut byte = [0];
    file.read_at(&mut byte, at).unwrap();
    file.write_at(&[byte[0] ^ 0x40], at).unwrap();
    let mut follower = Follower::new(vfs.clone(), "/log", 1);
    let first_poll = follower.poll().unwrap();
    assert_eq!(first_poll.iter().map(|c| c.seq).collect::<Vec<_>>(), [1]);
    match follower.poll() {
        Err(Error::Corrupt {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, path);
            assert!(offset > 0 && offset < at, "{offset}");
            assert!(reason.contains("seq 2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// Opens the position file, as often as injected faults make it fail (a
/// power loss armed inside it takes the disk down: it comes back up).
fn open_position(vfs: &SimVfs, seed: u64) -> PositionFile {
    for _ in 0..50 {
        match PositionFile::open(vfs, "/consumer/pos") {
            Ok(file) => return file,
            Err(Error::Io(_)) => vfs.reboot(),
            Err(error) => panic!("seed {seed}: opening a position file: {error}"),
        }
    }
    panic!("seed {seed}: the position file never opened");
}

/// A recorded position survives every power loss, torn or short write,
/// lost page and failed sync the simulated disk injects: after each the
/// file opens with the position last recorded with `Ok`, or one recorded
/// since with an error (never an older one, never garbage); a failed
/// record never takes back the one before.
#[test]
fn a_position_file_keeps_what_it_acknowledged_through_every_fault() {
    let faults = FaultConfig::only(&[
        FaultKind::TornWrite,
        FaultKind::ShortWrite,
        FaultKind::LostUnsyncedPages,
        FaultKind::FailedFsync,
        FaultKind::UnsyncedSizeChange,
        FaultKind::LostDirEntry,
    ]);
    let mut crashes = 0;
    for seed in 0..400 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::with_faults(seed, faults.clone());
        vfs.create_dir_all(std::path::Path::new("/consumer"))
            .unwrap();
        let mut file = open_position(&vfs, seed);
        // What the file may hold: the position acknowledged, or any tried
        // since (None: none acknowledged yet).
        let mut acked = file.position();
        let mut tried: Vec<u64> = Vec::new();
        for step in 0..40u64 {
            if rng.random_bool(0.2) {
                if rng.random_bool(0.5) {
                    vfs.crash_after_ops(rng.random_range(1..3));
                    let _ = file.record(1000 + step);
                    tried.push(1000 + step);
                }
                drop(file);
                vfs.crash();
                crashes += 1;
                file = open_position(&vfs, seed);
                let now = file.position();
                assert!(
                    now == acked || now.is_some_and(|seq| tried.contains(&seq)),
                    "seed {seed} step {step}: the position is {now:?}; acknowledged {acked:?}, \
                     tried since {tried:?}"
                );
                (acked, tried) = (now, Vec::new());
                continue;
            }
            let seq = step * 10 + rng.random_range(0..10);
            match file.record(seq) {
                Ok(()) => (acked, tried) = (Some(seq), Vec::new()),
                Err(Error::Io(_)) => tried.push(seq),
                Err(error) => panic!("seed {seed}: record({seq}): {error}"),
            }
        }
    }
    assert!(crashes > 1000, "only {crashes} power losses");
}

#[test]
fn a_position_file_is_one_consumers_and_refuses_damage() {
    let vfs = SimVfs::new(1);
    vfs.create_dir_all(std::path::Path::new("/consumer"))
        .unwrap();
    let mut file = PositionFile::open(&vfs, "/consumer/pos").unwrap();
    assert_eq!(file.position(), None);
    assert!(matches!(
        PositionFile::open(&vfs, "/consumer/pos"),
        Err(Error::Locked { .. })
    ));
    file.record(41).unwrap();
    file.record(42).unwrap();
    drop(file);
    assert_eq!(
        PositionFile::open(&vfs, "/consumer/pos")
            .unwrap()
            .position(),
        Some(42)
    );
    // Both slots damaged: refused, named; one: the other rules.
    let path = std::path::Path::new("/consumer/pos");
    let raw = vfs.open(path, OpenMode::ReadWrite).unwrap();
    raw.write_at(&[0xFF], 9).unwrap();
    drop(raw);
    assert_eq!(PositionFile::open(&vfs, path).unwrap().position(), Some(41));
    let raw = vfs.open(path, OpenMode::ReadWrite).unwrap();
    raw.write_at(&[0xFF], durlog::POSITION_SLOT_BYTES + 9)
        .unwrap();
    drop(raw);
    match PositionFile::open(&vfs, path) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, path),
        other => panic!("{:?}", other.map(|file| file.position())),
    }
}

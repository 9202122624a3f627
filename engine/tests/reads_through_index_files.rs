//! Reads through index files (FORMAT.md, "What reads do with one"): once
//! a sealed segment has its index file, a stream's records there are
//! found through it, and every read returns what the whole log read in
//! seq order holds for that stream, forward and backward, from any
//! version, at any limit, across purges, truncations (into such a segment
//! too) and reopens (trusting the index files or not), and when index
//! files are damaged (the segment's own bytes are walked then). Seeded:
//! each failure names its seed and step.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{clock, event};
use durlog::format::parse_index_file_name;
use durlog::vfs::SimVfs;
use durlog::{Event, Expected, IndexFiles, Log, NextSegment, Tuning};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIR: &str = "/log";
const SEGMENT_BYTES: u64 = 400;

fn open(vfs: &SimVfs, trusting: bool) -> Log {
    let options = durlog::Options {
        segment_bytes: SEGMENT_BYTES,
        ..clock(7)
    };
    let tuning = Tuning::default().with(|tuning| {
        tuning.next_segment = NextSegment::OnCall;
        tuning.index_files = IndexFiles::OnCall;
        tuning.open_trusts_index_files = trusting;
    });
    Log::open_tuned(vfs.clone(), DIR, options, tuning).expect("open")
}

fn append_random(log: &Log, rng: &mut ChaCha8Rng) {
    let stream = format!("s{}", rng.random_range(0..5));
    let events: Vec<Event> = (0..rng.random_range(1..4))
        .map(|_| {
            event(
                "t",
                &vec![rng.random_range(1..=255u8); rng.random_range(0..60)],
            )
        })
        .collect();
    log.append(&stream, Expected::Any, &events).expect("append");
}

/// Each stream's kept events, from the whole log read in seq order
/// (through each segment's offsets, never a stream's index).
fn truth(log: &Log) -> BTreeMap<String, Vec<Event>> {
    let mut streams: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for commit in log.read_all(log.first_seq(), usize::MAX).expect("read_all") {
        streams
            .entry(commit.stream)
            .or_default()
            .extend(commit.events);
    }
    streams
}

/// Every stream read forward and backward from random versions at
/// random limits: the events `truth` holds there.
fn check_reads(log: &Log, rng: &mut ChaCha8Rng, context: &str) {
    for (stream, events) in truth(log) {
        let first = events[0].version;
        let last = events.last().expect("a kept event").version;
        assert_eq!(log.version(&stream), last, "{context}: {stream}'s version");
        for _ in 0..4 {
            let from = rng.random_range(first..=last);
            let limit = rng.random_range(1..events.len() + 2);
            let at = (from - first) as usize;
            let forward = log.read(&stream, from, limit).expect("read");
            let want: Vec<Event> = events[at..].iter().take(limit).cloned().collect();
            assert_eq!(
                forward, want,
                "{context}: {stream} from {from}, at most {limit}"
            );
            let backward = log
                .read_backward(&stream, from, limit)
                .expect("read backward");
            let want: Vec<Event> = events[..=at].iter().rev().take(limit).cloned().collect();
            assert_eq!(
                backward, want,
                "{context}: {stream} back from {from}, at most {limit}"
            );
        }
        let whole = log.read(&stream, first, usize::MAX).expect("read");
        assert_eq!(whole, events, "{context}: {stream} whole");
    }
}

/// Flips one bit of a random index file, durably.
fn damage_an_index_file(vfs: &SimVfs, rng: &mut ChaCha8Rng) -> bool {
    let indexes: Vec<PathBuf> = (vfs.files().into_iter())
        .filter(|path| parse_index_file_name(path.file_name().unwrap().to_str().unwrap()).is_some())
        .collect();
    if indexes.is_empty() {
        return false;
    }
    let path = &indexes[rng.random_range(0..indexes.len())];
    let mut bytes = vfs.file_contents(path).expect("an index file's bytes");
    let bit = rng.random_range(0..bytes.len() * 8);
    bytes[bit / 8] ^= 1 << (bit % 8);
    vfs.put_durable_file(path, &bytes);
    true
}

#[test]
fn reads_through_index_files_return_what_the_log_holds() {
    let (mut bypassed, mut damaged, mut truncations, mut purges) = (0, 0, 0, 0);
    for seed in 0..40u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::new(seed);
        let mut log = open(&vfs, false);
        // Until an index file is damaged, every one serves.
        let mut damaged_in_life = false;
        for step in 0..60 {
            let context = format!("seed {seed} step {step}");
            match rng.random_range(0..100) {
                0..60 => append_random(&log, &mut rng),
                60..75 => {
                    log.write_index_files().expect("write index files");
                }
                75..80 if log.last_seq() > log.first_seq() => {
                    let seq = rng.random_range(log.first_seq() - 1..log.last_seq());
                    log.truncate_after(seq).expect("truncate");
                    truncations += 1;
                }
                80..84 if log.last_seq() >= log.first_seq() => {
                    let seq = rng.random_range(log.first_seq()..=log.last_seq());
                    log.purge_before(seq).expect("purge");
                    purges += 1;
                }
                84..92 => {
                    bypassed += log.stats().index_files_bypassed;
                    drop(log);
                    log = open(&vfs, rng.random());
                    damaged_in_life = false;
                }
                92..96 if damage_an_index_file(&vfs, &mut rng) => {
                    damaged += 1;
                    damaged_in_life = true;
                }
                _ => {}
            }
            check_reads(&log, &mut rng, &context);
            if !damaged_in_life {
                let bypassed = log.stats().index_files_bypassed;
                assert_eq!(
                    bypassed, 0,
                    "{context}: segments walked, no index file damaged"
                );
            }
        }
        bypassed += log.stats().index_files_bypassed;
    }
    assert!(damaged > 20, "only {damaged} index files damaged");
    assert!(
        bypassed > 10,
        "only {bypassed} reads walked a segment for its damaged index file"
    );
    assert!(
        truncations > 20 && purges > 20,
        "{truncations} truncations, {purges} purges"
    );
}

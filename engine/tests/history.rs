//! `$all` is history (SPEC 14, amended 2026-12-03): a projection rebuilt
//! from the start of the whole log sees exactly what a live projection
//! saw, whatever metadata and deletions the streams got meanwhile, across
//! restarts; and a read of the whole log that asks for the metadata
//! applied (`Filter::applying_metadata`) shows each stream exactly as
//! `read` does.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Backend, clock};
use durlog::{Commit, Deletion, Event, Expected, Filter, Log, StreamMetadata};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const STREAMS: [&str; 3] = ["a", "b", "c"];

/// What a projection keeps: each delivered event as (seq, stream,
/// version, data).
type Seen = Vec<(u64, String, u64, Vec<u8>)>;

fn project(commits: &[Commit], seen: &mut Seen) {
    for commit in commits {
        for event in &commit.events {
            seen.push((
                commit.seq,
                event.stream.clone(),
                event.version,
                event.data.clone(),
            ));
        }
    }
}

/// Takes what a live subscription has delivered, up to `last_seq`.
fn drain(subscription: &mut durlog::Subscription, last_seq: u64, seen: &mut Seen) {
    while seen.last().map_or(0, |last| last.0) < last_seq {
        let commit = subscription
            .next_timeout(Duration::from_secs(10))
            .expect("the live projection reads")
            .expect("an acknowledged record arrives");
        project(std::slice::from_ref(&commit), seen);
    }
}

/// Each stream read as `read` shows it, keyed by stream.
fn by_stream_reads(log: &Log) -> BTreeMap<String, Vec<u64>> {
    STREAMS
        .iter()
        .map(|stream| {
            let versions = log.read(stream, 1, usize::MAX).expect("read");
            let versions = versions.iter().map(|event| event.version).collect();
            (stream.to_string(), versions)
        })
        .collect()
}

/// The same streams as a read of the whole log with metadata applied
/// shows them.
fn by_stream_applied(commits: &[Commit]) -> BTreeMap<String, Vec<u64>> {
    let mut streams: BTreeMap<String, Vec<u64>> = STREAMS
        .iter()
        .map(|stream| (stream.to_string(), Vec::new()))
        .collect();
    for commit in commits {
        let versions = commit.events.iter().map(|event| event.version);
        streams
            .get_mut(&commit.stream)
            .expect("a stream of the test")
            .extend(versions);
    }
    streams
}

/// One seeded life of a log: appends, metadata, soft and hard deletions,
/// restarts; a live projection subscribed from the start of each
/// incarnation; at the end, a rebuild from seq 1 equals what the live
/// projections saw together, and the metadata-applied reads equal the
/// stream reads.
fn one_life(backend: &Backend, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut log = backend.open(clock(0)).expect("open");
    let mut live: Seen = Vec::new();
    let mut subscription = log.subscribe(1);
    let mut hard_deleted = Vec::new();
    for step in 0..rng.random_range(20..60) {
        match rng.random_range(0..10) {
            0..6 => {
                let stream = STREAMS[rng.random_range(0..STREAMS.len())];
                let events: Vec<Event> = (0..rng.random_range(1..4))
                    .map(|index| Event::new("t", format!("{seed}/{step}/{index}")))
                    .collect();
                let appended = log.append(stream, Expected::Any, &events);
                assert_eq!(
                    appended.is_err(),
                    hard_deleted.contains(&stream),
                    "seed {seed} step {step}: append to {stream}: {appended:?}"
                );
            }
            6 | 7 => {
                let stream = STREAMS[rng.random_range(0..STREAMS.len())];
                let mut metadata = StreamMetadata::default();
                metadata.max_count = rng.random_bool(0.5).then(|| rng.random_range(1..4));
                metadata.truncate_before = rng.random_bool(0.5).then(|| rng.random_range(1..8));
                // Refused on a hard-deleted stream: its metadata is final.
                let _ = log.set_stream_metadata(stream, metadata);
            }
            8 => {
                let stream = STREAMS[rng.random_range(0..STREAMS.len())];
                let hard = rng.random_bool(0.2);
                let deletion = if hard { Deletion::Hard } else { Deletion::Soft };
                if log.delete_stream(stream, deletion).is_ok() && hard {
                    hard_deleted.push(stream);
                }
            }
            _ => {
                drain(&mut subscription, log.last_seq(), &mut live);
                drop(subscription);
                log.close().expect("close");
                log = backend.open(clock(0)).expect("reopen");
                subscription = log.subscribe(live.last().map_or(1, |last| last.0 + 1));
            }
        }
    }
    drain(&mut subscription, log.last_seq(), &mut live);
    let mut rebuilt = Seen::new();
    project(
        &log.read_all(1, usize::MAX).expect("read_all"),
        &mut rebuilt,
    );
    assert_eq!(rebuilt, live, "seed {seed}: a rebuild from $all");
    let mut replayed = Seen::new();
    let mut from_start = log.subscribe(1);
    drain(&mut from_start, log.last_seq(), &mut replayed);
    assert_eq!(replayed, live, "seed {seed}: a subscription from seq 1");

    let applied = Filter::all().applying_metadata();
    let shown = log
        .read_all_filtered(1, usize::MAX, &applied)
        .expect("read_all_filtered");
    assert_eq!(
        by_stream_applied(&shown),
        by_stream_reads(&log),
        "seed {seed}: $all with metadata applied, against read"
    );
    let mut subscribed = Vec::new();
    let mut applying = log.subscribe_filtered(1, applied);
    log.close().expect("close");
    for commit in &mut applying {
        subscribed.push(commit.expect("a delivered record"));
    }
    let log = backend.open(clock(0)).expect("reopen");
    assert_eq!(
        by_stream_applied(&subscribed),
        by_stream_reads(&log),
        "seed {seed}: a subscription with metadata applied, against read"
    );
}

#[test]
fn a_projection_rebuilt_from_all_sees_what_the_live_one_saw() {
    for seed in 0..40 {
        one_life(&Backend::sim(seed), seed);
    }
    for seed in 0..3 {
        one_life(&Backend::posix(), seed);
    }
}

//! Reads of every size: a log of a few hundred records over tiny segments,
//! read through runs of a few bytes (`Tuning::read_run_bytes_max`), so that
//! every read of the whole log crosses many runs and segments; each read
//! API (`read`, `read_backward`, `read_all`, `read_all_filtered`,
//! `visit_all`, a
//! subscription caught up and ended by a close) compared whole with a
//! model. With the default 1 MiB run, no test log is larger than one run,
//! and a reader that stops or skips at a run's end passes every other test.

mod common;

use std::ops::ControlFlow;

use common::clock;
use durlog::vfs::SimVfs;
use durlog::{Commit, Event, Expected, Filter, Log, NextSegment, Tuning};
use proptest::prelude::*;

const DIR: &str = "/data/log";
const STREAMS: [&str; 3] = ["a", "ab", "b"];

/// One append: a stream (index into `STREAMS`) and its events' data sizes.
fn append() -> impl Strategy<Value = (usize, Vec<usize>)> {
    (
        0..STREAMS.len(),
        prop::collection::vec(prop_oneof![0usize..8, 8usize..200, 200usize..700], 1..4),
    )
}

/// The model's records, each a commit as `read_all` returns it.
fn appended(log: &Log, appends: &[(usize, Vec<usize>)]) -> Vec<Commit> {
    let mut commits = Vec::new();
    for (seq, (stream, sizes)) in (1..).zip(appends) {
        let stream = STREAMS[*stream];
        let events: Vec<Event> = sizes
            .iter()
            .enumerate()
            .map(|(index, &size)| {
                let fill = (seq as u8).wrapping_mul(31).wrapping_add(index as u8);
                Event::new(format!("type-{}", index % 2), vec![fill | 1; size])
            })
            .collect();
        let version = log.append(stream, Expected::Any, &events).unwrap();
        let first_version = version + 1 - events.len() as u64;
        let events = events
            .into_iter()
            .enumerate()
            .map(|(index, mut event)| {
                event.stream = stream.to_owned();
                event.version = first_version + index as u64;
                event.at = 11;
                event
            })
            .collect();
        commits.push(Commit {
            seq,
            stream: stream.to_owned(),
            first_version,
            events,
        });
    }
    commits
}

/// The model's events of `stream`, in version order.
fn stream_events(commits: &[Commit], stream: &str) -> Vec<Event> {
    commits
        .iter()
        .filter(|commit| commit.stream == stream)
        .flat_map(|commit| commit.events.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_read_api_crosses_runs_and_segments_as_the_model_says(
        appends in prop::collection::vec(append(), 50..300),
        segment_bytes in 64u64..4096,
        read_run_bytes_max in prop_oneof![Just(1u64), 16u64..600, 600u64..5000],
        from in 0u64..40,
        limit in prop_oneof![Just(0usize), 1usize..20, Just(usize::MAX)],
    ) {
        let vfs = SimVfs::new(7);
        let tuning = Tuning::default().with(|tuning| {
            tuning.read_run_bytes_max = read_run_bytes_max;
            tuning.next_segment = NextSegment::OnCall;
        });
        let options = durlog::Options { segment_bytes, ..clock(11) };
        let log = Log::open_tuned(vfs.clone(), DIR, options.clone(), tuning).unwrap();
        let model = appended(&log, &appends);

        // The whole log, whole and from `from` at most `limit`.
        prop_assert_eq!(&log.read_all(1, usize::MAX).unwrap(), &model);
        let start = (from.max(1) as usize - 1).min(model.len());
        let want: Vec<Commit> = model[start..].iter().take(limit).cloned().collect();
        prop_assert_eq!(log.read_all(from, limit).unwrap(), want);

        // Filtered: a stream prefix, then an exact type within it.
        let filter = Filter::all().stream_prefix("a").event_type("type-1");
        let want: Vec<Commit> = model
            .iter()
            .filter(|commit| commit.stream.starts_with('a'))
            .filter_map(|commit| {
                let mut commit = commit.clone();
                commit.events.retain(|event| event.event_type == "type-1");
                (!commit.events.is_empty()).then_some(commit)
            })
            .collect();
        prop_assert_eq!(&log.read_all_filtered(1, usize::MAX, &filter).unwrap(), &want);

        // Lent, not copied: the same records through the filter, and from
        // `from` as many as `limit` asks.
        let mut lent = Vec::new();
        log.visit_all(1, usize::MAX, &filter, |commit| {
            lent.push(commit.to_commit());
            ControlFlow::Continue(())
        })
        .unwrap();
        prop_assert_eq!(&lent, &want);
        let mut lent = Vec::new();
        log.visit_all(from, limit, &filter, |commit| {
            lent.push(commit.to_commit());
            ControlFlow::Continue(())
        })
        .unwrap();
        let want_from: Vec<Commit> = (want.iter())
            .filter(|commit| commit.seq >= from.max(1))
            .take(limit)
            .cloned()
            .collect();
        prop_assert_eq!(lent, want_from);
        let mut lent = Vec::new();
        log.visit_all(from, limit, &Filter::all(), |commit| {
            lent.push(commit.to_commit());
            ControlFlow::Continue(())
        })
        .unwrap();
        prop_assert_eq!(lent, log.read_all(from, limit).unwrap());

        // Each stream forward and backward.
        for stream in STREAMS {
            let events = stream_events(&model, stream);
            let start = (from.max(1) as usize - 1).min(events.len());
            let want: Vec<Event> = events[start..].iter().take(limit).cloned().collect();
            prop_assert_eq!(log.read(stream, from, limit).unwrap(), want);
            let top = (from as usize).min(events.len());
            let want: Vec<Event> = events[..top].iter().rev().take(limit).cloned().collect();
            prop_assert_eq!(log.read_backward(stream, from, limit).unwrap(), want);
            let whole: Vec<Event> = events.iter().rev().cloned().collect();
            prop_assert_eq!(log.read_backward(stream, u64::MAX, usize::MAX).unwrap(), whole);
        }

        // A subscription from `from`: every record after it, then the end.
        let subscription = log.subscribe(from);
        log.close().unwrap();
        let delivered: Vec<Commit> = subscription.map(Result::unwrap).collect();
        let start = (from.max(1) as usize - 1).min(model.len());
        prop_assert_eq!(delivered, model[start..].to_vec());

        // And after a reopen, which builds the positions from the files.
        let log = Log::open_tuned(vfs, DIR, options, tuning).unwrap();
        prop_assert_eq!(log.read_all(1, usize::MAX).unwrap(), model);
    }
}

/// A read of the whole log places at most 65,536 records' runs at a time
/// (`PLACED_RECORDS_MAX` in `log/all.rs`): a log longer than that reads
/// back whole, in order, lent and copied, from either side of the limit.
#[test]
fn a_log_longer_than_one_placement_reads_back_whole() {
    const RECORDS: u64 = (1 << 16) + 300;
    let vfs = SimVfs::new(5);
    let options = durlog::Options {
        segment_bytes: 1 << 20,
        ..clock(11)
    };
    let log = Log::open_with_vfs(vfs, DIR, options).unwrap();
    let events: Vec<Vec<Event>> = (0..4)
        .map(|i| vec![Event::new("t", vec![i as u8])])
        .collect();
    for seq in 1..=RECORDS {
        log.append(
            STREAMS[(seq % 3) as usize],
            Expected::Any,
            &events[(seq % 4) as usize],
        )
        .unwrap();
    }
    for from in [1, 200, (1 << 16) - 1, 1 << 16, (1 << 16) + 1] {
        let mut next = from;
        log.visit_all(from, usize::MAX, &Filter::all(), |commit| {
            assert_eq!(commit.seq, next, "lent in order, none left out");
            assert_eq!(commit.events[0].data, [(next % 4) as u8]);
            next += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(next, RECORDS + 1, "from {from}: lent to the end");
        let copied = log.read_all(from, usize::MAX).unwrap();
        assert_eq!(copied.len() as u64, RECORDS + 1 - from, "from {from}");
        assert!(
            copied
                .iter()
                .zip(from..)
                .all(|(commit, seq)| commit.seq == seq)
        );
    }
}

//! Appending entries' records to the log: every record queued first, so
//! that they share group commits, then every outcome waited for.

use std::collections::VecDeque;
use std::thread;

use durlog::{Event, Expected, Log};

use crate::{Error, codec};

/// Appends one record per event from `first_seq` on, all queued first so
/// that they share group commits, and waits for every outcome. Returns how
/// many were appended durably (a prefix) and the first error.
pub(crate) fn append_records(
    log: &Log,
    first_seq: u64,
    events: Vec<Event>,
) -> (usize, Result<(), Error>) {
    let mut tickets = VecDeque::with_capacity(events.len());
    for (offset, event) in events.iter().enumerate() {
        let seq = first_seq + offset as u64;
        // The log's only stream: its version is the last record's seq, so
        // `Exact` refuses a record that would land at another seq.
        let expected = Expected::Exact(seq - 1);
        match log.submit(codec::STREAM, expected, std::slice::from_ref(event)) {
            Ok(ticket) => tickets.push_back((ticket, seq)),
            Err(error) => {
                drain(log, &mut tickets);
                return (0, Err(error.into()));
            }
        }
    }
    let mut appended = 0;
    while let Some(&(ticket, seq)) = tickets.front() {
        let Some(outcome) = log.take_outcome(ticket) else {
            wait_for_group(log);
            continue;
        };
        tickets.pop_front();
        match outcome {
            Ok(version) => {
                assert_eq!(version, seq, "a record acknowledged at another seq");
                appended += 1;
            }
            Err(error) => {
                drain(log, &mut tickets);
                return (appended, Err(error.into()));
            }
        }
    }
    (appended, Ok(()))
}

/// Commits the next group on this thread (no other thread appends to the
/// store's log, but a group in flight from an earlier call may finish).
fn wait_for_group(log: &Log) {
    if log.commit_next_group() == 0 {
        thread::yield_now();
    }
}

/// Collects the outcomes of queued appends after a failure (each fails,
/// its expected version being wrong once an earlier one failed).
fn drain(log: &Log, tickets: &mut VecDeque<(durlog::Ticket, u64)>) {
    while let Some(&(ticket, _)) = tickets.front() {
        if log.take_outcome(ticket).is_some() {
            tickets.pop_front();
        } else {
            wait_for_group(log);
        }
    }
}

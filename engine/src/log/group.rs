//! Group commit as a state machine with no I/O: the queue of submitted
//! appends, the formation of a group from it, and the outcomes, published
//! in submission order once the group's I/O has reported.
//!
//! A group's appends get exactly the outcomes they would have had one by
//! one: each is checked (expected version, then quota) against the state
//! the earlier members leave, and gets the next seq and versions. Whoever
//! drives the machine (an appending thread, or the simulator) does the
//! I/O between [`form_group`] and [`publish`], without the lock.

use std::collections::{BTreeMap, VecDeque};

use crate::error::{Error, Expected};
use crate::format::{
    EVENT_ID_BYTES, HEADER_SIZE, Tables, batch_stream, event_ids, set_first_version,
};
use crate::index::{Index, Location};
use crate::segment::{IndexFile, SegmentMeta};
use crate::stats::Stats;
use crate::sync::thread::Thread;

use super::idempotent::{Retried, retried};
use super::settings::Settings;

/// A queued append's handle, to collect its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// What every reader sees: the acknowledged records' index and segments.
/// Moves only when a group is published after its sync (and when a purge
/// or a truncation is durable).
pub(crate) struct Published {
    pub index: Index,
    /// The log's segments, oldest first, their ids increasing.
    pub segments: Vec<SegmentMeta>,
    /// The id the next segment created gets.
    pub next_id: u32,
    /// The seq of the first record kept (1 until a purge).
    pub first_seq: u64,
    /// Purges and truncations so far: a read that failed while one ran
    /// looks again rather than report the file it lost as damage.
    pub changes: u64,
    pub last_seq: u64,
    /// Bytes of acknowledged records in all segments.
    pub size: u64,
    /// Stream metadata and deletions, consumer positions: what the
    /// tables' files hold (`streams.rs`).
    pub tables: Tables,
}

impl Published {
    /// The segment with id `id`, if the log still has it.
    pub fn find_segment(&self, id: u32) -> Option<&SegmentMeta> {
        let at = self.segments.partition_point(|segment| segment.id < id);
        self.segments.get(at).filter(|segment| segment.id == id)
    }

    /// The segment with id `id`, if the log still has it, to change.
    pub fn find_segment_mut(&mut self, id: u32) -> Option<&mut SegmentMeta> {
        let at = self.segments.partition_point(|segment| segment.id < id);
        self.segments.get_mut(at).filter(|segment| segment.id == id)
    }

    /// The segment with id `id`, which the index or a group names: the
    /// log has it (a purge or a truncation drops its locations first).
    pub fn segment(&self, id: u32) -> &SegmentMeta {
        self.find_segment(id)
            .expect("the log has every segment it names")
    }

    /// Has the index hold as parts, oldest first, each sealed segment
    /// whose index file is on disk, up to the first that has none: its
    /// streams' records are then found through the file (`index.rs`).
    pub fn seal_indexed(&mut self) {
        let sealed = self.segments.len().saturating_sub(1);
        for segment in &mut self.segments[..sealed] {
            if segment.index_file != IndexFile::Written {
                break;
            }
            if !segment.parts {
                self.index.seal_segment(segment.id);
                segment.parts = true;
            }
        }
    }

    fn segment_mut(&mut self, id: u32) -> &mut SegmentMeta {
        let at = self.segments.partition_point(|segment| segment.id < id);
        debug_assert_eq!(self.segments[at].id, id, "the log has the group's segment");
        &mut self.segments[at]
    }
}

/// The queue and the outcomes of appends, and who waits for them.
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: VecDeque<Pending>,
    outcomes: BTreeMap<Ticket, Result<u64, Error>>,
    /// Threads parked in `append`, by the ticket they wait for.
    waiters: BTreeMap<Ticket, Thread>,
    /// Waiters whose outcome was published, to unpark.
    to_wake: Vec<Thread>,
    /// Threads waiting to take the lead for a purge or a truncation.
    claimers: Vec<Thread>,
    /// Emptied vectors kept for reuse, so that a steady append allocates
    /// nothing of its own: the threads to wake, and a group's members.
    spare_wake: Vec<Thread>,
    spare_members: Vec<Member>,
    next_ticket: u64,
    /// The lead is held (`log::Lead`): a group is being formed, written or
    /// synced, or a purge or truncation runs.
    led: bool,
    /// Appends in the last group committed.
    pub last_group_size: usize,
    /// A failure could not be undone durably: every append fails until
    /// the log is reopened. Set in one place, [`GroupCommit::poison`].
    poisoned: bool,
}

/// An append whose arguments were checked, waiting for a group.
pub(crate) struct Pending {
    pub ticket: Ticket,
    expected: Expected,
    /// The encoded batch, with `first_version` still to be set.
    pub payload: Vec<u8>,
    pub count: u32,
    /// The events' ids, when every event carries one: the append is then
    /// a retry if its stream holds exactly these ids already.
    pub ids: Option<Vec<[u8; EVENT_ID_BYTES]>>,
}

impl Pending {
    pub fn record_len(&self) -> u64 {
        (HEADER_SIZE + self.payload.len()) as u64
    }

    /// The stream, read back from the encoded batch (which starts with it)
    /// rather than kept as a second, allocated copy.
    pub fn stream(&self) -> &str {
        std::str::from_utf8(self.stream_bytes()).expect("encoded from a &str")
    }

    /// The stream's bytes, for comparing without re-checking UTF-8 (a
    /// group's formation compares every pair of its appends).
    fn stream_bytes(&self) -> &[u8] {
        batch_stream(&self.payload)
    }
}

/// The appends one leader commits together.
pub(crate) struct Group {
    /// Create the segment for this seq first.
    pub roll_to: Option<u64>,
    /// Segment number the records go to, and where.
    pub segment: u32,
    pub offset: u64,
    /// Length of the current last segment's records (cut to before a roll).
    pub previous_len: u64,
    /// Record bytes in the segments before the one written to: the quota
    /// leaves the written segment's file `max_bytes - sealed_bytes` bytes,
    /// zero tail included.
    pub sealed_bytes: u64,
    pub members: Vec<Member>,
    /// Appends refused while forming the group; their outcome waits for the
    /// group's, because they were checked against its members.
    /// An append found already landed (its ids in the stream) waits the
    /// same way, with its version: it may have landed in this very group.
    refused: Vec<(Pending, Result<u64, Error>)>,
    /// Record bytes of the members.
    pub bytes: u64,
}

pub(crate) struct Member {
    pub pending: Pending,
    pub seq: u64,
    pub first_version: u64,
}

impl Member {
    /// The stream's version once this member is acknowledged.
    fn last_version(&self) -> u64 {
        self.first_version + u64::from(self.pending.count) - 1
    }
}

/// What a group's I/O reported when it failed.
pub(crate) struct GroupFailure {
    pub error: Error,
    /// The cut-back failed too.
    pub poisoned: bool,
    /// The new segment exists although the group failed.
    pub rolled: bool,
}

impl GroupFailure {
    /// A failure in a roll, after which the log must not go on: the state
    /// on disk is for a reopen's recovery to sort out.
    pub fn poisoning(error: std::io::Error) -> GroupFailure {
        GroupFailure {
            error: Error::Io(error),
            poisoned: true,
            rolled: false,
        }
    }
}

impl GroupCommit {
    /// Whether the lead is held.
    pub fn is_led(&self) -> bool {
        self.led
    }

    /// Claims the lead if it is free (only `log::Lead` calls this).
    pub fn start_lead(&mut self) -> bool {
        !std::mem::replace(&mut self.led, true)
    }

    /// Gives the lead up (only `log::Lead` calls this).
    pub fn end_lead(&mut self) {
        debug_assert!(self.led, "the lead is held until it is given up");
        self.led = false;
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Stops the log: a failure could not be undone durably (a cut-back,
    /// a purge's or a truncation's later step, a leader's panic), so what
    /// is on disk is for a reopen's recovery to decide.
    pub fn poison(&mut self) {
        self.poisoned = true;
    }

    /// Queues an append; its outcome comes from a later group.
    pub fn enqueue(
        &mut self,
        expected: Expected,
        payload: Vec<u8>,
        count: u32,
        ids: Option<Vec<[u8; EVENT_ID_BYTES]>>,
    ) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.queue.push_back(Pending {
            ticket,
            expected,
            payload,
            count,
            ids,
        });
        ticket
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn is_queued(&self, ticket: Ticket) -> bool {
        self.queue.iter().any(|pending| pending.ticket == ticket)
    }

    pub fn has_outcome(&self, ticket: Ticket) -> bool {
        self.outcomes.contains_key(&ticket)
    }

    pub fn take_outcome(&mut self, ticket: Ticket) -> Option<Result<u64, Error>> {
        self.outcomes.remove(&ticket)
    }

    pub fn outcomes(&self) -> usize {
        self.outcomes.len()
    }

    /// Parks `thread` as the waiter for `ticket`'s outcome.
    pub fn wait(&mut self, ticket: Ticket, thread: Thread) {
        self.waiters.insert(ticket, thread);
    }

    /// Parks `thread` until no group is in flight, to take the lead for
    /// a purge or a truncation.
    pub fn wait_to_claim(&mut self, thread: Thread) {
        self.claimers.push(thread);
    }

    pub fn stop_waiting(&mut self, ticket: Ticket) {
        self.waiters.remove(&ticket);
    }

    /// Every parked thread, to wake after a leader panicked.
    pub fn take_all_waiters(&mut self) -> Vec<Thread> {
        let mut threads: Vec<Thread> = std::mem::take(&mut self.waiters).into_values().collect();
        threads.append(&mut self.claimers);
        threads
    }

    /// Fails every queued append: the log is poisoned.
    pub fn fail_queued(&mut self) {
        debug_assert!(self.poisoned);
        while let Some(pending) = self.queue.pop_front() {
            self.finish(pending.ticket, Err(Error::Poisoned));
        }
    }

    /// Records an append's outcome, and its thread for waking.
    fn finish(&mut self, ticket: Ticket, outcome: Result<u64, Error>) {
        self.outcomes.insert(ticket, outcome);
        if let Some(waiter) = self.waiters.remove(&ticket) {
            self.to_wake.push(waiter);
        }
    }

    /// Unparks the threads whose appends finished and, if appends are
    /// queued, the first of their threads to lead the next group.
    pub fn wake_finished_and_next_leader(&mut self) {
        let mut threads = self.threads_to_wake();
        for thread in threads.drain(..) {
            thread.unpark();
        }
        self.spare_wake = threads;
    }

    /// The threads [`GroupCommit::wake_finished_and_next_leader`] wakes,
    /// the next leader first, for waking after the lock is released; give
    /// the vector back with [`GroupCommit::recycle`].
    pub fn threads_to_wake(&mut self) -> Vec<Thread> {
        let mut threads = std::mem::take(&mut self.spare_wake);
        if !self.led
            && let Some(next) = self
                .queue
                .iter()
                .find_map(|pending| self.waiters.get(&pending.ticket))
        {
            threads.push(next.clone());
        }
        if !self.led {
            // A claimer that finds a new leader first waits again.
            threads.append(&mut self.claimers);
        }
        threads.append(&mut self.to_wake);
        threads
    }

    /// Takes back emptied vectors for the next groups.
    pub fn recycle(&mut self, threads: Vec<Thread>, members: Vec<Member>) {
        debug_assert!(threads.is_empty() && members.is_empty());
        self.spare_wake = threads;
        self.spare_members = members;
    }

    /// Ends a group that had no members: only refusals to publish.
    pub fn end_empty_group(&mut self, group: Group, stats: &mut Stats) {
        debug_assert!(group.members.is_empty());
        self.spare_members = group.members;
        self.publish_refusals(group.refused, stats);
    }

    fn publish_refusals(&mut self, refused: Vec<(Pending, Result<u64, Error>)>, stats: &mut Stats) {
        for (pending, outcome) in refused {
            match &outcome {
                Err(Error::VersionConflict { .. }) => stats.conflicts += 1,
                Err(Error::Quota { .. }) => stats.quota_rejections += 1,
                _ => {}
            }
            self.finish(pending.ticket, outcome);
        }
    }
}

/// Takes appends off the queue, in order, into one group: each checked
/// against the state the earlier members leave, and given its seq and
/// first version.
pub(crate) fn form_group(
    commit: &mut GroupCommit,
    state: &Published,
    settings: &Settings,
) -> Group {
    let last_len = state.segments.last().map_or(0, |segment| segment.len);
    let mut group = Group {
        roll_to: None,
        segment: state
            .segments
            .last()
            .map_or(state.next_id, |segment| segment.id),
        offset: last_len,
        previous_len: last_len,
        sealed_bytes: state.size - last_len,
        members: std::mem::take(&mut commit.spare_members),
        refused: Vec::new(),
        bytes: 0,
    };
    while let Some(pending) = commit.queue.front() {
        // The version the group's earlier members leave the stream at
        // (groups are small: a scan beats a map of cloned names).
        let current = group
            .members
            .iter()
            .rev()
            .find(|member| member.pending.stream_bytes() == pending.stream_bytes())
            .map_or_else(
                || state.index.version(pending.stream()),
                Member::last_version,
            );
        let record_len = pending.record_len();
        let size = state.size + group.bytes + record_len;
        let outcome = match answer(pending, current, size, state, &group.members, settings) {
            Ok(None) => None,
            Ok(Some(version)) => Some(Ok(version)),
            Err(error) => {
                if !group.members.is_empty() {
                    durlog_vfs::mark!(
                        "group: an append refused against an earlier member of its group"
                    );
                }
                Some(Err(error))
            }
        };
        if let Some(outcome) = outcome {
            let pending = commit.queue.pop_front().expect("front exists");
            group.refused.push((pending, outcome));
            continue;
        }
        let must_roll = group.roll_to.is_none() && state.segments.is_empty();
        let segment_used = group.offset + group.bytes;
        let fits = !must_roll
            && (segment_used == 0 || segment_used + record_len <= settings.segment_bytes);
        if !fits {
            if !group.members.is_empty() {
                break; // the next group starts with the roll
            }
            group.roll_to = Some(state.last_seq + 1);
            group.segment = state.next_id;
            group.offset = 0;
            group.sealed_bytes = state.size;
        }
        if !group.members.is_empty() && group.bytes + record_len > settings.group_bytes_max {
            break;
        }
        let mut pending = commit.queue.pop_front().expect("front exists");
        set_first_version(&mut pending.payload, current + 1);
        group.bytes += record_len;
        group.members.push(Member {
            seq: state.last_seq + 1 + group.members.len() as u64,
            pending,
            first_version: current + 1,
        });
    }
    group
}

/// What becomes of `pending`: `Ok(None)`, it joins the group; `Ok(Some(v))`,
/// it is a retry that already landed (its ids are the stream's events up
/// to version `v`, durable or in this group) and writes nothing; `Err`,
/// it is refused: its stream deleted for good, its ids partly in the
/// stream, its expected version not `current`, or the log's `size` with
/// it over the quota (checked in that order, as SPEC sections 4 and 14
/// say: a retry's expected version is not checked).
fn answer(
    pending: &Pending,
    current: u64,
    size: u64,
    state: &Published,
    members: &[Member],
    settings: &Settings,
) -> Result<Option<u64>, Error> {
    if state.is_hard_deleted(pending.stream()) {
        return Err(Error::StreamDeleted {
            stream: pending.stream().to_owned(),
        });
    }
    if let Some(ids) = &pending.ids {
        // The group's earlier members of the stream are not published yet:
        // their ids are read back from their batches (groups are small).
        let in_group: Vec<(u64, [u8; EVENT_ID_BYTES])> = members
            .iter()
            .filter(|member| member.pending.stream() == pending.stream())
            .flat_map(|member| event_ids(&member.pending.payload).expect("a queued batch decodes"))
            .collect();
        let published = state.index.streams.get(pending.stream());
        match retried(ids, published, &in_group) {
            Retried::New => {}
            Retried::Landed(version) => return Ok(Some(version)),
            Retried::Partly => {
                return Err(Error::VersionConflict {
                    stream: pending.stream().to_owned(),
                    expected: pending.expected,
                    actual: current,
                });
            }
        }
    }
    refusal(pending, current, size, settings).map(|()| None)
}

/// Why `pending` may not join a group, if it may not: its expected
/// version not `current`, or the log's `size` with it over the quota.
fn refusal(pending: &Pending, current: u64, size: u64, settings: &Settings) -> Result<(), Error> {
    if !pending.expected.matches(current) {
        return Err(Error::VersionConflict {
            stream: pending.stream().to_owned(),
            expected: pending.expected,
            actual: current,
        });
    }
    settings.quota.check(size)
}

/// Publishes a group's outcome: on success the index, versions and size
/// move and every member is acknowledged; on failure every member fails
/// and the refused appends go back to the queue, to be checked again
/// against the state the failed group did not change. Returns the members,
/// for their buffers to be reused.
pub(crate) fn publish(
    commit: &mut GroupCommit,
    state: &mut Published,
    stats: &mut Stats,
    settings: &Settings,
    group: Group,
    result: Result<u64, GroupFailure>,
) -> Vec<Member> {
    let rolled = match &result {
        Ok(_) => group.roll_to.is_some(),
        Err(failure) => failure.rolled,
    };
    if rolled {
        let first_seq = group.roll_to.expect("rolled implies a roll");
        debug_assert_eq!(
            group.segment, state.next_id,
            "a roll writes to a new segment"
        );
        state.segments.push(SegmentMeta {
            id: state.next_id,
            first_seq,
            path: settings.segment_path(first_seq),
            len: 0,
            offsets: Vec::new(),
            index_file: IndexFile::Missing,
            parts: false,
        });
        state.next_id += 1;
        stats.segments_created += 1;
    }
    match result {
        Ok(sync_ns) => {
            acknowledge(commit, state, stats, &group);
            stats.sync_latency_ns.record(sync_ns);
            commit.last_group_size = group.members.len();
            commit.publish_refusals(group.refused, stats);
        }
        Err(failure) => {
            if failure.poisoned {
                commit.poison();
            }
            stats.failed_appends += group.members.len() as u64;
            for member in &group.members {
                commit.finish(member.pending.ticket, Err(failure.error.duplicate()));
            }
            if group.refused.len() > 1 {
                durlog_vfs::mark!("group: a failed group puts back several refused appends");
            }
            // Back in the order they came: reversed, each pushed to the
            // front lands before the one pushed after it.
            for (pending, _) in group.refused.into_iter().rev() {
                commit.queue.push_front(pending);
            }
        }
    }
    group.members
}

/// Moves the committed state past a group that is durable, and gives each
/// member its version.
fn acknowledge(commit: &mut GroupCommit, state: &mut Published, stats: &mut Stats, group: &Group) {
    let segment = state.segment_mut(group.segment);
    debug_assert_eq!(
        segment.len, group.offset,
        "the group starts at its segment's end"
    );
    segment.len = group.offset + group.bytes;
    let mut offset = group.offset;
    for (position, member) in group.members.iter().enumerate() {
        debug_assert_eq!(
            member.seq,
            state.last_seq + 1 + position as u64,
            "seqs are dense"
        );
        let offset32 = u32::try_from(offset).expect("records start below SEGMENT_BYTES_MAX");
        let location = Location {
            first_version: member.first_version,
            segment: group.segment,
            offset: offset32,
        };
        state.segment_mut(group.segment).offsets.push(offset32);
        state
            .index
            .push(member.pending.stream(), member.pending.count, location);
        let ids = event_ids(&member.pending.payload).expect("a written batch decodes");
        state.index.remember_ids(member.pending.stream(), &ids);
        offset += member.pending.record_len();
        commit.finish(member.pending.ticket, Ok(member.last_version()));
        stats.events += u64::from(member.pending.count);
    }
    if group.members.len() > 1 {
        durlog_vfs::mark!("group: a group of several appends");
    }
    state.last_seq += group.members.len() as u64;
    state.size += group.bytes;
    stats.appends += group.members.len() as u64;
    stats.bytes += group.bytes;
    stats.groups += 1;
    stats.syncs += 1;
    stats.appends_per_group.record(group.members.len() as u64);
}

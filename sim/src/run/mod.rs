//! The runner: executes one plan on a `SimVfs`, step by step, and hands
//! every outcome to the oracle (`oracle/`), whose methods live there.
//!
//! The engine is driven through the same state machine threads use
//! (`Log::submit`, then `Log::commit_next_group`), with power losses
//! between operations, during the n-th disk operation of a commit or of
//! recovery, and at the failpoint between write and sync; then the log is
//! reopened. The runner decides nothing about right and wrong: it turns
//! the plan's actions into calls, tells the oracle what each returned and
//! what the disk reports, and counts what the oracle accepted
//! (`crate::report`). The first violation ends the run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use durlog::{Error, Event, Expected, IndexFiles, Log, NextSegment, Ticket};
use durlog_vfs::{FaultKind, SimVfs};

use crate::model::ModelEvent;
use crate::plan::{Action, CrashSpec, EventSpec, ExpectedSpec, Plan, QuotaChange};
use node::{Node, sizes};
use oracle::excuse::{self, Evidence};
use oracle::{Check, CommitFacts, Limits, Oracle, SubFilter, Submitted};

pub use crate::report::{Counters, CrashPoint, Recovery, SeedResult, Violation};

/// Adds a line to a run's readable trace. The line is formatted only when
/// a trace is kept: formatting would otherwise be much of a run's cost.
macro_rules! note {
    ($world:expr, $($arg:tt)*) => {
        if $world.trace.is_some() {
            let line = format!($($arg)*);
            $world.push_note(line);
        }
    };
}

mod change;
pub(crate) mod clock;
mod follow;
mod node;
mod oracle;
mod reopen;
mod share;
mod stores;
mod twins;

/// Where a simulated log lives. After a (rightly) refused corruption the
/// run goes on with a fresh log in `LOG_DIR-1`, `LOG_DIR-2`, ..., so that
/// the damage records of the old one excuse nothing in the new one.
pub const LOG_DIR: &str = "/sim/log";

/// How many times a reopen is retried when injected faults make it fail.
const OPEN_ATTEMPTS_MAX: usize = 50;

/// Runs the actions of `plan` that `keep` selects (all if `None`), with a
/// readable trace if `trace`.
pub fn run_plan(plan: &Plan, keep: Option<&[bool]>, trace: bool) -> SeedResult {
    let vfs = SimVfs::with_faults(plan.vfs_seed, plan.faults.clone());
    run_plan_on(plan, vfs, keep, trace, None)
}

/// Called after each power loss of a run, with where it struck and how to
/// take a digest of the runner's state (`run/share.rs`; none while
/// subscribers run), once the disk holds what it left and before the log is
/// reopened; `false` ends the run there with no verdict (the caller has
/// checked a run from this state already, or wants none).
pub type PowerLossHook<'a> =
    Box<dyn FnMut(&SimVfs, CrashPoint, &dyn Fn() -> Option<u64>) -> bool + 'a>;

/// [`run_plan`] on a disk the caller prepared (an exhaustive checker sets
/// a `CrashScript` on it first), with a hook at each power loss.
pub fn run_plan_on(
    plan: &Plan,
    vfs: SimVfs,
    keep: Option<&[bool]>,
    trace: bool,
    on_power_loss: Option<PowerLossHook<'_>>,
) -> SeedResult {
    vfs.set_trace_recording(trace);
    let mut world = World::new(plan, vfs, trace);
    world.on_power_loss = on_power_loss;
    let outcome = world.run(keep);
    if let Err(violation) = &outcome {
        note!(
            world,
            "VIOLATION at step {}: {}",
            violation.step,
            violation.message
        );
    }
    // The failpoint hook holds the followers and their subscriptions hold
    // the log's settings, which hold the hook: a cycle that only emptying
    // the list breaks (else every seed's log stays in memory).
    follow::lock(&world.node.followers).list.clear();
    let excused = world.oracle.excused().clone();
    let full_read_backs = world.oracle.full_read_backs();
    let mut result = world.result;
    result.counters.full_read_backs = full_read_backs;
    (result.counters.ids_landed, result.counters.ids_refused) = world.oracle.ids_decided;
    result.seed = plan.seed;
    result.excused = excused;
    result.faults = world.node.vfs.fault_counts();
    result.digest = world.node.vfs.trace_digest();
    result.violation = outcome.err();
    result.trace = world.trace.unwrap_or_default();
    result
}

/// One run: the plan, the node it runs on, the oracle, what is in flight,
/// and what was counted.
struct World<'a> {
    plan: &'a Plan,
    node: Node,
    oracle: Oracle,
    pending: BTreeMap<Ticket, Submitted>,
    busy: BTreeSet<u32>,
    /// Commit actions run, for `Plan::prepare_every`.
    commits: u32,
    /// Subscribers started, for `Plan::applying_metadata`.
    subscribers: u32,
    /// The run stopped early for a legitimate reason (corruption refused).
    ended: bool,
    /// The last reopen of the run is under way.
    final_reopen: bool,
    result: SeedResult,
    trace: Option<Vec<String>>,
    on_power_loss: Option<PowerLossHook<'a>>,
    /// The plan's action under way (its length: the final checks).
    step: usize,
}

impl<'a> World<'a> {
    fn new(plan: &'a Plan, vfs: SimVfs, trace: bool) -> World<'a> {
        World {
            plan,
            node: Node::new(plan, vfs),
            oracle: Oracle::reading_back(plan.full_reads_every, plan.full_reads_first),
            pending: BTreeMap::new(),
            busy: BTreeSet::new(),
            commits: 0,
            subscribers: 0,
            ended: false,
            final_reopen: false,
            result: SeedResult::default(),
            trace: trace.then(Vec::new),
            on_power_loss: None,
            step: 0,
        }
    }

    /// After a power loss: whether the run goes on (see [`PowerLossHook`]).
    /// If not, it ends here as if the log had been refused.
    fn goes_on_after_power_loss(&mut self, point: CrashPoint) -> bool {
        let mut hook = self.on_power_loss.take();
        let goes_on = (hook.as_mut())
            .is_none_or(|hook| hook(&self.node.vfs, point, &|| self.runner_digest()));
        self.on_power_loss = hook;
        if !goes_on {
            note!(
                self,
                "      this state was checked before: the run ends here"
            );
            self.ended = true;
        }
        goes_on
    }

    fn push_note(&mut self, line: String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line);
        }
    }

    /// Moves the disk's recorded operations into the readable trace.
    fn note_disk_ops(&mut self) {
        if let Some(trace) = &mut self.trace {
            for event in self.node.vfs.trace() {
                trace.push(format!("      disk: {event}"));
            }
            self.node.vfs.clear_trace();
        }
    }

    fn run(&mut self, keep: Option<&[bool]>) -> Result<(), Violation> {
        let at = |step: usize| move |message: String| Violation { step, message };
        note!(
            self,
            "seed {} faults [{}] segment_bytes {} max_bytes {} streams {} clients {} {:?}",
            self.plan.seed,
            self.plan.faults,
            self.plan.segment_bytes,
            self.plan.max_bytes,
            self.plan.streams,
            self.plan.clients,
            self.plan.tuning
        );
        self.reopen(CrashSpec::None).map_err(at(0))?;
        for (step, action) in self.plan.actions.iter().enumerate() {
            if self.ended {
                return Ok(());
            }
            if keep.is_some_and(|keep| !keep.get(step).copied().unwrap_or(false)) {
                continue;
            }
            self.step = step;
            self.maybe_plant_canary(step).map_err(at(step))?;
            self.result.counters.cycles += 1;
            note!(self, "{step:4}: {action}");
            let outcome = self.act(action);
            self.note_disk_ops();
            outcome.map_err(at(step))?;
            self.lower_floors();
            self.result.counters.log_bytes_max = self
                .result
                .counters
                .log_bytes_max
                .max(self.oracle.model().size());
        }
        if self.ended {
            return Ok(());
        }
        // A last check, then a last power loss and recovery.
        let end = self.plan.actions.len();
        self.step = end;
        note!(self, "{end:4}: final check, power loss, reopen");
        self.full_check().map_err(at(end))?;
        self.final_reopen = true;
        self.power_loss(CrashPoint::Idle, CrashSpec::None, false)
            .map_err(at(end))?;
        self.note_disk_ops();
        Ok(())
    }

    /// The canary waits for something acknowledged to disagree with.
    fn maybe_plant_canary(&mut self, step: usize) -> Check {
        if self.plan.canary_step.is_some_and(|canary| step >= canary)
            && !self.result.canary_planted
            && self.oracle.plant_canary()
        {
            self.result.canary_planted = true;
            note!(self, "   canary: the model now disagrees with the log");
            // Checked at once: the run might otherwise end (a refused
            // corruption) before anything reads the planted event.
            return self.full_check();
        }
        Ok(())
    }

    fn act(&mut self, action: &Action) -> Check {
        match action {
            Action::Submit {
                client,
                stream,
                expected,
                events,
            } => self.submit(*client, &format!("s{stream}"), *expected, events),
            Action::Commit { crash } => self.commit(*crash),
            Action::Read {
                stream,
                from,
                limit,
            } => self.read(&format!("s{stream}"), *from, *limit as usize),
            Action::Crash { recovery, bit_flip } => {
                self.power_loss(CrashPoint::Idle, *recovery, *bit_flip)
            }
            Action::Subscribe { back, stream } => {
                let prefix = stream.map_or_else(String::new, |stream| format!("s{stream}"));
                let filter = SubFilter {
                    prefix,
                    ..SubFilter::default()
                };
                self.subscribe(*back, filter);
                Ok(())
            }
            Action::SubscribeType { .. }
            | Action::SetMetadata { .. }
            | Action::Delete { .. }
            | Action::RecordPosition { .. }
            | Action::Retry { .. } => self.act_on_stores(action),
            Action::Poll { subscriber, max } => {
                let count = follow::lock(&self.node.followers).list.len();
                if count == 0 {
                    return Ok(());
                }
                self.poll(*subscriber as usize % count, *max)?;
                self.poll_twin(*subscriber as usize)
            }
            Action::Purge {
                keep_percent,
                crash,
            } => self.purge(*keep_percent, *crash),
            Action::Truncate { back, crash } => self.truncate(*back, *crash),
            Action::SubscribeAhead => {
                self.subscribe(30, SubFilter::default());
                let newest = follow::lock(&self.node.followers).list.len() - 1;
                self.poll(newest, 1)
            }
            Action::ReadFiltered {
                stream,
                event_type,
                type_prefix,
                applying_metadata,
            } => {
                let filter = SubFilter {
                    prefix: stream.map_or_else(String::new, |stream| format!("s{stream}")),
                    event_type: Some(self.plan.type_name(*event_type).to_owned()),
                    type_prefix: *type_prefix,
                    applying_metadata: *applying_metadata,
                    ..SubFilter::default()
                };
                self.read_filtered(&filter)
            }
            Action::SecondOpen => self.second_open(),
            Action::Reopen { quota, recovery } => {
                self.node.max_bytes = match quota {
                    QuotaChange::Keep => self.node.max_bytes,
                    QuotaChange::Raise(bytes) if self.node.max_bytes > 0 => {
                        self.node.max_bytes + bytes
                    }
                    QuotaChange::Raise(_) => 0,
                    QuotaChange::Remove => 0,
                };
                self.restart(*recovery)
            }
        }
    }

    /// A second opener while the writer holds the log: refused, and the
    /// files as they were, bytes and durable bytes (an opener that
    /// repaired before it took the lock would cut the writer's tail).
    fn second_open(&mut self) -> Check {
        let before = self.node.files();
        let mark = self.node.vfs.fault_log_len();
        match self.node.open(self.plan) {
            Err(Error::Locked { .. }) => self.result.counters.second_opens_refused += 1,
            Ok(_) => return Err("a second opener beside the writer was not refused".into()),
            Err(Error::Io(_))
                if excuse::explains_io_error(&self.node.vfs.fault_log_since(mark)) => {}
            Err(error) => {
                return Err(format!(
                    "a second opener failed with {error}, not Locked, and no fault explains it"
                ));
            }
        }
        let after = self.node.files();
        if before.0 != after.0 {
            return Err(format!(
                "a refused second opener changed the files: {:?} became {:?}",
                sizes(&before.0),
                sizes(&after.0)
            ));
        }
        if before.1 != after.1 {
            return Err("a refused second opener changed what is durable".into());
        }
        Ok(())
    }

    fn log(&self) -> &Log {
        self.node
            .log
            .as_ref()
            .expect("the log is open between actions")
    }

    fn limits(&self) -> Limits {
        Limits {
            segment_bytes: self.plan.segment_bytes,
            max_bytes: self.node.max_bytes,
            group_bytes_max: self.plan.tuning.group_bytes_max,
        }
    }

    fn submit(
        &mut self,
        client: u32,
        stream: &str,
        spec: ExpectedSpec,
        specs: &[EventSpec],
    ) -> Check {
        if self.busy.contains(&client) {
            note!(self, "      client busy: skipped");
            return Ok(());
        }
        let expected = expected_version(spec, self.oracle.model().version(stream));
        let events: Vec<Event> = specs.iter().map(|spec| self.plan.event(spec)).collect();
        self.result.counters.appends_submitted += 1;
        match self.log().submit(stream, expected, &events) {
            Ok(ticket) => {
                let at = self.node.clock.now();
                let events = events
                    .into_iter()
                    .map(|event| ModelEvent::acknowledged(event, at))
                    .collect();
                note!(self, "      queued as {ticket:?}, expected {expected:?}");
                let stream = stream.to_owned();
                let submitted = Submitted {
                    client,
                    stream,
                    expected,
                    events,
                };
                self.pending.insert(ticket, submitted);
                self.busy.insert(client);
                Ok(())
            }
            Err(Error::Poisoned) if self.log().is_poisoned() => Ok(()),
            Err(error) => Err(format!(
                "submit to {stream} refused valid arguments: {error}"
            )),
        }
    }

    fn commit(&mut self, crash: CrashSpec) -> Check {
        let mark = self.node.vfs.fault_log_len();
        match crash {
            CrashSpec::AfterOps(n) => self.node.vfs.crash_after_ops(n),
            CrashSpec::Failpoint => self.node.failpoint_armed.store(true, Ordering::SeqCst),
            CrashSpec::None => {}
        }
        if self.plan.tuning.next_segment == NextSegment::OnCall
            && self.commits.is_multiple_of(self.plan.prepare_every)
        {
            self.prepare_next_segment();
        }
        if self.plan.tuning.index_files == IndexFiles::OnCall
            && self.commits.is_multiple_of(self.plan.prepare_every)
        {
            self.write_index_files();
        }
        self.commits += 1;
        self.open_retention_window(0);
        let finished = self.log().commit_next_group();
        self.node.vfs.crash_after_ops(0);
        self.node.failpoint_armed.store(false, Ordering::SeqCst);
        self.check_deliveries_during_commit()?;
        let faulted = self.node.vfs.is_halted()
            || excuse::explains_io_error(&self.node.vfs.fault_log_since(mark));
        note!(self, "      {finished} appends finished");
        self.collect_outcomes(faulted)?;
        self.close_retention_window()?;
        self.check_told_during_commit(mark)?;
        if self.node.vfs.is_halted() {
            let point = if crash == CrashSpec::Failpoint {
                CrashPoint::Failpoint
            } else {
                CrashPoint::Commit
            };
            return self.power_loss(point, CrashSpec::None, false);
        }
        let poisoned = self.log().is_poisoned();
        let mut evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        evidence.unsure_index_files = self.node.unsure_index_files.clone();
        self.oracle
            .check_committed(poisoned, &evidence, self.limits())?;
        if poisoned {
            note!(self, "      the log is poisoned: restart the process");
            return self.restart(CrashSpec::None);
        }
        Ok(())
    }

    /// A failure leaves the roll to create its file; the checks after the
    /// commit see whatever it left.
    fn prepare_next_segment(&mut self) {
        match self.log().prepare_next_segment() {
            Ok(true) => {
                self.result.counters.segments_prepared += 1;
                note!(self, "      prepared the next segment");
            }
            Ok(false) => {}
            Err(error) => note!(self, "      preparing the next segment failed: {error}"),
        }
    }

    /// Writes the index files the log lacks, inside the commit's crash
    /// window. A failure leaves the log as it was; the index files it
    /// touched may be left half written until Open removes them.
    fn write_index_files(&mut self) {
        let mark = self.node.vfs.fault_log_len();
        match self.log().write_index_files() {
            Ok(written) => {
                self.result.counters.index_files_written += written as u64;
                if written > 0 {
                    note!(self, "      wrote {written} index files");
                }
            }
            Err(error) => {
                note!(self, "      writing index files failed: {error}");
                let faulted = (self.node.vfs.fault_log_since(mark).into_iter())
                    .map(|fault| fault.path)
                    .filter(|path| path.extension().is_some_and(|ext| ext == "idx"));
                self.node.unsure_index_files.extend(faulted);
            }
        }
    }

    /// Hands every finished append to the oracle, in submission order.
    fn collect_outcomes(&mut self, faulted: bool) -> Check {
        let commit = CommitFacts {
            max_bytes: self.node.max_bytes,
            faulted,
            halted: self.node.vfs.is_halted(),
            poisoned: self.log().is_poisoned(),
        };
        let tickets: Vec<Ticket> = self.pending.keys().copied().collect();
        for ticket in tickets {
            let Some(outcome) = self.log().take_outcome(ticket) else {
                continue;
            };
            let submitted = self.pending.remove(&ticket).expect("pending ticket");
            self.busy.remove(&submitted.client);
            note!(self, "      {ticket:?} -> {}", describe(&outcome));
            self.oracle.check_outcome(submitted, &outcome, &commit)?;
            self.result.counters.count_outcome(&outcome);
        }
        Ok(())
    }

    /// A read of the whole log through `filter`, checked against the model.
    fn read_filtered(&mut self, filter: &SubFilter) -> Check {
        self.result.counters.reads += 1;
        self.result.counters.filtered_reads += 1;
        let log = self
            .node
            .log
            .as_ref()
            .expect("the log is open between actions");
        let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        self.oracle.check_read_all_through(log, &evidence, filter)
    }

    fn read(&mut self, stream: &str, from: u64, limit: usize) -> Check {
        self.result.counters.reads += 1;
        let mark = self.node.vfs.fault_log_len();
        let before = self.node.ticks();
        let got = self.log().read(stream, from, limit);
        let clock = (before, self.node.ticks());
        let faults = self.node.vfs.fault_log_since(mark);
        let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        self.oracle
            .check_read(stream, from, limit, got, &evidence, &faults, clock)
    }

    /// Power fails (if it has not already), the process dies with it, and
    /// the log is reopened.
    fn power_loss(&mut self, point: CrashPoint, recovery: CrashSpec, bit_flip: bool) -> Check {
        self.result.count_crash(point, &self.plan.faults.enabled());
        follow::lock(&self.node.followers).drop_subscriptions();
        self.node.twins.power_lost();
        self.end_life();
        self.pending.clear();
        self.busy.clear();
        if self.node.vfs.is_halted() {
            self.node.vfs.reboot();
        } else {
            self.node.vfs.crash();
        }
        if !self.goes_on_after_power_loss(point) {
            return Ok(());
        }
        if bit_flip
            && self.plan.faults.is_enabled(FaultKind::BitFlipAtRest)
            && let Some(damage) = self.node.vfs.flip_random_bit_at_rest()
        {
            note!(self, "      at rest: {damage}");
        }
        self.reopen(recovery)
    }

    /// The process restarts: the page cache survives.
    fn restart(&mut self, recovery: CrashSpec) -> Check {
        let count = follow::lock(&self.node.followers).list.len();
        for index in 0..count {
            self.poll(index, u32::MAX)?;
        }
        self.end_life();
        self.pending.clear();
        self.busy.clear();
        self.check_followers_closed()?;
        self.reopen(recovery)
    }

    /// The process goes: what its log counted is added up.
    fn end_life(&mut self) {
        if let Some(log) = self.node.log.take() {
            self.result.counters.index_files_bypassed += log.stats().index_files_bypassed;
        }
    }

    fn full_check(&mut self) -> Check {
        let log = self.node.log.take().expect("open");
        let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        let result = self.oracle.check_log(&log, &evidence, &self.node.clock);
        self.node.log = Some(log);
        result
    }
}

fn describe(outcome: &Result<u64, Error>) -> String {
    match outcome {
        Ok(version) => format!("ok, version {version}"),
        Err(error) => format!("{error}"),
    }
}

/// The expected version `spec` means for a stream at version `current`.
fn expected_version(spec: ExpectedSpec, current: u64) -> Expected {
    match spec {
        ExpectedSpec::Right => Expected::Exact(current),
        ExpectedSpec::Wrong(delta) => {
            let distance = u64::from(delta.unsigned_abs());
            Expected::Exact(if delta < 0 && current >= distance {
                current - distance
            } else {
                current + distance
            })
        }
        ExpectedSpec::Any => Expected::Any,
        ExpectedSpec::NoStream => Expected::NoStream,
        ExpectedSpec::StreamExists => Expected::StreamExists,
    }
}

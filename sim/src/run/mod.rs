//! Running one plan: the engine on a `SimVfs`, driven step by step through
//! the same state machine threads use (`Log::submit`, then
//! `Log::commit_next_group`), with power losses at chosen disk operations,
//! and the oracle checking every outcome against the model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use durlog::recovery::{self, Tail};
use durlog::{Error, Event, Expected, Log, NextSegment, Options, Ticket, Tuning};
use durlog_vfs::{Damage, FaultKind, SimVfs, Vfs};

use crate::model::{Model, ModelEvent};
use crate::plan::{Action, CrashSpec, ExpectedSpec, Plan, QuotaChange};

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

/// Where a simulated log lives. After a (rightly) refused corruption the
/// run goes on with a fresh log in `LOG_DIR-1`, `LOG_DIR-2`, ..., so that
/// the damage records of the old one excuse nothing in the new one.
pub const LOG_DIR: &str = "/sim/log";

/// Times the clock hands out: nanoseconds, never whole seconds, so a log
/// that stored seconds would be caught.
const CLOCK_BASE_NS: i64 = 1_700_000_000_123_456_789;
const CLOCK_STEP_NS: i64 = 1_000_003;

/// Logs up to this size have their bytes checked at every reopen (larger
/// ones at the end of the run, and by `recovery::verify` at every reopen).
const LAYOUT_CHECK_BYTES_MAX: u64 = 64 << 10;

/// Logs up to this size have their bytes checked after every commit too.
const COMMIT_LAYOUT_CHECK_BYTES_MAX: u64 = 8 << 10;

/// How many times a reopen is retried when injected faults make it fail.
const OPEN_ATTEMPTS_MAX: usize = 50;

/// Where a power loss struck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashPoint {
    /// Between operations.
    Idle,
    /// During a disk operation of a group commit (roll, write, sync, cut-back).
    Commit,
    /// At the failpoint between an append's write and its sync.
    Failpoint,
    /// During a disk operation of `Log::open` (recovery).
    Recovery,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 4] = [
        CrashPoint::Idle,
        CrashPoint::Commit,
        CrashPoint::Failpoint,
        CrashPoint::Recovery,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::Idle => "idle",
            CrashPoint::Commit => "commit",
            CrashPoint::Failpoint => "failpoint",
            CrashPoint::Recovery => "recovery",
        }
    }
}

/// What a reopen found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Recovery {
    Clean,
    TornTailTruncated,
    ZeroTailTruncated,
    CorruptionRefused,
    CrashedDuringRecovery,
    /// Open failed on an injected I/O fault and was retried.
    RetriedAfterIoFault,
    /// Open kept failing on injected faults; the seed stopped there.
    GaveUp,
}

impl Recovery {
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Clean => "clean",
            Recovery::TornTailTruncated => "torn tail truncated",
            Recovery::ZeroTailTruncated => "zero tail truncated",
            Recovery::CorruptionRefused => "corruption refused",
            Recovery::CrashedDuringRecovery => "crashed during recovery",
            Recovery::RetriedAfterIoFault => "retried after I/O fault",
            Recovery::GaveUp => "gave up (disk keeps failing)",
        }
    }
}

/// Counts of what a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Actions executed (one workload step each).
    pub cycles: u64,
    pub appends_submitted: u64,
    pub appends_acked: u64,
    pub conflicts: u64,
    pub quota_refusals: u64,
    pub io_failures: u64,
    pub crashes: u64,
    pub reopens: u64,
    pub reads: u64,
    /// Reads that failed on injected read faults or damage (never wrong data).
    pub read_errors: u64,
    /// Acknowledged records lost to damage inside the documented ambiguity
    /// window (the last record for a bit flip, see `durlog::GROUP_BYTES_MAX`).
    pub acked_lost_to_window: u64,
    /// Largest size the log reached, in bytes.
    pub log_bytes_max: u64,
    /// Next segments prepared ahead of their roll.
    pub segments_prepared: u64,
}

impl Counters {
    pub fn add(&mut self, other: &Counters) {
        self.cycles += other.cycles;
        self.appends_submitted += other.appends_submitted;
        self.appends_acked += other.appends_acked;
        self.conflicts += other.conflicts;
        self.quota_refusals += other.quota_refusals;
        self.io_failures += other.io_failures;
        self.crashes += other.crashes;
        self.reopens += other.reopens;
        self.reads += other.reads;
        self.read_errors += other.read_errors;
        self.acked_lost_to_window += other.acked_lost_to_window;
        self.log_bytes_max = self.log_bytes_max.max(other.log_bytes_max);
        self.segments_prepared += other.segments_prepared;
    }
}

/// The oracle's verdict on a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the action during which it was found (the final checks
    /// count as one past the last action).
    pub step: usize,
    pub message: String,
}

/// Everything one run reports.
#[derive(Clone, Debug, Default)]
pub struct SeedResult {
    pub seed: u64,
    pub counters: Counters,
    pub faults: BTreeMap<FaultKind, u64>,
    pub recoveries: BTreeMap<Recovery, u64>,
    /// Power losses by (a fault enabled in the run, or none) x crash point.
    pub coverage: BTreeMap<(Option<FaultKind>, CrashPoint), u64>,
    pub digest: u64,
    pub violation: Option<Violation>,
    /// A person-readable trace, when asked for.
    pub trace: Vec<String>,
    /// The canary planted its failure in this run.
    pub canary_planted: bool,
}

/// Runs the actions of `plan` that `keep` selects (all if `None`), with a
/// readable trace if `trace`.
pub fn run_plan(plan: &Plan, keep: Option<&[bool]>, trace: bool) -> SeedResult {
    let vfs = SimVfs::with_faults(plan.vfs_seed, plan.faults.clone());
    vfs.set_trace_recording(trace);
    let mut world = World::new(plan, vfs, trace);
    let outcome = world.run(keep);
    if let Err(violation) = &outcome {
        note!(
            world,
            "VIOLATION at step {}: {}",
            violation.step,
            violation.message
        );
    }
    let mut result = world.result;
    result.seed = plan.seed;
    result.faults = world.vfs.fault_counts();
    result.digest = world.vfs.trace_digest();
    result.violation = outcome.err();
    result.trace = world.trace.unwrap_or_default();
    result
}

/// An append submitted and not yet finished.
#[derive(Clone, Debug)]
struct Submitted {
    client: u32,
    stream: String,
    expected: Expected,
    events: Vec<ModelEvent>,
    record_bytes: u64,
}

struct World<'a> {
    plan: &'a Plan,
    vfs: SimVfs,
    log: Option<Log>,
    model: Model,
    pending: BTreeMap<Ticket, Submitted>,
    busy: BTreeSet<u32>,
    /// Appends whose group failed in a way that may have left them on disk
    /// (power loss, or a cut-back that failed): after the next reopen each
    /// is whole or absent, and the survivors come first.
    in_doubt: Vec<Submitted>,
    clock: Arc<AtomicI64>,
    failpoint_armed: Arc<AtomicBool>,
    max_bytes: u64,
    /// Commit actions run, for `Plan::prepare_every`.
    commits: u32,
    /// The run stopped early for a legitimate reason (corruption refused).
    ended: bool,
    /// The last reopen of the run is under way.
    final_reopen: bool,
    /// The log's directory, and how many times the run started over.
    dir: std::path::PathBuf,
    generation: u32,
    result: SeedResult,
    trace: Option<Vec<String>>,
}

type Check = Result<(), String>;

fn injected_io_kinds() -> [FaultKind; 4] {
    [
        FaultKind::FailedFsync,
        FaultKind::ShortWrite,
        FaultKind::NoSpace,
        FaultKind::BitFlipOnRead,
    ]
}

impl<'a> World<'a> {
    fn new(plan: &'a Plan, vfs: SimVfs, trace: bool) -> World<'a> {
        World {
            plan,
            vfs,
            log: None,
            model: Model::default(),
            pending: BTreeMap::new(),
            busy: BTreeSet::new(),
            in_doubt: Vec::new(),
            clock: Arc::new(AtomicI64::new(0)),
            failpoint_armed: Arc::new(AtomicBool::new(false)),
            max_bytes: plan.max_bytes,
            commits: 0,
            ended: false,
            final_reopen: false,
            dir: std::path::PathBuf::from(LOG_DIR),
            generation: 0,
            result: SeedResult::default(),
            trace: trace.then(Vec::new),
        }
    }

    fn push_note(&mut self, line: String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line);
        }
    }

    /// Moves the disk's recorded operations into the readable trace.
    fn note_disk_ops(&mut self) {
        if let Some(trace) = &mut self.trace {
            for event in self.vfs.trace() {
                trace.push(format!("      disk: {event}"));
            }
            self.vfs.clear_trace();
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
            // The canary waits for something acknowledged to disagree with.
            if self.plan.canary_step.is_some_and(|canary| step >= canary)
                && !self.result.canary_planted
                && self.model.plant_canary()
            {
                self.result.canary_planted = true;
                note!(self, "   canary: the model now disagrees with the log");
                // Checked at once: the run might otherwise end (a refused
                // corruption) before anything reads the planted event.
                self.full_check().map_err(at(step))?;
            }
            self.result.counters.cycles += 1;
            note!(self, "{step:4}: {action}");
            let outcome = self.act(action);
            self.note_disk_ops();
            outcome.map_err(at(step))?;
            self.result.counters.log_bytes_max =
                self.result.counters.log_bytes_max.max(self.model.size());
        }
        if self.ended {
            return Ok(());
        }
        // A last check, then a last power loss and recovery.
        let end = self.plan.actions.len();
        note!(self, "{end:4}: final check, power loss, reopen");
        self.full_check().map_err(at(end))?;
        self.final_reopen = true;
        self.power_loss(CrashPoint::Idle, CrashSpec::None, false)
            .map_err(at(end))?;
        self.note_disk_ops();
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
            Action::Reopen { quota, recovery } => {
                self.max_bytes = match quota {
                    QuotaChange::Keep => self.max_bytes,
                    QuotaChange::Raise(bytes) if self.max_bytes > 0 => self.max_bytes + bytes,
                    QuotaChange::Raise(_) => 0,
                    QuotaChange::Remove => 0,
                };
                self.restart(*recovery)
            }
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open between actions")
    }

    fn submit(
        &mut self,
        client: u32,
        stream: &str,
        spec: ExpectedSpec,
        specs: &[crate::plan::EventSpec],
    ) -> Check {
        if self.busy.contains(&client) {
            note!(self, "      client busy: skipped");
            return Ok(());
        }
        let current = self.model.version(stream);
        let expected = match spec {
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
        };
        let events: Vec<Event> = specs
            .iter()
            .map(|spec| Event::new(spec.type_name(), spec.data()))
            .collect();
        self.result.counters.appends_submitted += 1;
        match self.log().submit(stream, expected, &events) {
            Ok(ticket) => {
                let at = CLOCK_BASE_NS + CLOCK_STEP_NS * self.clock.load(Ordering::SeqCst);
                let record_bytes = record_bytes(stream, &events);
                let events = events
                    .into_iter()
                    .map(|event| ModelEvent {
                        event_type: event.event_type,
                        data: event.data,
                        at,
                    })
                    .collect();
                note!(self, "      queued as {ticket:?}, expected {expected:?}");
                self.pending.insert(
                    ticket,
                    Submitted {
                        client,
                        stream: stream.to_owned(),
                        expected,
                        events,
                        record_bytes,
                    },
                );
                self.busy.insert(client);
                Ok(())
            }
            Err(Error::Poisoned) if self.log().is_poisoned() => Ok(()),
            Err(error) => Err(format!(
                "submit to {stream} refused valid arguments: {error}"
            )),
        }
    }

    fn op_faults_injected(&self) -> u64 {
        let counts = self.vfs.fault_counts();
        injected_io_kinds()
            .iter()
            .map(|kind| counts.get(kind).copied().unwrap_or(0))
            .sum()
    }

    fn commit(&mut self, crash: CrashSpec) -> Check {
        let faults_before = self.op_faults_injected();
        match crash {
            CrashSpec::AfterOps(n) => self.vfs.crash_after_ops(n),
            CrashSpec::Failpoint => self.failpoint_armed.store(true, Ordering::SeqCst),
            CrashSpec::None => {}
        }
        if self.plan.tuning.next_segment == NextSegment::OnCall
            && self.commits.is_multiple_of(self.plan.prepare_every)
        {
            // A failure leaves the roll to create its file; the checks
            // after the commit see whatever it left.
            match self.log().prepare_next_segment() {
                Ok(true) => {
                    self.result.counters.segments_prepared += 1;
                    note!(self, "      prepared the next segment");
                }
                Ok(false) => {}
                Err(error) => note!(self, "      preparing the next segment failed: {error}"),
            }
        }
        self.commits += 1;
        let finished = self.log().commit_next_group();
        self.vfs.crash_after_ops(0);
        self.failpoint_armed.store(false, Ordering::SeqCst);
        let faulted = self.vfs.is_halted() || self.op_faults_injected() > faults_before;
        note!(self, "      {finished} appends finished");
        self.collect_outcomes(faulted)?;
        if self.vfs.is_halted() {
            let point = if crash == CrashSpec::Failpoint {
                CrashPoint::Failpoint
            } else {
                CrashPoint::Commit
            };
            return self.power_loss(point, CrashSpec::None, false);
        }
        // Preallocation stays inside the segment limit and the quota, and
        // the bytes stay as FORMAT.md says, between reopens too.
        if self.model.size() <= COMMIT_LAYOUT_CHECK_BYTES_MAX
            && self.in_doubt.is_empty()
            && !self.log().is_poisoned()
            && self.damage().is_empty()
        {
            crate::golden::check_layout(
                &self.vfs,
                self.dir.as_path(),
                &self.model,
                self.plan.segment_bytes,
                self.max_bytes,
            )?;
        }
        if self.log().is_poisoned() {
            note!(self, "      the log is poisoned: restart the process");
            return self.restart(CrashSpec::None);
        }
        Ok(())
    }

    /// Checks every finished append, in submission order, against the model
    /// as if they had run one at a time.
    fn collect_outcomes(&mut self, faulted: bool) -> Check {
        let tickets: Vec<Ticket> = self.pending.keys().copied().collect();
        for ticket in tickets {
            let Some(outcome) = self.log().take_outcome(ticket) else {
                continue;
            };
            let submitted = self.pending.remove(&ticket).expect("pending ticket");
            self.busy.remove(&submitted.client);
            note!(self, "      {ticket:?} -> {}", describe(&outcome));
            self.check_outcome(submitted, outcome, faulted)?;
        }
        Ok(())
    }

    fn check_outcome(
        &mut self,
        sub: Submitted,
        outcome: Result<u64, Error>,
        faulted: bool,
    ) -> Check {
        let stream = &sub.stream;
        let current = self.model.version(stream);
        let size = self.model.size();
        let matches = expected_matches(sub.expected, current);
        match outcome {
            Ok(version) => {
                if !matches {
                    return Err(format!(
                        "acknowledged an append to {stream} expecting {:?} while it was at version {current}",
                        sub.expected
                    ));
                }
                let count = sub.events.len() as u64;
                if version != current + count {
                    return Err(format!(
                        "append to {stream} at version {current} with {count} events returned version {version}"
                    ));
                }
                if self.max_bytes > 0 && size + sub.record_bytes > self.max_bytes {
                    return Err(format!(
                        "acknowledged {} bytes past the quota {} (log at {size})",
                        sub.record_bytes, self.max_bytes
                    ));
                }
                self.model.acknowledge(stream, sub.events, sub.record_bytes);
                self.result.counters.appends_acked += 1;
            }
            Err(Error::VersionConflict { actual, .. }) => {
                if matches || actual != current {
                    return Err(format!(
                        "version conflict on {stream} (actual {actual}) expecting {:?} at version {current}",
                        sub.expected
                    ));
                }
                self.result.counters.conflicts += 1;
            }
            Err(Error::Quota { limit, needed }) => {
                let wanted = size + sub.record_bytes;
                if !matches
                    || self.max_bytes == 0
                    || limit != self.max_bytes
                    || needed != wanted
                    || needed <= limit
                {
                    return Err(format!(
                        "quota refusal (limit {limit}, needed {needed}) of an append the model allows (limit {}, the log would reach {wanted})",
                        self.max_bytes
                    ));
                }
                self.result.counters.quota_refusals += 1;
            }
            Err(Error::Io(error)) => {
                if !faulted {
                    return Err(format!(
                        "append failed with an I/O error no fault explains: {error}"
                    ));
                }
                self.result.counters.io_failures += 1;
                if self.vfs.is_halted() || self.log().is_poisoned() {
                    self.in_doubt.push(sub);
                }
            }
            Err(Error::Poisoned) if self.log().is_poisoned() => {}
            Err(error) => return Err(format!("append to {stream} failed unexpectedly: {error}")),
        }
        Ok(())
    }

    fn read(&mut self, stream: &str, from: u64, limit: usize) -> Check {
        self.result.counters.reads += 1;
        let got = self.log().read(stream, from, limit);
        let want: Vec<&ModelEvent> = self
            .model
            .events(stream)
            .iter()
            .skip(from.max(1) as usize - 1)
            .take(limit)
            .collect();
        match got {
            Ok(events) => {
                if events.len() != want.len() {
                    return Err(format!(
                        "read {stream} from {from} limit {limit}: {} events, the model has {}",
                        events.len(),
                        want.len()
                    ));
                }
                for (i, (event, model)) in events.iter().zip(want).enumerate() {
                    check_event(stream, event, model, from.max(1) + i as u64)?;
                }
                Ok(())
            }
            Err(error) => self.excuse_read_error(error),
        }
    }

    fn excuse_read_error(&mut self, error: Error) -> Check {
        let excused = match &error {
            Error::Corrupt { file, .. } => {
                self.plan.faults.is_enabled(FaultKind::BitFlipOnRead) || self.damage_in(file)
            }
            Error::Io(_) => self.plan.faults.is_enabled(FaultKind::BitFlipOnRead),
            _ => false,
        };
        if !excused {
            return Err(format!("read failed with no fault to explain it: {error}"));
        }
        self.result.counters.read_errors += 1;
        Ok(())
    }

    /// Damage done to the current log (not to the ones the run left).
    fn damage(&self) -> Vec<Damage> {
        let mut damage = self.vfs.damage();
        damage.retain(|damage| damage.path.starts_with(&self.dir));
        damage
    }

    fn damage_in(&self, file: &std::path::Path) -> bool {
        self.damage().iter().any(|damage| damage.path == file)
    }

    /// Power fails (if it has not already), the process dies with it, and
    /// the log is reopened.
    fn power_loss(&mut self, point: CrashPoint, recovery: CrashSpec, bit_flip: bool) -> Check {
        self.count_crash(point);
        self.log = None;
        self.pending.clear();
        self.busy.clear();
        if self.vfs.is_halted() {
            self.vfs.reboot();
        } else {
            self.vfs.crash();
        }
        if bit_flip
            && self.plan.faults.is_enabled(FaultKind::BitFlipAtRest)
            && let Some(damage) = self.vfs.flip_random_bit_at_rest()
        {
            note!(self, "      at rest: {damage}");
        }
        self.reopen(recovery)
    }

    /// The process restarts: the page cache survives.
    fn restart(&mut self, recovery: CrashSpec) -> Check {
        self.log = None;
        self.pending.clear();
        self.busy.clear();
        self.reopen(recovery)
    }

    fn count_crash(&mut self, point: CrashPoint) {
        self.result.counters.crashes += 1;
        let enabled = self.plan.faults.enabled();
        if enabled.is_empty() {
            *self.result.coverage.entry((None, point)).or_default() += 1;
        }
        for kind in enabled {
            *self.result.coverage.entry((Some(kind), point)).or_default() += 1;
        }
    }

    fn options(&self) -> Options {
        let clock = Arc::clone(&self.clock);
        let armed = Arc::clone(&self.failpoint_armed);
        let vfs = self.vfs.clone();
        Options {
            segment_bytes: self.plan.segment_bytes,
            max_bytes: self.max_bytes,
            now: Some(Arc::new(move || {
                CLOCK_BASE_NS + CLOCK_STEP_NS * (clock.fetch_add(1, Ordering::SeqCst) + 1)
            })),
            failpoint: Some(Arc::new(move |_name: &str| {
                if armed.swap(false, Ordering::SeqCst) {
                    vfs.halt();
                    return Err(std::io::Error::other("power loss at the failpoint"));
                }
                Ok(())
            })),
        }
    }

    fn recovered(&mut self, outcome: Recovery) {
        *self.result.recoveries.entry(outcome).or_default() += 1;
    }

    fn reopen(&mut self, recovery: CrashSpec) -> Check {
        let mut arm = match recovery {
            CrashSpec::AfterOps(n) => Some(n),
            _ => None,
        };
        for _ in 0..OPEN_ATTEMPTS_MAX {
            if let Some(n) = arm.take() {
                self.vfs.crash_after_ops(n);
            }
            let faults_before = self.op_faults_injected();
            let opened = Log::open_tuned(
                self.vfs.clone(),
                &self.dir,
                self.options(),
                Tuning {
                    // A thread of the log's own would make the run depend
                    // on scheduling: the runner prepares at seeded points.
                    next_segment: match self.plan.tuning.next_segment {
                        NextSegment::Background => NextSegment::OnCall,
                        other => other,
                    },
                    ..self.plan.tuning
                },
            );
            self.vfs.crash_after_ops(0);
            self.result.counters.reopens += 1;
            match opened {
                Ok(log) => {
                    note!(self, "      reopened: {:?}", log.recovery());
                    self.check_reopened(&log)?;
                    self.log = Some(log);
                    return Ok(());
                }
                Err(error) if self.vfs.is_halted() => {
                    note!(self, "      power loss during recovery: {error}");
                    self.recovered(Recovery::CrashedDuringRecovery);
                    self.count_crash(CrashPoint::Recovery);
                    self.vfs.reboot();
                }
                Err(Error::Corrupt {
                    file,
                    offset,
                    reason,
                }) => {
                    if !self.damage_in(&file) {
                        return Err(format!(
                            "Open refused {}:{offset} ({reason}) but no fault damaged that file (damage: {:?})",
                            file.display(),
                            self.damage()
                        ));
                    }
                    note!(
                        self,
                        "      corruption refused: {}:{offset}: {reason}",
                        file.display()
                    );
                    self.recovered(Recovery::CorruptionRefused);
                    self.start_over();
                    continue;
                }
                Err(Error::Io(error)) if self.op_faults_injected() > faults_before => {
                    note!(
                        self,
                        "      open failed on an injected fault, retrying: {error}"
                    );
                    self.recovered(Recovery::RetriedAfterIoFault);
                }
                Err(error) => {
                    return Err(format!("Open failed with no fault to explain it: {error}"));
                }
            }
        }
        self.recovered(Recovery::GaveUp);
        self.ended = true;
        Ok(())
    }

    /// Goes on with a fresh, empty log in a new directory.
    fn start_over(&mut self) {
        self.generation += 1;
        self.dir = std::path::PathBuf::from(format!("{LOG_DIR}-{}", self.generation));
        self.model = Model::default();
        self.in_doubt.clear();
        self.max_bytes = self.plan.max_bytes;
        note!(self, "      starting over in {}", self.dir.display());
    }

    /// The oracle after every reopen.
    fn check_reopened(&mut self, log: &Log) -> Check {
        let report = log.recovery().clone();
        self.recovered(match report.tail {
            Tail::Clean => Recovery::Clean,
            Tail::Zeros { .. } => Recovery::ZeroTailTruncated,
            _ => Recovery::TornTailTruncated,
        });
        let recovered = log.last_seq();
        let acked = self.model.last_seq();
        if recovered >= acked {
            let extra = (recovered - acked) as usize;
            if extra > self.in_doubt.len() {
                return Err(format!(
                    "recovery found {extra} records past the acknowledged seq {acked}, but only {} appends were in doubt",
                    self.in_doubt.len()
                ));
            }
            for survivor in self.in_doubt.drain(..extra).collect::<Vec<_>>() {
                self.model
                    .acknowledge(&survivor.stream, survivor.events, survivor.record_bytes);
            }
        } else {
            self.excuse_loss(log, recovered, acked)?;
            self.model.truncate(recovered);
            self.result.counters.acked_lost_to_window += acked - recovered;
        }
        self.in_doubt.clear();
        self.check_log(log)?;
        // The bytes themselves, encoded independently (cheap enough for
        // small logs at every reopen; big ones are checked at the end).
        // Damage (a misdirected write, a flipped bit) may sit in bytes that
        // were rightly kept, so the byte check needs an undamaged disk.
        if (self.model.size() <= LAYOUT_CHECK_BYTES_MAX || self.final_reopen)
            && self.damage().is_empty()
        {
            // Exact bytes in exact files: nothing left for a scan to find.
            return crate::golden::check_layout(
                &self.vfs,
                self.dir.as_path(),
                &self.model,
                self.plan.segment_bytes,
                self.max_bytes,
            );
        }
        // Otherwise the directory itself: a read-only scan must find it clean.
        match recovery::verify(&self.vfs, self.dir.as_path()) {
            Ok(scan) if scan.tail == Tail::Clean && scan.last_seq == recovered => Ok(()),
            Ok(scan) => Err(format!("after reopen the directory is not clean: {scan:?}")),
            Err(_) if self.plan.faults.is_enabled(FaultKind::BitFlipOnRead) => Ok(()),
            Err(error) => Err(format!(
                "after reopen the directory fails verification: {error}"
            )),
        }
    }

    /// Acknowledged records `recovered + 1 ..= acked` are gone: allowed only
    /// when a fault damaged the last segment, inside the ambiguity window
    /// that recovery documents (damage there looks exactly like a torn tail).
    fn excuse_loss(&self, log: &Log, recovered: u64, acked: u64) -> Check {
        let files: Vec<String> = self
            .vfs
            .list_dir(self.dir.as_path())
            .map(|entries| entries.into_iter().map(|entry| entry.name).collect())
            .unwrap_or_default();
        let last = files.last().map(|name| self.dir.as_path().join(name));
        let last_len = last
            .as_ref()
            .and_then(|path| self.vfs.file_contents(path))
            .map_or(0, |bytes| bytes.len() as u64);
        // A flipped bit is ambiguous only in the log's last record; a
        // misdirected write can take any record of the file it hit.
        let excused = self.damage().iter().any(|damage| {
            Some(&damage.path) == last.as_ref()
                && match damage.kind {
                    FaultKind::BitFlipAtRest => last_len <= damage.offset && recovered + 1 == acked,
                    _ => true,
                }
        });
        if excused {
            return Ok(());
        }
        Err(format!(
            "acknowledged records {}..={acked} were lost by recovery ({:?}) and no damage in the last segment explains it (damage: {:?})",
            recovered + 1,
            log.recovery(),
            self.damage()
        ))
    }

    fn full_check(&mut self) -> Check {
        let log = self.log.take().expect("open");
        let result = self.check_log(&log);
        self.log = Some(log);
        result
    }

    /// Every stream reads back exactly as acknowledged.
    fn check_log(&mut self, log: &Log) -> Check {
        let names = log.streams("");
        if names != self.model.stream_names() {
            return Err(format!(
                "streams {names:?}, the model has {:?}",
                self.model.stream_names()
            ));
        }
        if log.last_seq() != self.model.last_seq() || log.size() != self.model.size() {
            return Err(format!(
                "log at seq {} size {}, the model at seq {} size {}",
                log.last_seq(),
                log.size(),
                self.model.last_seq(),
                self.model.size()
            ));
        }
        for name in names {
            if log.version(&name) != self.model.version(&name) {
                return Err(format!(
                    "{name} at version {}, the model at {}",
                    log.version(&name),
                    self.model.version(&name)
                ));
            }
            match log.read(&name, 1, usize::MAX) {
                Ok(events) => {
                    let want = self.model.events(&name);
                    if events.len() != want.len() {
                        return Err(format!(
                            "{name}: {} events read, {} acknowledged",
                            events.len(),
                            want.len()
                        ));
                    }
                    for (i, (event, model)) in events.iter().zip(want).enumerate() {
                        check_event(&name, event, model, i as u64 + 1)?;
                    }
                }
                Err(error) => self.excuse_read_error(error)?,
            }
        }
        Ok(())
    }
}

fn check_event(stream: &str, event: &Event, model: &ModelEvent, version: u64) -> Check {
    if event.stream != stream
        || event.version != version
        || event.event_type != model.event_type
        || event.data != model.data
        || event.at != model.at
    {
        return Err(format!(
            "{stream} version {version}: read {{stream {:?}, version {}, type {:?}, {} data bytes, at {}}}, acknowledged {{type {:?}, {} data bytes, at {}}}",
            event.stream,
            event.version,
            event.event_type,
            event.data.len(),
            event.at,
            model.event_type,
            model.data.len(),
            model.at
        ));
    }
    Ok(())
}

/// Bytes of the record for one append, by FORMAT.md (not the engine's code).
fn record_bytes(stream: &str, events: &[Event]) -> u64 {
    let batch: usize = events
        .iter()
        .map(|event| 2 + event.event_type.len() + 8 + 4 + event.data.len())
        .sum();
    (16 + 2 + stream.len() + 8 + 4 + batch) as u64
}

/// The oracle's own reading of `Expected` (SPEC section 4), written apart
/// from the engine's so that a wrong check in the engine cannot agree with
/// itself.
fn expected_matches(expected: Expected, current: u64) -> bool {
    match expected {
        Expected::Any => true,
        Expected::NoStream | Expected::Exact(0) => current == 0,
        Expected::StreamExists => current > 0,
        Expected::Exact(version) => version == current,
    }
}

fn describe(outcome: &Result<u64, Error>) -> String {
    match outcome {
        Ok(version) => format!("ok, version {version}"),
        Err(error) => format!("{error}"),
    }
}

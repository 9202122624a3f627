//! What runs report: the counts of one run ([`Counters`], recoveries,
//! crash coverage) in a [`SeedResult`], and their sum over a campaign in a
//! [`Summary`], whose `Display` is the deterministic stdout of
//! `durlog-sim run`. Nothing here judges an outcome: the oracle does, and
//! the runner counts what the oracle let pass.

use std::collections::BTreeMap;
use std::fmt;

use durlog::{Error, Rule};
use durlog_vfs::FaultKind;
use serde::{Deserialize, Serialize};

/// Where a power loss struck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashPoint {
    /// Between operations.
    Idle,
    /// During a disk operation of a group commit (roll, write, sync, cut-back).
    Commit,
    /// At the failpoint between an append's write and its sync.
    Failpoint,
    /// During a disk operation of `Log::open` (recovery).
    Recovery,
    /// During a disk operation of `Log::purge_before`.
    Purge,
    /// During a disk operation of `Log::truncate_after`.
    Truncate,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 6] = [
        CrashPoint::Idle,
        CrashPoint::Commit,
        CrashPoint::Failpoint,
        CrashPoint::Recovery,
        CrashPoint::Purge,
        CrashPoint::Truncate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::Idle => "idle",
            CrashPoint::Commit => "commit",
            CrashPoint::Failpoint => "failpoint",
            CrashPoint::Recovery => "recovery",
            CrashPoint::Purge => "purge",
            CrashPoint::Truncate => "truncate",
        }
    }
}

/// What a reopen found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Recovery {
    /// No record failed: nothing to decide.
    Clean,
    /// A rule of FORMAT.md's decision list decided what the first damaged
    /// record meant: Open truncated (zero tail, torn) or refused (the rest).
    Decided(Rule),
    CrashedDuringRecovery,
    /// Open failed on an injected I/O fault and was retried.
    RetriedAfterIoFault,
    /// Open kept failing on injected faults; the seed stopped there.
    GaveUp,
}

impl Recovery {
    pub fn name(self) -> String {
        match self {
            Recovery::Clean => "clean".into(),
            Recovery::Decided(rule) if rule.refuses() => format!("refused: {}", rule.name()),
            Recovery::Decided(rule) => format!("truncated: {}", rule.name()),
            Recovery::CrashedDuringRecovery => "crashed during recovery".into(),
            Recovery::RetriedAfterIoFault => "retried after I/O fault".into(),
            Recovery::GaveUp => "gave up (disk keeps failing)".into(),
        }
    }

    /// Every outcome, in the order the summary lists them.
    pub fn all() -> impl Iterator<Item = Recovery> {
        std::iter::once(Recovery::Clean)
            .chain(Rule::ALL.into_iter().map(Recovery::Decided))
            .chain([
                Recovery::CrashedDuringRecovery,
                Recovery::RetriedAfterIoFault,
                Recovery::GaveUp,
            ])
    }
}

/// An outcome the oracle accepted only because a fault the disk really
/// injected explains it, by a rule of FORMAT.md that says why no code could
/// have done better. Anything else that departs from the model is a
/// violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Excuse {
    /// An acknowledged record lost: a bit flipped at rest inside the log's
    /// last record, which then looks exactly like a torn write of it.
    LastRecordFlippedAtRest,
    /// Acknowledged records lost: a misdirected write landed on them, or
    /// took them elsewhere, and the bytes that proved it are gone (covered
    /// by later writes, or cut off by a cut-back or truncation).
    MisdirectedCopyGone,
    /// A read refused: a bit flipped at rest, or a misdirected write, in
    /// the bytes of the record it read.
    ReadOfDamagedRecord,
    /// A read refused: a bit flipped on read in the record, in both the
    /// read and the one re-read.
    ReadFlippedTwice,
    /// Open refused: a bit flipped at rest, or a misdirected write, in the
    /// record the refusal names (or after the last one, for a write that
    /// missed its place).
    OpenRefusedDamage,
    /// An append failed with an I/O error: a failed fsync, a short write,
    /// ENOSPC, or a power loss during its group's commit.
    AppendFailedOnFault,
    /// Open failed with an I/O error and was retried: a failed fsync, a
    /// short write, ENOSPC, or reads flipped during recovery.
    OpenFailedOnFault,
    /// A read-only scan after a reopen failed: reads flipped during it.
    ScanFlippedOnRead,
    /// A purge or a truncation failed with an I/O error: a failed fsync,
    /// a short write, ENOSPC, or a power loss during it.
    ChangeFailedOnFault,
}

impl Excuse {
    pub const ALL: [Excuse; 9] = [
        Excuse::LastRecordFlippedAtRest,
        Excuse::MisdirectedCopyGone,
        Excuse::ReadOfDamagedRecord,
        Excuse::ReadFlippedTwice,
        Excuse::OpenRefusedDamage,
        Excuse::AppendFailedOnFault,
        Excuse::OpenFailedOnFault,
        Excuse::ScanFlippedOnRead,
        Excuse::ChangeFailedOnFault,
    ];

    /// What was accepted, and the fault and FORMAT.md rule that excuse it.
    pub fn explain(self) -> (&'static str, &'static str) {
        match self {
            Excuse::LastRecordFlippedAtRest => (
                "acked records lost",
                "bit-flip-at-rest in the log's last record: nothing after it proves it was synced (FORMAT.md, What stays ambiguous)",
            ),
            Excuse::MisdirectedCopyGone => (
                "acked records lost",
                "misdirected-write over them or in their place, its copy then covered or cut off: the damage stays, its proof is gone (FORMAT.md, What stays ambiguous)",
            ),
            Excuse::ReadOfDamagedRecord => (
                "reads refused",
                "bit-flip-at-rest or misdirected-write in the record read: its CRC fails (FORMAT.md, Reading a record)",
            ),
            Excuse::ReadFlippedTwice => (
                "reads refused",
                "bit-flip-on-read in the record in both of its reads (FORMAT.md, Reading a record)",
            ),
            Excuse::OpenRefusedDamage => (
                "opens refused",
                "bit-flip-at-rest or misdirected-write in the refused record, by the refusing rule above (FORMAT.md, Recovery)",
            ),
            Excuse::AppendFailedOnFault => (
                "appends failed",
                "failed-fsync, short-write, no-space or crash during their commit, cut back (FORMAT.md, A crash at each step)",
            ),
            Excuse::OpenFailedOnFault => (
                "opens retried",
                "failed-fsync, short-write or no-space in recovery, or reads that never agreed (FORMAT.md, Recovery)",
            ),
            Excuse::ScanFlippedOnRead => (
                "scans failed",
                "bit-flip-on-read in the read-only scan after a reopen, reads that never agreed (FORMAT.md, Recovery)",
            ),
            Excuse::ChangeFailedOnFault => (
                "changes failed",
                "failed-fsync, short-write, no-space or crash during them: the state file left the log before or after them, never between (FORMAT.md, Retention and truncation)",
            ),
        }
    }
}

/// Counts of what a run did. Serialized field by field into shard reports
/// (`shard.rs`); a report missing a field is refused, not read as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// Largest size the log reached, in bytes.
    pub log_bytes_max: u64,
    /// Next segments prepared ahead of their roll.
    pub segments_prepared: u64,
    /// Records handed to subscribers, each checked.
    pub deliveries: u64,
    /// Purges that returned `Ok` having removed segments, by
    /// `purge_before` and by the retention.
    pub purges: u64,
    pub retention_purges: u64,
    /// Truncations that returned `Ok` having removed records, and those
    /// refused (below the first seq kept).
    pub truncations: u64,
    pub truncations_refused: u64,
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
        self.log_bytes_max = self.log_bytes_max.max(other.log_bytes_max);
        self.segments_prepared += other.segments_prepared;
        self.deliveries += other.deliveries;
        self.purges += other.purges;
        self.retention_purges += other.retention_purges;
        self.truncations += other.truncations;
        self.truncations_refused += other.truncations_refused;
    }

    /// Counts an append's outcome, once the oracle has accepted it.
    pub(crate) fn count_outcome(&mut self, outcome: &Result<u64, Error>) {
        match outcome {
            Ok(_) => self.appends_acked += 1,
            Err(Error::VersionConflict { .. }) => self.conflicts += 1,
            Err(Error::Quota { .. }) => self.quota_refusals += 1,
            Err(Error::Io(_)) => self.io_failures += 1,
            Err(_) => {}
        }
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
    /// Outcomes accepted only because a fault explains them.
    pub excused: BTreeMap<Excuse, u64>,
    /// Power losses by (a fault enabled in the run, or none) x crash point.
    pub coverage: BTreeMap<(Option<FaultKind>, CrashPoint), u64>,
    pub digest: u64,
    pub violation: Option<Violation>,
    /// A person-readable trace, when asked for.
    pub trace: Vec<String>,
    /// The canary planted its failure in this run.
    pub canary_planted: bool,
}

impl SeedResult {
    /// Counts a power loss at `point`, once per fault `enabled` in the run
    /// (or once under "no fault") for the coverage table.
    pub(crate) fn count_crash(&mut self, point: CrashPoint, enabled: &[FaultKind]) {
        self.counters.crashes += 1;
        if enabled.is_empty() {
            *self.coverage.entry((None, point)).or_default() += 1;
        }
        for &kind in enabled {
            *self.coverage.entry((Some(kind), point)).or_default() += 1;
        }
    }

    pub(crate) fn count_recovery(&mut self, outcome: Recovery) {
        *self.recoveries.entry(outcome).or_default() += 1;
    }
}

/// What a campaign found, aggregated in seed order.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub counters: Counters,
    pub faults: BTreeMap<FaultKind, u64>,
    pub recoveries: BTreeMap<Recovery, u64>,
    pub excused: BTreeMap<Excuse, u64>,
    pub coverage: BTreeMap<(Option<FaultKind>, CrashPoint), u64>,
    /// The trace digests of all seeds, folded in seed order.
    pub digest: u64,
    /// Failing seeds, in seed order.
    pub violations: Vec<(u64, Violation)>,
    /// Seeds in which `--canary` planted its failure.
    pub canaries: u64,
}

impl Summary {
    pub(crate) fn add(&mut self, result: &SeedResult) {
        self.seeds += 1;
        self.canaries += u64::from(result.canary_planted);
        self.counters.add(&result.counters);
        for (kind, count) in &result.faults {
            *self.faults.entry(*kind).or_default() += count;
        }
        for (outcome, count) in &result.recoveries {
            *self.recoveries.entry(*outcome).or_default() += count;
        }
        for (excuse, count) in &result.excused {
            *self.excused.entry(*excuse).or_default() += count;
        }
        for (key, count) in &result.coverage {
            *self.coverage.entry(*key).or_default() += count;
        }
    }

    fn fmt_counters(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        writeln!(f, "seeds       {}", self.seeds)?;
        writeln!(f, "cycles      {} (workload steps)", c.cycles)?;
        writeln!(
            f,
            "appends     {} submitted, {} acknowledged, {} version conflicts, {} over quota, {} failed on I/O",
            c.appends_submitted, c.appends_acked, c.conflicts, c.quota_refusals, c.io_failures
        )?;
        let refused =
            self.excused(Excuse::ReadOfDamagedRecord) + self.excused(Excuse::ReadFlippedTwice);
        writeln!(
            f,
            "reads       {} ({refused} refused on injected faults, never with wrong data)",
            c.reads
        )?;
        writeln!(
            f,
            "crashes     {} power losses, {} reopens",
            c.crashes, c.reopens
        )?;
        writeln!(f, "log size    up to {} bytes per seed", c.log_bytes_max)?;
        writeln!(
            f,
            "segments    {} next segments prepared ahead of their roll",
            c.segments_prepared
        )?;
        writeln!(
            f,
            "subscribers {} records delivered, each the next acknowledged one",
            c.deliveries
        )?;
        writeln!(
            f,
            "retention   {} purges ({} by the retention policy), {} truncations ({} refused below the first seq kept)",
            c.purges + c.retention_purges,
            c.retention_purges,
            c.truncations,
            c.truncations_refused
        )
    }

    fn excused(&self, excuse: Excuse) -> u64 {
        self.excused.get(&excuse).copied().unwrap_or(0)
    }

    /// Each excused kind on its own line, with the fault and the rule.
    fn fmt_excused(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "excused (accepted only because the fault named really hit those bytes):"
        )?;
        for excuse in Excuse::ALL {
            let (what, why) = excuse.explain();
            writeln!(f, "  {what:<18} {:>9}  {why}", self.excused(excuse))?;
        }
        Ok(())
    }

    /// Every outcome of a reopen, the rules of FORMAT.md's decision list
    /// among them, zeros included: a rule that never decides is untested.
    fn fmt_recoveries(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "recoveries:")?;
        for outcome in Recovery::all() {
            let count = self.recoveries.get(&outcome).copied().unwrap_or(0);
            writeln!(f, "  {:<36} {count}", outcome.name())?;
        }
        Ok(())
    }

    fn fmt_coverage(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "coverage (power losses by fault enabled x crash point):")?;
        write!(f, "  {:<22}", "")?;
        for point in CrashPoint::ALL {
            write!(f, " {:>10}", point.name())?;
        }
        writeln!(f)?;
        let rows = std::iter::once(None).chain(FaultKind::ALL.iter().copied().map(Some));
        for kind in rows {
            write!(f, "  {:<22}", kind.map_or("(no fault)", FaultKind::name))?;
            for point in CrashPoint::ALL {
                write!(
                    f,
                    " {:>10}",
                    self.coverage.get(&(kind, point)).copied().unwrap_or(0)
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_counters(f)?;
        writeln!(f, "faults injected:")?;
        for kind in FaultKind::ALL {
            writeln!(
                f,
                "  {:<22} {}",
                kind.name(),
                self.faults.get(kind).copied().unwrap_or(0)
            )?;
        }
        self.fmt_recoveries(f)?;
        self.fmt_excused(f)?;
        self.fmt_coverage(f)?;
        if self.canaries > 0 {
            writeln!(f, "canaries    {} planted", self.canaries)?;
        }
        writeln!(f, "violations  {}", self.violations.len())?;
        write!(f, "digest      {:016x}", self.digest)
    }
}

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
    /// During a disk operation of a change to the tables (metadata, a
    /// deletion, a consumer position).
    Tables,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 7] = [
        CrashPoint::Idle,
        CrashPoint::Commit,
        CrashPoint::Failpoint,
        CrashPoint::Recovery,
        CrashPoint::Purge,
        CrashPoint::Truncate,
        CrashPoint::Tables,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::Idle => "idle",
            CrashPoint::Commit => "commit",
            CrashPoint::Failpoint => "failpoint",
            CrashPoint::Recovery => "recovery",
            CrashPoint::Purge => "purge",
            CrashPoint::Truncate => "truncate",
            CrashPoint::Tables => "tables",
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
    /// A read failed with EIO: the disk failed a read (or an open) during
    /// it, before reading anything.
    ReadFailed,
    /// Open refused: a bit flipped at rest, or a misdirected write, in the
    /// record the refusal names (or after the last one, for a write that
    /// missed its place).
    OpenRefusedDamage,
    /// Open refused by the seq at the damage: the header there lies in the
    /// remains of a duplicated write's copy past the last record, whose
    /// bytes (an older record's, cut by the writes after it) spell a later
    /// seq.
    OpenRefusedCopy,
    /// An append failed with an I/O error: a failed fsync, a short write,
    /// ENOSPC, or a power loss during its group's commit.
    AppendFailedOnFault,
    /// Open failed with an I/O error and was retried: a failed fsync, a
    /// short write, ENOSPC, a failed read, or reads flipped during
    /// recovery.
    OpenFailedOnFault,
    /// A read-only scan after a reopen failed: reads flipped, or failed,
    /// during it.
    ScanFlippedOnRead,
    /// A purge or a truncation failed with an I/O error: a failed fsync,
    /// a short write, ENOSPC, or a power loss during it.
    ChangeFailedOnFault,
    /// A file opened as written though a bit flipped at rest in it: the
    /// Open's read flipped the same bit back (its table kept, or a later
    /// read-only scan refusing the damage).
    FlippedBackOnOpen,
}

impl Excuse {
    pub const ALL: [Excuse; 12] = [
        Excuse::LastRecordFlippedAtRest,
        Excuse::MisdirectedCopyGone,
        Excuse::ReadOfDamagedRecord,
        Excuse::ReadFlippedTwice,
        Excuse::ReadFailed,
        Excuse::OpenRefusedDamage,
        Excuse::OpenRefusedCopy,
        Excuse::AppendFailedOnFault,
        Excuse::OpenFailedOnFault,
        Excuse::ScanFlippedOnRead,
        Excuse::ChangeFailedOnFault,
        Excuse::FlippedBackOnOpen,
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
            Excuse::ReadFailed => (
                "reads failed",
                "read-error on a read or an open of the segment read: the disk returned EIO, the read says so and returns nothing (FORMAT.md, Reading a record)",
            ),
            Excuse::OpenRefusedDamage => (
                "opens refused",
                "bit-flip-at-rest or misdirected-write in the refused record, by the refusing rule above (FORMAT.md, Recovery)",
            ),
            Excuse::OpenRefusedCopy => (
                "opens refused",
                "duplicated-write past the last record, its copy cut by later writes: the header at the damage is an older record's bytes that spell a later seq (FORMAT.md, What stays ambiguous)",
            ),
            Excuse::AppendFailedOnFault => (
                "appends failed",
                "failed-fsync, short-write, no-space or crash during their commit, cut back (FORMAT.md, A crash at each step)",
            ),
            Excuse::OpenFailedOnFault => (
                "opens retried",
                "failed-fsync, short-write, no-space or read-error in recovery, or reads that never agreed (FORMAT.md, Recovery)",
            ),
            Excuse::ScanFlippedOnRead => (
                "scans failed",
                "bit-flip-on-read or read-error in the read-only scan after a reopen: reads that never agreed, or failed (FORMAT.md, Recovery)",
            ),
            Excuse::ChangeFailedOnFault => (
                "changes failed",
                "failed-fsync, short-write, no-space or crash during them: the state file left the log before or after them, never between (FORMAT.md, Retention and truncation)",
            ),
            Excuse::FlippedBackOnOpen => (
                "damage read back",
                "bit-flip-at-rest in a file, flipped back by a bit-flip-on-read of the same bit while Open read it: Open took the bytes as written, a later read of the file sees the damage (FORMAT.md, Recovery; Stream metadata and consumer positions)",
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
    /// Reopens after which the oracle read every stream and the whole log
    /// back through the engine (the others read back the records since
    /// the reopen before: `RunOptions::full_checks`).
    pub full_read_backs: u64,
    pub reads: u64,
    /// Of them, reads of the whole log through a filter (`ReadFiltered`).
    pub filtered_reads: u64,
    /// Largest size the log reached, in bytes.
    pub log_bytes_max: u64,
    /// Next segments prepared ahead of their roll.
    pub segments_prepared: u64,
    /// Records handed to subscribers, each checked.
    pub deliveries: u64,
    /// Records handed over by followers of the files (as in another
    /// process), each checked; and how many times one started again
    /// after a purge, a truncation or a fault.
    pub file_deliveries: u64,
    pub file_follower_restarts: u64,
    /// Polls of a follower of the files after which it recorded its
    /// position in its `PositionFile` (or tried to).
    pub file_positions: u64,
    /// Second openers beside the writer, each refused with the files left
    /// as they were.
    pub second_opens_refused: u64,
    /// Purges that returned `Ok` having removed segments, by
    /// `purge_before` and by the retention.
    pub purges: u64,
    pub retention_purges: u64,
    /// Truncations that returned `Ok` having removed records, and those
    /// refused (below the first seq kept).
    pub truncations: u64,
    pub truncations_refused: u64,
    /// Changes to the tables that returned `Ok` having changed them.
    pub metadata_changes: u64,
    pub deletions: u64,
    pub positions_recorded: u64,
    /// Consumers resumed from their durable position, each checked.
    pub resumptions: u64,
    /// Idempotent retries: of an append that had landed (nothing
    /// written), of one that had not (written now), refused.
    pub retries_landed: u64,
    pub retries_written: u64,
    pub retries_refused: u64,
    /// Appends whose events all carried ids the stream held: answered as
    /// a retry that landed (nothing written), and refused as a conflict
    /// (some of them held, or in another order).
    pub ids_landed: u64,
    pub ids_refused: u64,
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
        self.full_read_backs += other.full_read_backs;
        self.reads += other.reads;
        self.filtered_reads += other.filtered_reads;
        self.log_bytes_max = self.log_bytes_max.max(other.log_bytes_max);
        self.segments_prepared += other.segments_prepared;
        self.deliveries += other.deliveries;
        self.file_deliveries += other.file_deliveries;
        self.file_follower_restarts += other.file_follower_restarts;
        self.file_positions += other.file_positions;
        self.second_opens_refused += other.second_opens_refused;
        self.purges += other.purges;
        self.retention_purges += other.retention_purges;
        self.truncations += other.truncations;
        self.truncations_refused += other.truncations_refused;
        self.metadata_changes += other.metadata_changes;
        self.deletions += other.deletions;
        self.positions_recorded += other.positions_recorded;
        self.resumptions += other.resumptions;
        self.retries_landed += other.retries_landed;
        self.retries_written += other.retries_written;
        self.retries_refused += other.retries_refused;
        self.ids_landed += other.ids_landed;
        self.ids_refused += other.ids_refused;
    }

    /// Counts an idempotent retry's outcome, once the oracle has accepted it.
    pub(crate) fn count_retry(&mut self, retried: crate::run::Retried) {
        use crate::run::Retried;
        match retried {
            Retried::Landed => self.retries_landed += 1,
            Retried::Written => self.retries_written += 1,
            Retried::Refused => self.retries_refused += 1,
            Retried::Failed => self.io_failures += 1,
        }
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

pub use durlog_testbed::Violation;

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

impl SeedResult {
    /// The run's counts, for the campaign's sum.
    pub fn tally(&self) -> Tally {
        Tally {
            counters: self.counters.clone(),
            faults: self.faults.clone(),
            recoveries: self.recoveries.clone(),
            excused: self.excused.clone(),
            coverage: self.coverage.clone(),
            canaries: u64::from(self.canary_planted),
        }
    }
}

/// What runs counted, one seed's or a campaign's (summed in seed order);
/// its [`durlog_testbed::Tally::write`] is the body of `durlog-sim run`'s
/// summary. Kept in shard reports by name (`TallyWire`): faults,
/// recoveries and crash points as the summary prints them, and a report
/// missing a count is refused, not read as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "TallyWire", try_from = "TallyWire")]
pub struct Tally {
    pub counters: Counters,
    pub faults: BTreeMap<FaultKind, u64>,
    pub recoveries: BTreeMap<Recovery, u64>,
    pub excused: BTreeMap<Excuse, u64>,
    pub coverage: BTreeMap<(Option<FaultKind>, CrashPoint), u64>,
    /// Seeds in which `--canary` planted its failure.
    pub canaries: u64,
}

impl durlog_testbed::Tally for Tally {
    fn add(&mut self, other: &Tally) {
        self.counters.add(&other.counters);
        self.canaries += other.canaries;
        for (kind, count) in &other.faults {
            *self.faults.entry(*kind).or_default() += count;
        }
        for (outcome, count) in &other.recoveries {
            *self.recoveries.entry(*outcome).or_default() += count;
        }
        for (excuse, count) in &other.excused {
            *self.excused.entry(*excuse).or_default() += count;
        }
        for (key, count) in &other.coverage {
            *self.coverage.entry(*key).or_default() += count;
        }
    }

    fn cycles(&self) -> u64 {
        self.counters.cycles
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        Ok(())
    }
}

impl Tally {
    fn fmt_counters(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        writeln!(f, "cycles      {} (workload steps)", c.cycles)?;
        writeln!(
            f,
            "appends     {} submitted, {} acknowledged, {} version conflicts, {} over quota, {} failed on I/O",
            c.appends_submitted, c.appends_acked, c.conflicts, c.quota_refusals, c.io_failures
        )?;
        let refused = self.excused(Excuse::ReadOfDamagedRecord)
            + self.excused(Excuse::ReadFlippedTwice)
            + self.excused(Excuse::ReadFailed);
        writeln!(
            f,
            "reads       {} ({} of the whole log through filters; {refused} refused on injected faults, never with wrong data)",
            c.reads, c.filtered_reads
        )?;
        writeln!(
            f,
            "crashes     {} power losses, {} reopens ({} with every stream read back, the others the records since the reopen before)",
            c.crashes, c.reopens, c.full_read_backs
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
            "followers   {} records handed over from the files, each checked; {} started again; {} positions recorded in their own files",
            c.file_deliveries, c.file_follower_restarts, c.file_positions
        )?;
        writeln!(
            f,
            "openers     {} second openers beside the writer refused, no byte changed",
            c.second_opens_refused
        )?;
        writeln!(
            f,
            "retention   {} purges ({} by the retention policy), {} truncations ({} refused below the first seq kept)",
            c.purges + c.retention_purges,
            c.retention_purges,
            c.truncations,
            c.truncations_refused
        )?;
        writeln!(
            f,
            "tables      {} metadata changes, {} deletions, {} consumer positions recorded, {} consumers resumed",
            c.metadata_changes, c.deletions, c.positions_recorded, c.resumptions
        )?;
        writeln!(
            f,
            "retries     {} landed before (nothing written), {} written now, {} refused",
            c.retries_landed, c.retries_written, c.retries_refused
        )?;
        writeln!(
            f,
            "event ids   {} appends whose ids the stream held answered as landed (nothing written), {} refused as held in part",
            c.ids_landed, c.ids_refused
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

/// [`Tally`] as shard reports keep it: faults, recoveries and crash points
/// by their printed names, and only the entries that are not zero.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TallyWire {
    counters: Counters,
    faults: BTreeMap<String, u64>,
    recoveries: BTreeMap<String, u64>,
    excused: BTreeMap<Excuse, u64>,
    /// Power losses by fault enabled (`None`: no fault) and crash point.
    coverage: Vec<CoverageCount>,
    canaries: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoverageCount {
    fault: Option<String>,
    point: CrashPoint,
    count: u64,
}

impl From<Tally> for TallyWire {
    fn from(tally: Tally) -> TallyWire {
        TallyWire {
            counters: tally.counters,
            faults: tally
                .faults
                .iter()
                .map(|(kind, count)| (kind.name().to_string(), *count))
                .collect(),
            recoveries: tally
                .recoveries
                .iter()
                .map(|(outcome, count)| (outcome.name(), *count))
                .collect(),
            excused: tally.excused,
            coverage: tally
                .coverage
                .iter()
                .map(|((kind, point), count)| CoverageCount {
                    fault: kind.map(|kind| kind.name().to_string()),
                    point: *point,
                    count: *count,
                })
                .collect(),
            canaries: tally.canaries,
        }
    }
}

impl TryFrom<TallyWire> for Tally {
    type Error = String;

    fn try_from(wire: TallyWire) -> Result<Tally, String> {
        let kind = |name: &str| name.parse::<FaultKind>().map_err(|error| error.to_string());
        let mut tally = Tally {
            counters: wire.counters,
            excused: wire.excused,
            canaries: wire.canaries,
            ..Tally::default()
        };
        for (name, count) in &wire.faults {
            tally.faults.insert(kind(name)?, *count);
        }
        for (name, count) in &wire.recoveries {
            let outcome = Recovery::all()
                .find(|outcome| outcome.name() == *name)
                .ok_or_else(|| format!("unknown recovery outcome {name:?}"))?;
            tally.recoveries.insert(outcome, *count);
        }
        for entry in &wire.coverage {
            let fault = entry.fault.as_deref().map(kind).transpose()?;
            tally.coverage.insert((fault, entry.point), entry.count);
        }
        Ok(tally)
    }
}

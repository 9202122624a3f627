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

mod counters;

pub use counters::Counters;

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
    /// Acknowledged records lost: a bit flipped at rest inside the log's
    /// last record (or inside every record from the first lost one to the
    /// last), which then looks exactly like a torn write of them: no valid
    /// record follows the first damage to prove it was synced.
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
    /// A read refused: a fault struck a sealed segment's index file, and
    /// the segment's bytes, walked whole instead, are damaged (at rest, or
    /// on both reads) in the record the refusal names.
    WalkedPastDamage,
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
    /// A trusting Open (`Tuning::open_trusts_index_files`) took a sealed
    /// segment from its index file though a bit flipped at rest, or a
    /// misdirected write, sits in its records: it does not read them, and
    /// the read-only scan after it refuses the damage.
    TrustedIndexOverDamage,
}

impl Excuse {
    pub const ALL: [Excuse; 14] = [
        Excuse::LastRecordFlippedAtRest,
        Excuse::MisdirectedCopyGone,
        Excuse::ReadOfDamagedRecord,
        Excuse::ReadFlippedTwice,
        Excuse::WalkedPastDamage,
        Excuse::ReadFailed,
        Excuse::OpenRefusedDamage,
        Excuse::OpenRefusedCopy,
        Excuse::AppendFailedOnFault,
        Excuse::OpenFailedOnFault,
        Excuse::ScanFlippedOnRead,
        Excuse::ChangeFailedOnFault,
        Excuse::FlippedBackOnOpen,
        Excuse::TrustedIndexOverDamage,
    ];

    /// What was accepted, and the fault and FORMAT.md rule that excuse it.
    pub fn explain(self) -> (&'static str, &'static str) {
        match self {
            Excuse::LastRecordFlippedAtRest => (
                "acked records lost",
                "bit-flip-at-rest in the log's last record, or in every record from the first lost one to the last: no valid record after the first damage proves it was synced (FORMAT.md, What stays ambiguous)",
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
            Excuse::WalkedPastDamage => (
                "reads refused",
                "bit-flip or misdirected-write on a sealed segment's index file, and bit-flip-at-rest, misdirected-write or bit-flip-on-read twice in the record of that segment the refusal names: without its index, a segment's records are found by walking it whole from its start (FORMAT.md, Index files)",
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
            Excuse::TrustedIndexOverDamage => (
                "damage not read",
                "bit-flip-at-rest or misdirected-write in a sealed segment whose index file a trusting Open took: it reads no record of it, a later read or scan refuses the damage (FORMAT.md, Index files)",
            ),
        }
    }
}

impl Counters {
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
        self.counters.write(f)?;
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

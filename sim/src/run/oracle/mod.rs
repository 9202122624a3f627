//! The oracle: every check of what the engine did against the model of
//! what was acknowledged, and every excuse for a departure from it.
//!
//! The contract with the runner: the runner reports what happened (an
//! append's outcome and the facts of the commit that finished it, a read's
//! result and the faults injected during it, a reopened log, a refused or
//! failed open) together with the [`Evidence`]: the damage the disk says it
//! did to this log, and the disk itself to read. Each check returns `Ok` or
//! the violation's message. The model moves only on an acknowledgement, on
//! an in-doubt append that a reopen found whole, and on a loss that an
//! excuse covers (`excuse.rs`); outcomes accepted only because a fault
//! explains them are counted by [`Excuse`]. The oracle reads the log and
//! the disk but changes neither, and it judges with its own code: its own
//! reading of `Expected`, its own encoder of the bytes and record sizes
//! (`golden`), never the engine's. What readers see is judged in
//! `reads.rs`, the tables beside the records in `tables.rs`, purges and
//! truncations in `change.rs`, retries and resumed consumers in
//! `stores.rs`: each beside its runner's side of the same name in `run/`.

use crate::run::clock::Clock;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use durlog::{Error, Expected, Log, Tail, recovery};
use durlog_vfs::FaultEvent;

use crate::golden;
use crate::model::{IdsSay, Model, ModelEvent};
use crate::report::Excuse;

mod all;
mod change;
pub(super) mod excuse;
mod filter;
mod reads;
mod stores;
pub(super) mod tables;

use change::InDoubt;
pub(crate) use change::{RetentionWindow, check_segment_names};
use excuse::Evidence;
pub(crate) use filter::SubFilter;
pub(crate) use stores::Retry;

/// Logs up to this size have their bytes checked at every reopen (larger
/// ones at the end of the run, and by `recovery::verify` at every reopen).
const LAYOUT_CHECK_BYTES_MAX: u64 = 64 << 10;

/// Logs up to this size have their bytes checked after every commit too.
const COMMIT_LAYOUT_CHECK_BYTES_MAX: u64 = 8 << 10;

/// `Ok`, or what the oracle found wrong.
pub(crate) type Check = Result<(), String>;

/// An append submitted and not yet finished.
#[derive(Clone, Debug, Hash)]
pub(crate) struct Submitted {
    pub(crate) client: u32,
    pub(crate) stream: String,
    pub(crate) expected: Expected,
    pub(crate) events: Vec<ModelEvent>,
}

/// What the runner saw of the commit that finished an append.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CommitFacts {
    /// The quota the log runs under (0: none).
    pub(crate) max_bytes: u64,
    /// Power was lost, or the disk injected a fault that fails an
    /// operation, during the commit.
    pub(crate) faulted: bool,
    /// Power is off now.
    pub(crate) halted: bool,
    /// The log refuses all work until it is reopened.
    pub(crate) poisoned: bool,
}

/// The limits a log runs under, which its bytes on disk must keep.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) segment_bytes: u64,
    /// The quota (0: none).
    pub(crate) max_bytes: u64,
    /// The group window the writers used, which recovery assumes.
    pub(crate) group_bytes_max: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Oracle {
    pub(super) model: Model,
    /// Appends whose group failed in a way that may have left them on disk
    /// (power loss, or a cut-back that failed): after the next reopen each
    /// is whole or absent, and the survivors come first.
    in_doubt: Vec<Submitted>,
    /// A purge or a truncation likewise (`change.rs`).
    pub(super) change_in_doubt: Option<InDoubt>,
    /// What the retention may purge in the commit under way.
    pub(super) retention: Option<RetentionWindow>,
    /// The changes to the tables whose calls failed on a fault after
    /// their file's rename, in order: the model holds what the log shows
    /// now, the next reopen may show any of them undone, last first
    /// (`stores.rs`).
    pub(super) table_in_doubt: Vec<tables::TableChange>,
    /// The appends in doubt at the last reopen, for their clients to retry.
    pub(super) retryable: Vec<Submitted>,
    excused: BTreeMap<Excuse, u64>,
    /// Full checks of the log so far: each reads one stream backward, in
    /// turn (every stream at every check cost 8% of a run).
    pub(super) log_checks: usize,
    /// The whole log is read back through the engine at one reopen in
    /// this many (`Plan::full_reads_every`; 0 counts as 1), ...
    full_reads_every: u32,
    /// ... and next after this many more (0: at the next).
    full_reads_in: u32,
    /// Reopens after which the whole log was read back.
    full_reads: u64,
    /// Appends whose ids the stream held: answered as landed, refused.
    pub(super) ids_decided: (u64, u64),
}

impl Oracle {
    /// An oracle that reads the whole log back at one reopen in `every`,
    /// first at reopen `first` (the first open counting as 0).
    pub(crate) fn reading_back(every: u32, first: u32) -> Oracle {
        Oracle {
            full_reads_every: every,
            full_reads_in: first,
            ..Oracle::default()
        }
    }

    pub(crate) fn model(&self) -> &Model {
        &self.model
    }

    /// Feeds `state` everything the oracle's later verdicts depend on:
    /// the model and what is in doubt, and which checks come next. Its
    /// counts of what it saw (excuses, read-backs, ids) judge nothing.
    pub(crate) fn hash_judging_state(&self, state: &mut impl Hasher) {
        let Oracle {
            model,
            in_doubt,
            change_in_doubt,
            retention,
            table_in_doubt,
            retryable,
            excused: _,
            log_checks,
            full_reads_every,
            full_reads_in,
            full_reads: _,
            ids_decided: _,
        } = self;
        model.hash(state);
        in_doubt.hash(state);
        change_in_doubt.hash(state);
        retention.hash(state);
        table_in_doubt.hash(state);
        retryable.hash(state);
        log_checks.hash(state);
        full_reads_every.hash(state);
        full_reads_in.hash(state);
    }

    pub(crate) fn full_read_backs(&self) -> u64 {
        self.full_reads
    }

    pub(crate) fn excused(&self) -> &BTreeMap<Excuse, u64> {
        &self.excused
    }

    /// An append whose commit lost power or poisoned the log (a retry's):
    /// the next reopen finds it whole or not at all.
    pub(crate) fn in_doubt_again(&mut self, submitted: Submitted) {
        self.in_doubt.push(submitted);
    }

    /// Counts an outcome accepted by `excuse`.
    pub(crate) fn excuse(&mut self, excuse: Excuse, count: u64) {
        *self.excused.entry(excuse).or_default() += count;
    }

    /// The canary: the model now disagrees with the log, as it would with
    /// a broken engine. False if nothing was acknowledged to disagree with.
    pub(crate) fn plant_canary(&mut self) -> bool {
        self.model.plant_canary()
    }

    /// The run goes on with a fresh, empty log: nothing of the old one is
    /// expected in it.
    pub(crate) fn start_over(&mut self) {
        self.model = Model::default();
        self.in_doubt.clear();
        self.change_in_doubt = None;
        self.retention = None;
        self.table_in_doubt.clear();
        self.retryable.clear();
    }

    /// Checks a finished append, as if the appends of its group had run one
    /// at a time in submission order.
    pub(crate) fn check_outcome(
        &mut self,
        sub: Submitted,
        outcome: &Result<u64, Error>,
        commit: &CommitFacts,
    ) -> Check {
        let stream = &sub.stream;
        let current = self.model.version(stream);
        let size = self.model.size();
        let record_bytes = golden::record_bytes(stream, &sub.events);
        let matches = expected_matches(sub.expected, current);
        if self.model.tables.is_hard_deleted(stream) {
            return match outcome {
                Err(Error::StreamDeleted { stream: named }) if named == stream => Ok(()),
                other => Err(format!(
                    "an append to {stream}, hard-deleted, answered {other:?}, not StreamDeleted"
                )),
            };
        }
        let said = self.model.ids_say(stream, &sub.events);
        if let Some(said @ (IdsSay::Landed(_) | IdsSay::Partly)) = said {
            return self.check_by_ids(stream, said, current, outcome, commit);
        }
        match outcome {
            Ok(version) => {
                if !matches {
                    return Err(format!(
                        "acknowledged an append to {stream} expecting {:?} while it was at version {current}",
                        sub.expected
                    ));
                }
                let count = sub.events.len() as u64;
                if *version != current + count {
                    return Err(format!(
                        "append to {stream} at version {current} with {count} events returned version {version}"
                    ));
                }
                if commit.max_bytes > 0 && size + record_bytes > commit.max_bytes {
                    return Err(format!(
                        "acknowledged {record_bytes} bytes past the quota {} (log at {size})",
                        commit.max_bytes
                    ));
                }
                self.model.acknowledge(stream, sub.events);
            }
            Err(Error::VersionConflict { actual, .. }) => {
                if matches || *actual != current {
                    return Err(format!(
                        "version conflict on {stream} (actual {actual}) expecting {:?} at version {current}",
                        sub.expected
                    ));
                }
            }
            Err(Error::Quota { limit, needed }) => {
                check_quota_refusal(*limit, *needed, matches, size + record_bytes, commit)?;
            }
            Err(Error::Io(error)) => {
                if !commit.faulted {
                    return Err(format!(
                        "append failed with an I/O error no fault explains: {error}"
                    ));
                }
                self.excuse(Excuse::AppendFailedOnFault, 1);
                if commit.halted || commit.poisoned {
                    self.in_doubt.push(sub);
                }
            }
            // Poisoned by a cut-back that an injected fault failed.
            Err(Error::Poisoned) if commit.poisoned => self.excuse(Excuse::AppendFailedOnFault, 1),
            Err(error) => return Err(format!("append to {stream} failed unexpectedly: {error}")),
        }
        Ok(())
    }

    /// An append whose events' ids the stream holds (`said`): a retry
    /// that landed returns its last version and writes nothing, one that
    /// partly did is a version conflict, whatever either expected
    /// (FORMAT.md, "Extras"). Neither writes, so neither is ever in doubt.
    fn check_by_ids(
        &mut self,
        stream: &str,
        said: IdsSay,
        current: u64,
        outcome: &Result<u64, Error>,
        commit: &CommitFacts,
    ) -> Check {
        match (said, outcome) {
            (IdsSay::Landed(last), Ok(version)) if *version == last => {
                self.ids_decided.0 += 1;
                Ok(())
            }
            (IdsSay::Partly, Err(Error::VersionConflict { actual, .. })) if *actual == current => {
                self.ids_decided.1 += 1;
                Ok(())
            }
            (_, Err(Error::Io(_))) if commit.faulted => {
                self.excuse(Excuse::AppendFailedOnFault, 1);
                Ok(())
            }
            (_, Err(Error::Poisoned)) if commit.poisoned => {
                self.excuse(Excuse::AppendFailedOnFault, 1);
                Ok(())
            }
            (said, other) => Err(format!(
                "an append to {stream} (at version {current}) whose ids say {said:?} answered {other:?}"
            )),
        }
    }

    /// Checks a log just reopened: the in-doubt appends are whole or absent,
    /// the acknowledged ones all there unless damage excuses their loss,
    /// every stream reads back exactly, and the directory holds nothing
    /// else: byte for byte if the disk reports no damage and the log is
    /// small or this is the run's `final_reopen`, by a read-only scan
    /// otherwise.
    ///
    /// Every stream and the whole log are read back through the engine
    /// at one reopen in `full_reads_every`, at the last, and wherever the
    /// disk reports damage or a loss was excused (damage may sit under
    /// any record); at the others, what a power loss could have changed:
    /// the records since the last reopen, with every stream's version
    /// and the log's bounds. Reading everything at every reopen cost a
    /// third of a run's instructions (BENCHMARKS.md, 2026-12-07).
    pub(crate) fn check_reopened(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        limits: Limits,
        final_reopen: bool,
        clock: &Clock,
    ) -> Check {
        self.resolve_in_doubt(log.first_seq(), log.last_seq())?;
        self.retryable = self.in_doubt.clone();
        let recovered = log.last_seq();
        let acked = self.model.last_seq();
        // The turn moves at every reopen, whatever else asks for a full read.
        let turn = self.full_read_due();
        let full_read = turn || final_reopen || !evidence.damage().is_empty() || recovered < acked;
        if recovered >= acked {
            let extra = (recovered - acked) as usize;
            if extra > self.in_doubt.len() {
                return Err(format!(
                    "recovery found {extra} records past the acknowledged seq {acked}, but only {} appends were in doubt",
                    self.in_doubt.len()
                ));
            }
            for survivor in self.in_doubt.drain(..extra).collect::<Vec<_>>() {
                self.model.acknowledge(&survivor.stream, survivor.events);
            }
        } else {
            let excuse = excuse::lost_records(recovered, acked, &self.model, evidence)
                .map_err(|error| format!("{error}; recovery: {:?}", log.recovery()))?;
            self.model.truncate(recovered);
            self.excuse(excuse, acked - recovered);
        }
        self.in_doubt.clear();
        // Open takes back positions past the last seq it kept, whose seqs
        // will be used again (SPEC section 14, FORMAT.md).
        self.take_back_positions(recovered, false);
        self.check_tables(log, evidence)?;
        if full_read {
            self.full_reads += 1;
            self.check_log(log, evidence, clock)?;
            self.check_read_all(log, evidence)?;
        } else {
            self.check_read_back(log, evidence, clock)?;
        }
        self.model.read_back();
        // The bytes themselves, encoded independently (cheap enough for
        // small logs at every reopen; big ones are checked at the end).
        // Damage (a misdirected write, a flipped bit) may sit in bytes that
        // were rightly kept, so the byte check needs an undamaged disk.
        if (self.model.size() <= LAYOUT_CHECK_BYTES_MAX || final_reopen)
            && evidence.damage().is_empty()
        {
            // Exact bytes in exact files: nothing left for a scan to find.
            return self.check_layout(evidence, limits);
        }
        // Otherwise the directory itself: a read-only scan must find it clean.
        let mark = evidence.vfs.fault_log_len();
        let scanned = recovery::check(evidence.vfs, evidence.dir, limits.group_bytes_max);
        match scanned {
            Ok(scan) if scan.tail == Tail::Clean && scan.last_seq == recovered => Ok(()),
            Ok(scan) => Err(format!("after reopen the directory is not clean: {scan:?}")),
            Err(refusal)
                if matches!(refusal.error, Error::Io(_))
                    && excuse::explains_io_error(&evidence.vfs.fault_log_since(mark)) =>
            {
                self.excuse(Excuse::ScanFlippedOnRead, 1);
                Ok(())
            }
            // A table Open read as written only because its read flipped
            // a bit flipped at rest back: the scan reads the damage.
            Err(durlog::Refusal {
                error: Error::Corrupt { file, .. },
                ..
            }) if evidence.flips_read_back(&file).next().is_some() => {
                self.excuse(Excuse::FlippedBackOnOpen, 1);
                Ok(())
            }
            Err(durlog::Refusal {
                error: Error::Corrupt { file, .. },
                ..
            }) if log.recovery().index_files_trusted > 0
                && evidence.damage_under_trusted_index(&file) =>
            {
                self.excuse(Excuse::TrustedIndexOverDamage, 1);
                Ok(())
            }
            Err(refusal) => Err(format!(
                "after reopen the directory fails verification: {}",
                refusal.error
            )),
        }
    }

    /// Whether this reopen's turn reads the whole log back.
    fn full_read_due(&mut self) -> bool {
        let due = self.full_reads_in == 0;
        self.full_reads_in = match due {
            true => self.full_reads_every.max(1) - 1,
            false => self.full_reads_in - 1,
        };
        due
    }

    /// After a commit that left the log healthy: preallocation stays inside
    /// the segment limit and the quota, and the bytes stay as FORMAT.md
    /// says, between reopens too (for small, undamaged logs, where this is
    /// cheap and exact).
    pub(crate) fn check_committed(
        &self,
        poisoned: bool,
        evidence: &Evidence<'_>,
        limits: Limits,
    ) -> Check {
        if self.model.size() <= COMMIT_LAYOUT_CHECK_BYTES_MAX
            && self.in_doubt.is_empty()
            && !poisoned
            && evidence.damage().is_empty()
        {
            self.check_layout(evidence, limits)?;
        }
        Ok(())
    }

    fn check_layout(&self, evidence: &Evidence<'_>, limits: Limits) -> Check {
        let tables = self.table_candidates();
        golden::check_layout(
            evidence.vfs,
            evidence.dir,
            &self.model,
            &tables,
            limits.segment_bytes,
            limits.max_bytes,
            evidence.copies(),
            &evidence.unsure_index_files,
        )
    }

    /// Open refused the log by `rule` at `file` and `offset`.
    pub(crate) fn check_refusal(
        &mut self,
        file: &std::path::Path,
        offset: u64,
        rule: durlog::Rule,
        evidence: &Evidence<'_>,
    ) -> Check {
        let excuse = excuse::refusal(file, offset, rule, &self.model, evidence)?;
        self.excuse(excuse, 1);
        Ok(())
    }

    /// Open failed on an error other than a refusal or a power loss;
    /// `faults` are those injected during it.
    pub(crate) fn check_failed_open(&mut self, error: &Error, faults: &[FaultEvent]) -> Check {
        excuse::failed_open(error, faults)?;
        self.excuse(Excuse::OpenFailedOnFault, 1);
        Ok(())
    }

    pub(crate) fn excuse_read_error(
        &mut self,
        error: &Error,
        evidence: &Evidence<'_>,
        faults: &[FaultEvent],
    ) -> Check {
        let excuse = excuse::failed_read(error, &self.model, evidence, faults)?;
        self.excuse(excuse, 1);
        Ok(())
    }
}

/// A quota refusal is right only for an append the model would accept,
/// under a quota, that would take the log (to `wanted` bytes) past it.
fn check_quota_refusal(
    limit: u64,
    needed: u64,
    matches: bool,
    wanted: u64,
    commit: &CommitFacts,
) -> Check {
    if !matches
        || commit.max_bytes == 0
        || limit != commit.max_bytes
        || needed != wanted
        || needed <= limit
    {
        return Err(format!(
            "quota refusal (limit {limit}, needed {needed}) of an append the model allows (limit {}, the log would reach {wanted})",
            commit.max_bytes
        ));
    }
    Ok(())
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

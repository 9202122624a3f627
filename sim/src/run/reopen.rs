//! Reopening, in the runner (`node.rs` says what a log opens with): the
//! retries when injected faults make Open fail, the rule behind a refusal
//! (from a read-only check of the same directory), and the oracle's
//! judgement of what recovery kept or refused.

use std::path::PathBuf;

use durlog::{Error, Log, recovery};
use durlog_vfs::{FaultKind, SimVfs};

use super::follow;
use super::oracle::Check;
use super::oracle::excuse::{self, Evidence};
use super::{CrashPoint, OPEN_ATTEMPTS_MAX, Recovery, World};
use crate::plan::CrashSpec;

impl World<'_> {
    pub(super) fn reopen(&mut self, recovery: CrashSpec) -> Check {
        let mut arm = match recovery {
            CrashSpec::AfterOps(n) => Some(n),
            _ => None,
        };
        for _ in 0..OPEN_ATTEMPTS_MAX {
            if let Some(n) = arm.take() {
                self.node.vfs.crash_after_ops(n);
            }
            let mark = self.node.vfs.fault_log_len();
            self.node.before_open = misdirected_files(&self.node.vfs, &self.node.dir);
            // An explorer's script notes which operations are recovery's.
            self.node.vfs.set_recovering(true);
            let opened = self.node.open(self.plan);
            self.node.vfs.set_recovering(false);
            self.node.vfs.crash_after_ops(0);
            self.result.counters.reopens += 1;
            match opened {
                Ok(log) => {
                    let faults = self.node.vfs.fault_log_since(mark);
                    excuse::no_read_error_swallowed(|| "Open".to_string(), &faults)?;
                    return self.reopened(log, faults);
                }
                Err(error) if self.node.vfs.is_halted() => {
                    note!(self, "      power loss during recovery: {error}");
                    self.result.count_recovery(Recovery::CrashedDuringRecovery);
                    self.result
                        .count_crash(CrashPoint::Recovery, &self.plan.faults.enabled());
                    self.node.twins.power_lost();
                    self.node.vfs.reboot();
                    if !self.goes_on_after_power_loss(CrashPoint::Recovery) {
                        return Ok(());
                    }
                }
                Err(Error::Corrupt {
                    file,
                    offset,
                    reason,
                }) => {
                    let rule = self.refusing_rule(&file, offset)?;
                    // Noted first: a trace that ends in a violation here
                    // shows the engine's reason.
                    note!(
                        self,
                        "      refused by {}: {}:{offset}: {reason}",
                        rule.name(),
                        file.display()
                    );
                    let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
                    self.oracle.check_refusal(&file, offset, rule, &evidence)?;
                    self.result.count_recovery(Recovery::Decided(rule));
                    self.start_over();
                }
                Err(error) => {
                    let faults = self.node.vfs.fault_log_since(mark);
                    self.oracle.check_failed_open(&error, &faults)?;
                    note!(
                        self,
                        "      open failed on an injected fault, retrying: {error}"
                    );
                    self.result.count_recovery(Recovery::RetriedAfterIoFault);
                }
            }
        }
        self.result.count_recovery(Recovery::GaveUp);
        self.ended = true;
        Ok(())
    }

    /// The rule that refused the log at `file` and `offset`, from a
    /// read-only check of the same directory, which must refuse it alike
    /// (checked again while flipped reads keep it from deciding). An Open
    /// that trusts index files is checked as it reads, and then as a full
    /// scan reads: a flip on its read of an index file has it read that
    /// segment's records, and refuse their damage, where the trusting
    /// check takes the index file.
    fn refusing_rule(&self, file: &std::path::Path, offset: u64) -> Result<durlog::Rule, String> {
        type Check = fn(
            &dyn durlog_vfs::Vfs,
            &std::path::Path,
            u64,
        ) -> Result<durlog::RecoveryReport, durlog::Refusal>;
        let window = self.plan.tuning.group_bytes_max;
        let checks: &[Check] = match self.plan.tuning.open_trusts_index_files {
            true => &[recovery::check_trusting_index_files, recovery::check],
            false => &[recovery::check],
        };
        'attempts: for _ in 0..OPEN_ATTEMPTS_MAX {
            let mut differs = None;
            for check in checks {
                let mark = self.node.vfs.fault_log_len();
                match check(&self.node.vfs, &self.node.dir, window) {
                    Err(durlog::Refusal {
                        error:
                            Error::Corrupt {
                                file: again,
                                offset: at,
                                ..
                            },
                        rule: Some(rule),
                    }) if again == file && at == offset => return Ok(rule),
                    Err(durlog::Refusal {
                        error: Error::Io(_),
                        ..
                    }) if excuse::explains_io_error(&self.node.vfs.fault_log_since(mark)) => {
                        continue 'attempts;
                    }
                    // A bit flipped on read over a bit flipped at rest reads
                    // the byte as it was: this check saw no damage, or other
                    // damage, for the flips on its reads. Read again.
                    _ if self
                        .node
                        .vfs
                        .fault_log_since(mark)
                        .iter()
                        .any(|fault| fault.kind == FaultKind::BitFlipOnRead) =>
                    {
                        continue 'attempts;
                    }
                    other => differs = Some(other),
                }
            }
            return Err(format!(
                "Open refused {}:{offset}, but a read-only check of the same directory says {differs:?}",
                file.display()
            ));
        }
        Err(format!(
            "Open refused {}:{offset}; a read-only check never got past flipped reads",
            file.display()
        ))
    }

    /// The log opened: the oracle judges what recovery kept, then the run
    /// goes on with it.
    fn reopened(&mut self, log: Log, open_faults: Vec<durlog_vfs::FaultEvent>) -> Check {
        note!(self, "      reopened: {:?}", log.recovery());
        self.result.count_recovery(
            log.recovery()
                .decided_by
                .map_or(Recovery::Clean, Recovery::Decided),
        );
        let recovery = log.recovery();
        for (_, why) in &recovery.stale_index_files {
            match why.starts_with("damaged") || why.starts_with("cannot be read") {
                true => self.result.counters.index_files_damaged += 1,
                false => self.result.counters.index_files_stale += 1,
            }
        }
        // Open removed every index file that disagrees with its segment.
        self.node.unsure_index_files.clear();
        let mut evidence = Evidence::new(&self.node.vfs, &self.node.dir);
        evidence.before_open = std::mem::take(&mut self.node.before_open);
        evidence.open_faults = open_faults;
        let limits = self.limits();
        self.oracle
            .check_reopened(&log, &evidence, limits, self.final_reopen, &self.node.clock)?;
        let floors = self.oracle.shown_floors();
        follow::lock(&self.node.followers).resume(&log, &floors);
        let end = log.last_seq() + 1;
        self.node
            .twins
            .resume(&self.node.vfs, &self.node.dir, end)?;
        self.node.log = Some(log);
        if self.plan.retry_after_reopen && !self.final_reopen {
            return self.retry(None);
        }
        Ok(())
    }

    /// Goes on with a fresh, empty log in a new directory.
    fn start_over(&mut self) {
        self.node.start_over(self.plan);
        self.oracle.start_over();
        note!(self, "      starting over in {}", self.node.dir.display());
    }
}

/// The contents of the files in `dir` that a misdirected write hit (none,
/// in all but a few runs: the copy is taken only then).
fn misdirected_files(vfs: &SimVfs, dir: &std::path::Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<PathBuf> = vfs
        .damage()
        .into_iter()
        .filter(|damage| damage.kind == FaultKind::MisdirectedWrite && damage.path.starts_with(dir))
        .map(|damage| damage.path)
        .collect();
    files.dedup();
    files
        .into_iter()
        .filter_map(|path| vfs.file_contents(&path).map(|bytes| (path, bytes)))
        .collect()
}

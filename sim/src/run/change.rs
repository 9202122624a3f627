//! Purges, truncations and the retention in a run, the runner's side: the
//! calls, with power losses during their disk operations, each outcome
//! handed to the oracle (`oracle/change.rs` judges them, SPEC section 11),
//! and the retention's window opened before a commit and closed after it.

use std::path::Path;

use durlog_vfs::{SimVfs, Vfs};

use crate::plan::CrashSpec;

use super::oracle::{Check, RetentionWindow, check_segment_names, excuse};
use super::{CrashPoint, World};

/// The first seqs of the segments in `dir`, from their names.
pub(crate) fn segment_starts(vfs: &SimVfs, dir: &Path) -> Vec<u64> {
    let mut starts: Vec<u64> = vfs
        .list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|entry| {
            let digits = entry.name.strip_suffix(".log")?;
            (digits.len() == 20).then(|| digits.parse().ok()).flatten()
        })
        .collect();
    starts.sort_unstable();
    starts
}

impl World<'_> {
    pub(super) fn purge(&mut self, keep_percent: u8, crash: CrashSpec) -> Check {
        let model = self.oracle.model();
        let (first, last) = (model.first_seq(), model.last_seq());
        let kept = last + 1 - first;
        let before = first + kept - kept * u64::from(keep_percent) / 100;
        let starts = segment_starts(&self.node.vfs, &self.node.dir);
        // Every segment but the last whose records all precede `before`.
        let planned = starts
            .iter()
            .copied()
            .rfind(|&start| start <= before)
            .unwrap_or(first)
            .max(first);
        note!(
            self,
            "      purge_before({before}): first seq {first} -> {planned}"
        );
        let mark = self.node.vfs.fault_log_len();
        if let CrashSpec::AfterOps(n) = crash {
            self.node.vfs.crash_after_ops(n);
        }
        let result = self.log().purge_before(before);
        self.node.vfs.crash_after_ops(0);
        note!(self, "      -> {result:?}");
        let faulted = self.node.vfs.is_halted()
            || excuse::explains_io_error(&self.node.vfs.fault_log_since(mark));
        let poisoned = self.log().is_poisoned();
        let changed = self.oracle.check_purge(
            planned,
            &result,
            faulted,
            poisoned || self.node.vfs.is_halted(),
        )?;
        self.result.counters.purges += u64::from(changed);
        // Poisoned after its decision, it returned Ok and left the rest
        // to the next Open (`Change::DoneThenPoisoned`).
        if result.is_ok() && !poisoned && !self.node.vfs.is_halted() {
            check_segment_names(&self.node.vfs, &self.node.dir, self.oracle.model())
                .map_err(|error| format!("after purge_before({before}): {error}"))?;
        }
        self.after_change(CrashPoint::Purge)
    }

    pub(super) fn truncate(&mut self, back: u32, crash: CrashSpec) -> Check {
        let model = self.oracle.model();
        let seq = model.last_seq().saturating_sub(u64::from(back));
        note!(self, "      truncate_after({seq})");
        let mark = self.node.vfs.fault_log_len();
        if let CrashSpec::AfterOps(n) = crash {
            self.node.vfs.crash_after_ops(n);
        }
        let result = self.log().truncate_after(seq);
        self.node.vfs.crash_after_ops(0);
        note!(self, "      -> {result:?}");
        let faulted = self.node.vfs.is_halted()
            || excuse::explains_io_error(&self.node.vfs.fault_log_since(mark));
        let poisoned = self.log().is_poisoned();
        let doubt = poisoned || self.node.vfs.is_halted();
        match self.oracle.check_truncate(seq, &result, faulted, doubt)? {
            Some(true) => {
                self.result.counters.truncations += 1;
                super::follow::lock(&self.node.followers).truncated(seq);
                self.node.twins.truncated(seq);
                if !doubt {
                    check_segment_names(&self.node.vfs, &self.node.dir, self.oracle.model())
                        .map_err(|error| format!("after truncate_after({seq}): {error}"))?;
                }
            }
            Some(false) => self.result.counters.truncations_refused += 1,
            None => {}
        }
        self.after_change(CrashPoint::Truncate)
    }

    /// A change that lost power reopens the log; one that poisoned it
    /// restarts the process.
    fn after_change(&mut self, point: CrashPoint) -> Check {
        if self.node.vfs.is_halted() {
            return self.power_loss(point, CrashSpec::None, false);
        }
        if self.log().is_poisoned() {
            note!(self, "      the log is poisoned: restart the process");
            return self.restart(CrashSpec::None);
        }
        self.oracle.check_first_seq(self.log().first_seq())
    }

    /// Before a commit: what the retention may purge during it.
    pub(super) fn open_retention_window(&mut self, more_bytes: u64) {
        let Some(policy) = self.plan.retention else {
            return;
        };
        let extra_bytes = more_bytes
            + self
                .pending
                .values()
                .map(|submitted| crate::golden::record_bytes(&submitted.stream, &submitted.events))
                .sum::<u64>();
        self.oracle.retention = Some(RetentionWindow {
            policy,
            starts: segment_starts(&self.node.vfs, &self.node.dir),
            now_after: 0,
            extra_bytes,
        });
    }

    /// After a commit that kept power: a purge by the retention, if the
    /// log's first seq moved, must be one the policy asked for.
    pub(super) fn close_retention_window(&mut self) -> Check {
        let now = self.node.clock.now();
        if let Some(window) = &mut self.oracle.retention {
            window.now_after = now;
        }
        if self.node.vfs.is_halted() {
            return Ok(()); // the reopen judges it
        }
        let first = self.log().first_seq();
        if self.log().is_poisoned() && first == self.oracle.model().first_seq() {
            // A purge may be on disk that the log did not take in (its
            // state file's rename not known durable): the reopen judges.
            return Ok(());
        }
        let purged = self.oracle.check_retention(first)?;
        self.result.counters.retention_purges += u64::from(purged);
        if purged {
            check_segment_names(&self.node.vfs, &self.node.dir, self.oracle.model())
                .map_err(|error| format!("after a purge by the retention: {error}"))?;
        }
        Ok(())
    }
}

//! Purges, truncations and the retention, as the oracle judges them (SPEC
//! section 11). The model changes only when a call returns `Ok`; one that
//! failed on a fault that may have left the change on disk is in doubt
//! until the next reopen, which must show the log either as it was before
//! or as the call would have left it, never between. A purge by the
//! retention, which no call returns, is checked against the policy and the
//! segments as they were before the commit that made it.

use std::path::{Path, PathBuf};

use durlog::{Error, Retention};
use durlog_vfs::SimVfs;

use crate::model::Model;
use crate::report::Excuse;

use super::{Check, Oracle};

/// A purge or a truncation whose call failed on a fault that may have
/// left it on disk: the next reopen decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum InDoubt {
    /// The first seq the purge would have kept.
    Purge(u64),
    /// The last seq the truncation would have kept.
    Truncate(u64),
}

/// What the retention may purge during the next commit (or, if it
/// crashes, what the reopen after it may find purged).
#[derive(Clone, Debug, Hash)]
pub(crate) struct RetentionWindow {
    pub(crate) policy: Retention,
    /// The first seqs of the segments before the commit.
    pub(crate) starts: Vec<u64>,
    /// The clock before the commit: its `now` is at least this.
    pub(crate) now_after: i64,
    /// Bytes of the appends the commit may have added (an upper bound).
    pub(crate) extra_bytes: u64,
}

/// After a purge or a truncation that returned `Ok` (or a purge by the
/// retention): the segment files are those the model names, read from the
/// disk's own inspection (no disk operation, so the trace stays): none
/// whose records all precede the first seq kept, none past the last seq
/// but one that holds only zeros, named for the next seq, last. A purge
/// or a truncation that leaves its files behind is named at once, rather
/// than by its effect at the next reopen.
pub(crate) fn check_segment_names(vfs: &SimVfs, dir: &Path, model: &Model) -> Check {
    let (first, last) = (model.first_seq(), model.last_seq());
    let mut segments: Vec<(u64, PathBuf)> = vfs
        .files()
        .into_iter()
        .filter(|path| path.parent() == Some(dir))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let digits = name.strip_suffix(".log")?;
            let start = (digits.len() == 20)
                .then(|| digits.parse().ok())
                .flatten()?;
            Some((start, path))
        })
        .collect();
    segments.sort_unstable();
    if let Some((start, path)) = segments.first()
        && *start != first
    {
        return Err(format!(
            "{} is the first segment, the model keeps seqs from {first}",
            path.display()
        ));
    }
    for (position, (start, path)) in segments.iter().enumerate() {
        let empty_last = || {
            position + 1 == segments.len()
                && *start == last + 1
                && vfs
                    .with_file_contents(path, |bytes| bytes.iter().all(|&byte| byte == 0))
                    .unwrap_or(false)
        };
        if *start > last && !empty_last() {
            return Err(format!(
                "{} is left past the last seq {last} of the model",
                path.display()
            ));
        }
    }
    Ok(())
}

impl Oracle {
    /// Checks `purge_before`'s outcome; `planned` is the first seq it
    /// must keep. True if it removed something.
    pub(crate) fn check_purge(
        &mut self,
        planned: u64,
        result: &Result<u64, Error>,
        faulted: bool,
        in_doubt: bool,
    ) -> Result<bool, String> {
        let first = self.model.first_seq();
        match result {
            Ok(kept) if *kept == planned => {
                self.model.purge(planned);
                Ok(planned > first)
            }
            Ok(kept) => Err(format!(
                "purge returned first seq {kept}; the segments on disk make it {planned} (it was {first})"
            )),
            Err(Error::Io(_)) if faulted => {
                self.excuse(Excuse::ChangeFailedOnFault, 1);
                if in_doubt {
                    self.change_in_doubt = Some(InDoubt::Purge(planned));
                }
                Ok(false)
            }
            Err(error) => Err(format!("purge failed with no fault to explain it: {error}")),
        }
    }

    /// Checks `truncate_after(seq)`'s outcome: `Some(true)` if it removed
    /// records, `Some(false)` if it was rightly refused, `None` if it
    /// failed on a fault or had nothing to remove.
    pub(crate) fn check_truncate(
        &mut self,
        seq: u64,
        result: &Result<(), Error>,
        faulted: bool,
        in_doubt: bool,
    ) -> Result<Option<bool>, String> {
        let (first, last) = (self.model.first_seq(), self.model.last_seq());
        match result {
            Ok(()) if seq + 1 >= first => {
                self.model.truncate(seq);
                self.take_back_positions(seq, true);
                Ok((seq < last).then_some(true))
            }
            Err(Error::Purged { first_seq }) if seq + 1 < first && *first_seq == first => {
                Ok(Some(false))
            }
            Err(Error::Io(_)) if faulted => {
                self.excuse(Excuse::ChangeFailedOnFault, 1);
                if in_doubt && seq < last {
                    self.change_in_doubt = Some(InDoubt::Truncate(seq));
                }
                Ok(None)
            }
            other => Err(format!(
                "truncate_after({seq}) with first seq {first} and last {last} returned {other:?}"
            )),
        }
    }

    /// The log's first seq while it runs is the model's.
    pub(crate) fn check_first_seq(&self, first: u64) -> Check {
        if first != self.model.first_seq() {
            return Err(format!(
                "the log's first seq is {first}, the model's {}",
                self.model.first_seq()
            ));
        }
        Ok(())
    }

    /// After a commit, or at a reopen after one that lost power: the
    /// log's first seq moved past the model's only by a purge the
    /// retention asked for. True if it purged.
    pub(crate) fn check_retention(&mut self, first: u64) -> Result<bool, String> {
        let Some(window) = self.retention.take() else {
            return self.check_first_seq(first).map(|()| false);
        };
        let model_first = self.model.first_seq();
        if first == model_first {
            return Ok(false);
        }
        if first < model_first || !window.starts.contains(&first) {
            return Err(format!(
                "the first seq went from {model_first} to {first}, not the start of a segment that was there ({:?})",
                window.starts
            ));
        }
        // Each segment purged: over the size limit, or all its records
        // older than the age limit, when the retention looked.
        let purged: Vec<u64> = window
            .starts
            .iter()
            .copied()
            .filter(|&start| start >= model_first && start < first)
            .collect();
        for (i, &start) in purged.iter().enumerate() {
            let end = purged.get(i + 1).copied().unwrap_or(first);
            let remaining = self.model.bytes_from(start) + window.extra_bytes;
            let over_size = window.policy.max_bytes.is_some_and(|max| remaining > max);
            let too_old = window.policy.max_age.is_some_and(|age| {
                let oldest_kept = window.now_after - age.as_nanos() as i64;
                self.model
                    .newest_at(start..end)
                    .is_some_and(|at| at < oldest_kept)
            });
            if !over_size && !too_old {
                return Err(format!(
                    "the retention {:?} purged the segment of seqs {start}..{end}: {remaining} bytes from it on (at most), records at {:?}, clock at most {}",
                    window.policy,
                    self.model.newest_at(start..end),
                    window.now_after
                ));
            }
        }
        self.model.purge(first);
        Ok(true)
    }

    /// At a reopen: a purge or truncation in doubt shows whole or not at
    /// all. Returns the excuse text for a departure, if any.
    pub(crate) fn resolve_in_doubt(&mut self, first: u64, last: u64) -> Check {
        match self.change_in_doubt.take() {
            Some(InDoubt::Purge(planned)) if first == planned => self.model.purge(planned),
            Some(InDoubt::Truncate(seq)) if last == seq => {
                self.model.truncate(seq);
                self.take_back_positions(seq, false);
            }
            Some(InDoubt::Purge(planned)) if first != self.model.first_seq() => {
                return Err(format!(
                    "after a purge to {planned} failed, the log starts at {first}: neither before ({}) nor after it",
                    self.model.first_seq()
                ));
            }
            _ => {}
        }
        if first != self.model.first_seq() && self.retention.is_some() {
            self.check_retention(first)?;
        }
        self.retention = None;
        self.check_first_seq(first)
    }
}

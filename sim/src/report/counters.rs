//! [`Counters`]: what a run did, each count declared once below with how
//! a campaign sums it and the summary line it is printed on, so that a
//! new count is one line here, never three places kept in step.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a campaign combines a count over its runs.
fn sum(a: u64, b: u64) -> u64 {
    a + b
}

fn max(a: u64, b: u64) -> u64 {
    a.max(b)
}

/// Declares the counters: each summary line's text, whose `{}` are filled
/// in order by the counts declared under it, each with how runs combine.
macro_rules! counters {
    ($(
        line $text:literal {
            $( $(#[doc = $doc:literal])* $name:ident: $combine:ident, )+
        }
    )+) => {
        /// Counts of what a run did. Serialized field by field into shard
        /// reports (`shard.rs`); a report missing a field is refused, not
        /// read as zero.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Counters {
            $($( $(#[doc = $doc])* pub $name: u64, )+)+
        }

        impl Counters {
            /// Adds `other`'s counts: summed, or the larger kept for a
            /// maximum.
            pub fn add(&mut self, other: &Counters) {
                $($( self.$name = $combine(self.$name, other.$name); )+)+
            }

            /// The summary's lines, each text with its counts.
            fn lines(&self) -> Vec<(&'static str, Vec<u64>)> {
                vec![$( ($text, vec![$( self.$name ),+]) ),+]
            }
        }
    };
}

counters! {
    line "cycles      {} (workload steps)" {
        /// Actions executed (one workload step each).
        cycles: sum,
    }
    line "appends     {} submitted, {} acknowledged, {} version conflicts, {} over quota, {} failed on I/O" {
        appends_submitted: sum,
        appends_acked: sum,
        conflicts: sum,
        quota_refusals: sum,
        io_failures: sum,
    }
    line "reads       {} ({} of the whole log through filters; those refused on injected faults are counted under excused, none returned wrong data)" {
        reads: sum,
        /// Of them, reads of the whole log through a filter (`ReadFiltered`).
        filtered_reads: sum,
    }
    line "crashes     {} power losses, {} reopens ({} with every stream read back, the others the records since the reopen before)" {
        crashes: sum,
        reopens: sum,
        /// Reopens after which the oracle read every stream and the whole
        /// log back through the engine (the others read back the records
        /// since the reopen before: `RunOptions::full_checks`).
        full_read_backs: sum,
    }
    line "log size    up to {} bytes per seed" {
        /// Largest size the log reached, in bytes.
        log_bytes_max: max,
    }
    line "segments    {} next segments prepared ahead of their roll" {
        /// Next segments prepared ahead of their roll.
        segments_prepared: sum,
    }
    line "index files {} written, each byte for byte its segment's; at Open {} found damaged and {} not their segment's, each removed" {
        /// Index files `Log::write_index_files` wrote.
        index_files_written: sum,
        /// Index files Open found damaged (their CRC, a torn write, a read
        /// that failed) and removed.
        index_files_damaged: sum,
        /// Index files Open found whole but not their segment's (of a
        /// segment gone, cut or last, or naming other bytes) and removed.
        index_files_stale: sum,
    }
    line "index reads {} of a sealed segment's records through its own bytes, its index file not serving (a read of it flipped, or a write missed its place there)" {
        /// Sealed segments' indexes that reads derived from the segment,
        /// its index file not serving, counted as each process goes.
        index_files_bypassed: sum,
    }
    line "subscribers {} records delivered, each the next acknowledged one" {
        /// Records handed to subscribers, each checked.
        deliveries: sum,
    }
    line "followers   {} records handed over from the files, each checked; {} started again; {} positions recorded in their own files" {
        /// Records handed over by followers of the files (as in another
        /// process), each checked.
        file_deliveries: sum,
        /// Times a follower of the files started again after a purge, a
        /// truncation or a fault.
        file_follower_restarts: sum,
        /// Polls of a follower of the files after which it recorded its
        /// position in its `PositionFile` (or tried to).
        file_positions: sum,
    }
    line "openers     {} second openers beside the writer refused, no byte changed" {
        /// Second openers beside the writer, each refused with the files
        /// left as they were.
        second_opens_refused: sum,
    }
    line "retention   {} purges by purge_before and {} by the retention policy, {} truncations ({} refused below the first seq kept)" {
        /// Purges that returned `Ok` having removed segments, by
        /// `purge_before` and by the retention.
        purges: sum,
        retention_purges: sum,
        /// Truncations that returned `Ok` having removed records, and
        /// those refused (below the first seq kept).
        truncations: sum,
        truncations_refused: sum,
    }
    line "tables      {} metadata changes, {} deletions, {} consumer positions recorded, {} consumers resumed" {
        /// Changes to the tables that returned `Ok` having changed them.
        metadata_changes: sum,
        deletions: sum,
        positions_recorded: sum,
        /// Consumers resumed from their durable position, each checked.
        resumptions: sum,
    }
    line "retries     {} landed before (nothing written), {} written now, {} refused" {
        /// Idempotent retries: of an append that had landed (nothing
        /// written), of one that had not (written now), refused.
        retries_landed: sum,
        retries_written: sum,
        retries_refused: sum,
    }
    line "event ids   {} appends whose ids the stream held answered as landed (nothing written), {} refused as held in part" {
        /// Appends whose events all carried ids the stream held: answered
        /// as a retry that landed (nothing written), and refused as a
        /// conflict (some of them held, or in another order).
        ids_landed: sum,
        ids_refused: sum,
    }
}

impl Counters {
    /// The counters' part of the summary: each line's text with its
    /// counts in place of its `{}`.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (text, counts) in self.lines() {
            let mut parts = text.split("{}");
            debug_assert_eq!(text.matches("{}").count(), counts.len(), "{text}");
            f.write_str(parts.next().unwrap_or_default())?;
            for (count, part) in counts.iter().zip(parts) {
                write!(f, "{count}{part}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

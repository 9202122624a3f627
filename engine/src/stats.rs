//! Counters and histograms a `Log` keeps about itself.

use std::fmt;

/// A histogram with power-of-two buckets: cheap enough to update on every
/// sync, precise to a factor of two, which is what latency questions need.
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    /// `buckets[i]` counts values `v` with `64 - v.leading_zeros() == i`,
    /// that is `v == 0` for `i == 0`, else `2^(i-1) <= v < 2^i`.
    buckets: [u64; 65],
    count: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: [0; 65],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Histogram {
    /// Adds one value.
    pub fn record(&mut self, value: u64) {
        self.buckets[(64 - value.leading_zeros()) as usize] += 1;
        self.count += 1;
        self.sum += u128::from(value);
        self.max = self.max.max(value);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (0 if none).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The mean of the values (0 if none).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// An upper bound, within a factor of two, of the `quantile` (0.0 to
    /// 1.0) of the values; never above the maximum.
    pub fn quantile(&self, quantile: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let upper = if bucket == 0 {
                    0
                } else {
                    (1u128 << bucket) - 1
                };
                return (upper as u64).min(self.max);
            }
        }
        self.max
    }
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "count={} mean={:.1} p50<={} p99<={} max={}",
            self.count,
            self.mean(),
            self.quantile(0.5),
            self.quantile(0.99),
            self.max
        )
    }
}

/// What a `Log` has done since it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Appends acknowledged (one record each).
    pub appends: u64,
    /// Events in those appends.
    pub events: u64,
    /// Record bytes written and synced for them.
    pub bytes: u64,
    /// Group commits: each one write and one sync.
    pub groups: u64,
    /// File data syncs performed (group commits, cut-backs, recovery).
    pub syncs: u64,
    /// Appends refused for a version conflict.
    pub conflicts: u64,
    /// Appends refused by the quota.
    pub quota_rejections: u64,
    /// Appends that failed on a write, sync or roll error.
    pub failed_appends: u64,
    /// Segments created.
    pub segments_created: u64,
    /// Of those, segments that were prepared ahead and renamed at the roll.
    pub segments_prepared: u64,
    /// Purges carried out (by `purge_before` or the retention).
    pub purges: u64,
    /// Segments they removed.
    pub segments_purged: u64,
    /// Truncations carried out.
    pub truncations: u64,
    /// Index files written (`Log::write_index_files`).
    pub index_files_written: u64,
    /// Sealed segments' indexes that reads (or a truncation) derived from
    /// the segment's own bytes, their index file not serving (gone,
    /// damaged, another segment's).
    pub index_files_bypassed: u64,
    /// Nanoseconds per group-commit `fdatasync`.
    pub sync_latency_ns: Histogram,
    /// Appends acknowledged per group commit.
    pub appends_per_group: Histogram,
}

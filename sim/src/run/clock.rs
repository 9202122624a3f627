//! The run's clock, in one place: the log reads the time through
//! `Options::now`, and each reading is the next tick. Its times are a pure
//! function of how many readings came before (never the wall clock, so a
//! seed replays), in nanoseconds that are never whole seconds, so a log
//! that stored seconds would be caught.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The time of the clock's zeroth tick.
const BASE_NS: i64 = 1_700_000_000_123_456_789;
/// Nanoseconds between two ticks.
const STEP_NS: i64 = 1_000_003;

/// The time at the clock's `ticks`-th reading.
pub(crate) fn time_at(ticks: i64) -> i64 {
    BASE_NS + STEP_NS * ticks
}

/// The time `ticks` readings take.
pub(crate) fn span(ticks: u64) -> Duration {
    Duration::from_nanos(ticks * STEP_NS as u64)
}

/// A run's clock: how many times the log has read it, shared by the log's
/// `now` and the runner (a handle, cheap to clone).
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock(Arc<AtomicI64>);

impl Clock {
    /// The readings so far.
    pub(crate) fn ticks(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The time of the last reading (of the start, before any).
    pub(crate) fn now(&self) -> i64 {
        time_at(self.ticks())
    }

    /// A reading: the next tick's time.
    pub(crate) fn read(&self) -> i64 {
        time_at(self.0.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

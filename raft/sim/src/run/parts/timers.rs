//! What the harness does later, in the order it is due: at one instant,
//! in the order it was scheduled.

use std::collections::BTreeMap;

/// Something the harness does later: a restart, a heal.
#[derive(Clone, Debug)]
pub(in crate::run) enum Later {
    Restart(u64),
    Heal(Vec<(u64, u64)>),
}

#[derive(Default)]
pub(in crate::run) struct Timers {
    /// By (instant, order scheduled).
    due: BTreeMap<(u64, u64), Later>,
    scheduled: u64,
}

impl Timers {
    pub(in crate::run) fn schedule(&mut self, at_ns: u64, later: Later) {
        self.scheduled += 1;
        self.due.insert((at_ns, self.scheduled), later);
    }

    /// The first thing due at or before `now_ns`, taken.
    pub(in crate::run) fn take_due(&mut self, now_ns: u64) -> Option<Later> {
        let (&(at, seq), _) = self.due.first_key_value()?;
        if at > now_ns {
            return None;
        }
        self.due.remove(&(at, seq))
    }

    /// When the next thing is due (`u64::MAX`: nothing is).
    pub(in crate::run) fn next_ns(&self) -> u64 {
        self.due.keys().next().map_or(u64::MAX, |&(at, _)| at)
    }

    /// Forgets everything scheduled: the liveness phase restarts every
    /// node itself and heals the whole network.
    pub(in crate::run) fn clear(&mut self) {
        self.due.clear();
    }
}

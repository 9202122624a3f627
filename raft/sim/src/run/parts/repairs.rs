//! The repairs the harness watches (`run/repair.rs` says what it checks):
//! each node under repair until it votes again, and what each damaged
//! node's log held just before the harness damaged it, until its next
//! start.

use std::collections::BTreeMap;

use durlog_raft::repair::Reach;
use openraft::LogId;

const NS_PER_MS: u64 = 1_000_000;

/// What a node's log held just before the harness damaged it: its last
/// entry (`None`: no entry), or why its files could not tell (damage the
/// disk's own faults left there earlier).
pub(in crate::run) type Held = Result<Option<LogId<u64>>, String>;

/// A node under repair, since its start.
pub(in crate::run) struct Watch {
    pub(in crate::run) since_ns: u64,
    /// Entries the repair lost, from `lost_from` on.
    pub(in crate::run) lost: u64,
    pub(in crate::run) lost_from: u64,
    /// What the node waits for before it votes again.
    pub(in crate::run) reach: Reach,
}

impl Watch {
    /// Simulated time from the start to voting again.
    pub(in crate::run) fn took_ms(&self, now_ns: u64) -> u64 {
        (now_ns - self.since_ns) / NS_PER_MS
    }

    /// Entries the node fetched again from the others to reach its reach.
    pub(in crate::run) fn refetched(&self) -> u64 {
        (self.reach.index + 1).saturating_sub(self.lost_from)
    }

    /// The bucket of the repair's cost by the entries it lost.
    pub(in crate::run) fn bucket(&self) -> &'static str {
        match self.lost {
            0 => "0",
            1..=9 => "1-9",
            10..=99 => "10-99",
            _ => "100+",
        }
    }
}

#[derive(Default)]
pub(in crate::run) struct Repairs {
    watches: BTreeMap<u64, Watch>,
    held: BTreeMap<u64, Held>,
}

impl Repairs {
    /// Records what node `id`'s log held as the harness damages it.
    pub(in crate::run) fn hold(&mut self, id: u64, held: Held) {
        self.held.insert(id, held);
    }

    /// What node `id`'s log held before its damage, if this is the first
    /// start since: a failed one may have lost unsynced records or a part
    /// of the repair, so only the first is held to it.
    pub(in crate::run) fn take_held(&mut self, id: u64) -> Option<Held> {
        self.held.remove(&id)
    }

    /// Node `id` started again: true if a repair was under way (a crash
    /// interrupted it; the new start's repair is watched anew).
    pub(in crate::run) fn restarted(&mut self, id: u64) -> bool {
        self.watches.remove(&id).is_some()
    }

    pub(in crate::run) fn watch(&mut self, id: u64, watch: Watch) {
        self.watches.insert(id, watch);
    }

    /// The nodes under repair, in order.
    pub(in crate::run) fn watched(&self) -> impl Iterator<Item = u64> + '_ {
        self.watches.keys().copied()
    }

    /// Ends node `id`'s watch: its repair finished.
    pub(in crate::run) fn finished(&mut self, id: u64) -> Watch {
        self.watches.remove(&id).expect("watched")
    }

    /// Repairs still under way.
    pub(in crate::run) fn unfinished(&self) -> u64 {
        self.watches.len() as u64
    }
}

//! The cluster's state beyond its nodes, network and executor, in parts
//! that own it: each part's fields are private to its file, so that every
//! change to them is made there, by a method the verbs of `run/` call
//! (the split of turmoil's `Sim`, its verbs, and `World`, its state).
//!
//! - `timers.rs`: what the harness does later (restarts, heals).
//! - `faults.rs`: what the faults did: power losses armed, store errors
//!   seen, disks damaged, the excuse a node's amnesia gives the run.
//! - `membership.rs`: the voters and learners the harness asked for, and
//!   the cluster's `initialize`.
//! - `repairs.rs`: nodes under repair, and what a damaged log held.
//! - `clients.rs`: the clients' operations and what they saw.

mod clients;
mod faults;
mod membership;
mod repairs;
mod timers;

pub(super) use clients::Clients;
pub(super) use faults::Faults;
pub(super) use membership::Membership;
pub(super) use repairs::{Held, Repairs, Watch};
pub(super) use timers::{Later, Timers};

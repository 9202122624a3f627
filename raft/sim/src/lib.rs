//! durlog-raft-sim: a deterministic simulation of a durlog-raft cluster.
//!
//! One thread, simulated time, one seed: 3 or 5 openraft nodes, each with
//! durlog-raft's `LogStore` on its own `SimVfs` and the events state
//! machine, on [`exec`]'s executor through [`runtime::SimRuntime`], talking
//! over [`net`]'s simulated network. README.md records why this runtime
//! and not tokio's, turmoil or madsim, with the measurements.

pub mod check;
pub mod config;
pub mod excuse;
pub mod exec;
pub mod history;
pub mod net;
pub mod node;
pub mod plan;
pub mod probe;
pub mod run;
pub mod runtime;
pub mod scenario;
pub mod tally;
pub mod trace;

pub use plan::Plan;
pub use run::{Outcome, run};

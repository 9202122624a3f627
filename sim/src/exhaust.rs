//! `durlog-sim exhaust`: every crash state of every small workload, each
//! checked by the same runner and oracle as `run` (SPEC section 13), on
//! the testbed's explorer ([`durlog_testbed::explore`]).
//!
//! Seeds sample crash states; for workloads of up to K operations from a
//! fixed alphabet (`workload.rs`) this enumerates them. For each workload,
//! each counted disk operation is a crash point and each write and sync a
//! failure point, and at each, every outcome the fault model allows (the
//! simulated disk takes its decisions from a `CrashScript`, which the
//! explorer walks depth first): each subset of the unsynced pages up to a
//! bound, each directory entry made or removed since the last directory
//! sync kept or lost, each unsynced size change kept or undone, the
//! interrupted write torn at each sector, a failed sync that drops its
//! dirty pages or not. After each distinct state the runner reopens the
//! log and the oracle judges it, exactly as in `run`; and each recovery is
//! crashed too, at each of its operations, with every outcome of that
//! crash. SPEC section 13 asks for that at K's last level; doing it at
//! every level costs 7% more at K = 3 and makes the states of K a superset
//! of those of K - 1, so the K at which a bug is first found is well
//! defined.

mod workload;

use durlog_testbed::Violation;
use durlog_testbed::explore::{Exhaustible, LossFacts, PowerLossHook};
use durlog_vfs::SimVfs;

pub use durlog_testbed::explore::FaultPoint;
pub use durlog_testbed::explore::{PAGES_MAX, StateId};
pub use workload::{Op, QUOTA_BYTES, SEGMENT_BYTES, Setting, Workload};

use crate::run::{CrashPoint, run_plan_on};

/// The explorer's options: written into its replay commands as flags.
#[derive(
    clap::Args, Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize,
)]
pub struct WorkloadOptions {
    /// Plant a failure in the oracle's model at the end of every workload
    /// that acknowledged something, to show failures are reported and
    /// replayed.
    #[arg(long)]
    pub canary: bool,
}

/// durlog's workloads for the explorer.
#[derive(Clone, Copy, Debug, Default)]
pub struct DurlogWorkloads {
    pub options: WorkloadOptions,
}

impl Exhaustible for DurlogWorkloads {
    type Workload = Workload;
    type Options = WorkloadOptions;

    fn command(&self) -> &str {
        crate::COMMAND
    }

    fn options(&self) -> &WorkloadOptions {
        &self.options
    }

    fn workloads(&self, ops: u32) -> Vec<Workload> {
        Workload::all(ops)
    }

    fn run_workload(
        &self,
        workload: &Workload,
        disk: SimVfs,
        trace: bool,
        on_power_loss: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        let plan = workload.plan(self.options.canary);
        let hook = on_power_loss.map(|mut hook| {
            Box::new(
                move |vfs: &SimVfs, point: CrashPoint, runner: &dyn Fn() -> Option<u64>| {
                    let in_recovery = point == CrashPoint::Recovery;
                    hook(
                        vfs,
                        LossFacts {
                            in_recovery,
                            runner,
                        },
                    )
                },
            ) as crate::run::PowerLossHook<'_>
        });
        let result = run_plan_on(&plan, disk, None, trace, hook);
        (result.violation, result.trace)
    }

    fn describe_step(&self, workload: &Workload, step: usize) -> String {
        workload
            .op_at_step(step)
            .map_or("the final checks".to_string(), |(position, op)| {
                format!("operation {} ({op:?})", position + 1)
            })
    }

    fn describe(&self, ops: u32) -> String {
        format!(
            "exhaust --ops {ops}: every workload of 1 to {ops} of the {} operations {} in {} settings ({}), segments of {SEGMENT_BYTES} bytes, quota {QUOTA_BYTES}",
            Op::ALL.len(),
            Op::ALL.iter().map(|op| op.letter()).collect::<String>(),
            Setting::ALL.len(),
            Setting::ALL
                .iter()
                .map(|setting| setting.letter())
                .collect::<String>(),
        )
    }
}

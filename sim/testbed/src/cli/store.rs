//! A store's whole binary: the testbed's commands on a [`crate::StoreScenario`].

use std::process::ExitCode;

use super::{ExhaustArgs, MergeArgs, ReproArgs, RunArgs, exhaust, merge, repro, run};
use crate::Scenario;

/// The commands of a store's own binary ([`store_main`]).
#[derive(clap::Subcommand, Clone, Debug)]
pub enum StoreCommand {
    /// Run a range of seeds and print a summary (deterministic on stdout;
    /// progress and timing on stderr). Exits 1 if any seed fails.
    Run {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        options: crate::StoreOptions,
    },
    /// Merge the reports of the shards of one range (`run --shard I/N
    /// --report FILE`) and print what one run of the whole range prints.
    Merge {
        #[command(flatten)]
        merge: MergeArgs,
    },
    /// Replay one seed (or the steps of it a shrink kept) with its trace.
    Repro {
        #[command(flatten)]
        repro: ReproArgs,
        #[command(flatten)]
        options: crate::StoreOptions,
    },
    /// Every crash state of every workload of up to K operations of the
    /// alphabet; or one state again with --replay.
    Exhaust {
        #[command(flatten)]
        exhaust: ExhaustArgs,
    },
}

/// A store's whole binary: `command` run on `scenario` (whose command
/// string, the binary and any options it parsed before the subcommand,
/// starts every repro line). Returns the exit code.
pub fn store_main<S: crate::Store + 'static>(
    scenario: &crate::StoreScenario<S>,
    command: StoreCommand,
) -> ExitCode {
    let version = env!("CARGO_PKG_VERSION");
    match command {
        StoreCommand::Run { run: args, options } => {
            run(&scenario.with_options(options), &args, version)
        }
        StoreCommand::Merge { merge: args } => merge(scenario, &args),
        StoreCommand::Repro {
            repro: args,
            options,
        } => repro(&scenario.with_options(options), &args),
        StoreCommand::Exhaust { exhaust: args } => exhaust(&scenario.workloads(), &args),
    }
}

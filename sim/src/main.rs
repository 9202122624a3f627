//! `durlog-sim`: run seeded crash simulations of durlog, or replay one;
//! the testbed's commands on durlog's scenario.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use durlog_sim::exhaust::DurlogWorkloads;
use durlog_sim::{COMMAND, DurlogSim, RunOptions, VERSION, scenario_of_flags};
use durlog_testbed::cli;
use durlog_vfs::FaultKind;

#[derive(Parser)]
#[command(
    name = "durlog-sim",
    version,
    about = "Deterministic crash simulator for the durlog event log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Only these faults may be enabled: a comma list of kinds
    /// (lost-unsynced-pages, torn-write, lost-dir-entry, unsynced-size-change,
    /// bit-flip-at-rest, bit-flip-on-read, failed-fsync, short-write,
    /// no-space, misdirected-write, crash), or `none`. Default: all.
    #[arg(long, value_parser = parse_faults)]
    faults: Option<FaultList>,
    /// Workload steps per seed (default: drawn per seed, up to 400).
    #[arg(long)]
    steps: Option<u32>,
    /// Plant a deterministic oracle failure in about 1% of seeds, to prove
    /// failures are reported and reproducible.
    #[arg(long)]
    canary: bool,
}

impl Common {
    fn scenario(&self) -> DurlogSim {
        DurlogSim {
            options: RunOptions {
                faults: self.faults.clone().map(|list| list.0),
                steps: self.steps,
                canary: self.canary,
            },
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a range of seeds and print a summary (deterministic on stdout;
    /// progress and timing on stderr). Exits 1 if any seed fails.
    Run {
        #[command(flatten)]
        run: cli::RunArgs,
        #[command(flatten)]
        common: Common,
    },
    /// Merge the reports of the shards of one range (`run --shard I/N
    /// --report FILE`, I = 0..N) and print what one run of the whole range
    /// prints: the same summary, digest and violations, byte for byte.
    /// Exits 1 if any seed failed, 2 if the reports do not make up the
    /// range exactly (other options or ranges, overlaps, gaps).
    Merge {
        #[command(flatten)]
        merge: cli::MergeArgs,
    },
    /// Check every crash state of every workload of up to K operations
    /// (SPEC section 13) with the oracle of `run`; or, with --replay, run
    /// one state again with its full trace. Exits 1 on a violation.
    Exhaust {
        #[command(flatten)]
        exhaust: cli::ExhaustArgs,
        /// Plant a failure in the oracle's model at the end of every
        /// workload that acknowledged something, to show failures are
        /// reported with a command that replays them.
        #[arg(long)]
        canary: bool,
    },
    /// Replay one seed with its full operation and fault trace.
    Repro {
        #[command(flatten)]
        repro: cli::ReproArgs,
        #[command(flatten)]
        common: Common,
    },
}

/// A `--faults` list (a newtype, so clap takes it as one value).
#[derive(Clone, Debug)]
struct FaultList(Vec<FaultKind>);

fn parse_faults(text: &str) -> Result<FaultList, String> {
    if text == "none" {
        return Ok(FaultList(Vec::new()));
    }
    text.split(',')
        .map(|name| {
            name.trim()
                .parse::<FaultKind>()
                .map_err(|error| error.to_string())
        })
        .collect::<Result<_, _>>()
        .map(FaultList)
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { run, common } => cli::run(&common.scenario(), &run, VERSION),
        Command::Merge { merge } => cli::merge(&merge, COMMAND, scenario_of_flags),
        Command::Exhaust { exhaust, canary } => cli::exhaust(&DurlogWorkloads { canary }, &exhaust),
        Command::Repro { repro, common } => cli::repro(&common.scenario(), &repro),
    }
}

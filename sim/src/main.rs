//! `durlog-sim`: run seeded crash simulations of durlog, or replay one;
//! the testbed's commands on durlog's scenario.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use durlog_sim::exhaust::{DurlogWorkloads, WorkloadOptions};
use durlog_sim::{DurlogSim, RunOptions, VERSION};
use durlog_testbed::cli;

/// A run allocates and frees at a high rate (files, records, events):
/// mimalloc takes a tenth to a seventh less CPU than the system allocator,
/// and no randomness (the digests are the same).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

#[derive(Subcommand)]
enum Command {
    /// Run a range of seeds and print a summary (deterministic on stdout;
    /// progress and timing on stderr). Exits 1 if any seed fails, or if a
    /// coverage mark of the engine was never reached.
    Run {
        #[command(flatten)]
        run: cli::RunArgs,
        #[command(flatten)]
        options: RunOptions,
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
        #[command(flatten)]
        options: WorkloadOptions,
    },
    /// Replay one seed with its full operation and fault trace.
    Repro {
        #[command(flatten)]
        repro: cli::ReproArgs,
        #[command(flatten)]
        options: RunOptions,
    },
}

fn main() -> ExitCode {
    let scenario = |options| DurlogSim { options };
    match Cli::parse().command {
        Command::Run { run, options } => cli::run(&scenario(options), &run, VERSION),
        Command::Merge { merge } => cli::merge(&DurlogSim::default(), &merge),
        Command::Exhaust { exhaust, options } => {
            cli::exhaust(&DurlogWorkloads { options }, &exhaust)
        }
        Command::Repro { repro, options } => cli::repro(&scenario(options), &repro),
    }
}

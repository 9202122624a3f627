//! `durlog-raft-sim`: campaigns of seeded cluster runs, on the testbed's
//! command line (`durlog-testbed`'s `cli`).
//!
//! ```text
//! durlog-raft-sim run --seeds 0..1000 [--jobs 2] [--fail-fast] [--off loss,kill] [--shrink N]
//! durlog-raft-sim run --seeds 0..500 --check-determinism     # each seed twice, digests compared
//! durlog-raft-sim run --seeds 0..4000 --shard 1/4 --report shard-1.json
//! durlog-raft-sim merge shard-*.json
//! durlog-raft-sim repro --seed 17 [--off ...] [--keep 0-3,7]
//! ```
//!
//! The summary goes to stdout in seed order, whatever `--jobs`; progress
//! to stderr. A failing seed prints its violation, the command that
//! replays it, a shrunk run and its trace.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use durlog_raft_sim::scenario::{Cluster, ClusterOptions};
use durlog_testbed::cli;

/// A run allocates and frees at a high rate (files, records, events):
/// mimalloc takes a tenth to a seventh less CPU than the system allocator,
/// and no randomness (the digests are the same).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VERSION: &str = concat!("durlog-raft-sim ", env!("CARGO_PKG_VERSION"));

#[derive(Parser)]
#[command(about = "Deterministic simulation of a durlog-raft cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every seed of a range (or a shard of it).
    Run {
        #[command(flatten)]
        run: cli::RunArgs,
        #[command(flatten)]
        options: ClusterOptions,
    },
    /// Merges the reports of a range's shards into what one run prints.
    Merge {
        #[command(flatten)]
        merge: cli::MergeArgs,
    },
    /// Replays one seed with its trace (messages, disk operations, faults,
    /// client outcomes).
    Repro {
        #[command(flatten)]
        repro: cli::ReproArgs,
        #[command(flatten)]
        options: ClusterOptions,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { run, options } => cli::run(&Cluster { options }, &run, VERSION),
        Command::Merge { merge } => cli::merge(&Cluster::default(), &merge),
        Command::Repro { repro, options } => cli::repro(&Cluster { options }, &repro),
    }
}

//! `durlog-raft-sim`: campaigns of seeded cluster runs, on the testbed's
//! command line (`durlog-testbed`'s `cli`).
//!
//! ```text
//! durlog-raft-sim run --seeds 0..1000 [--jobs 2] [--fail-fast] [--off loss,kill] [--shrink N]
//! durlog-raft-sim run --seeds 0..500 --check-determinism     # each seed twice, digests compared
//! durlog-raft-sim run --seeds 0..4000 --shard 1/4 --report shard-1.json
//! durlog-raft-sim merge shard-*.json
//! durlog-raft-sim repro --seed 17 [--off ...] [--keep 0110...]
//! ```
//!
//! The summary goes to stdout in seed order, whatever `--jobs`; progress
//! to stderr. A failing seed prints its violation, the command that
//! replays it, a shrunk run and its trace.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use durlog_raft_sim::scenario::{Cluster, parse_classes};
use durlog_testbed::cli;

const COMMAND: &str = "cargo run --release -p durlog-raft-sim --";
const VERSION: &str = concat!("durlog-raft-sim ", env!("CARGO_PKG_VERSION"));

#[derive(Parser)]
#[command(about = "Deterministic simulation of a durlog-raft cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every run and repro takes.
#[derive(Args, Clone, Debug)]
struct Common {
    /// Fault classes switched off, comma-separated (loss, duplicate,
    /// detour, partition, kill, power-loss, disk, read-error, bit-rot).
    #[arg(long, default_value = "", value_parser = parse_off)]
    off: Off,
}

/// A `--off` list (a newtype, so that clap takes it as one value).
#[derive(Clone, Debug)]
struct Off(Vec<durlog_raft_sim::plan::FaultClass>);

fn parse_off(text: &str) -> Result<Off, String> {
    parse_classes(text).map(Off)
}

impl Common {
    fn scenario(&self) -> Cluster {
        Cluster {
            off: self.off.0.clone(),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Runs every seed of a range (or a shard of it).
    Run {
        #[command(flatten)]
        run: cli::RunArgs,
        #[command(flatten)]
        common: Common,
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
        common: Common,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { run, common } => cli::run(&common.scenario(), &run, VERSION),
        Command::Merge { merge } => cli::merge(&merge, COMMAND, Cluster::of_flags),
        Command::Repro { repro, common } => cli::repro(&common.scenario(), &repro),
    }
}

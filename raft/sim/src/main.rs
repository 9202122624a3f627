//! `durlog-raft-sim`: campaigns of seeded cluster runs.
//!
//! ```text
//! durlog-raft-sim run --seeds 0..1000 [--jobs 2] [--fail-fast] [--off loss,kill] [--shrink N]
//! durlog-raft-sim repro --seed 17 [--off ...] [--keep 0110...] [--trace]
//! ```
//!
//! The summary goes to stdout in seed order, whatever `--jobs`; progress
//! to stderr. A failing seed prints its violation, the command that
//! replays it, and (with `--shrink`) a shrunk run and its trace.

use std::collections::BTreeMap;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::{Parser, Subcommand};
use durlog_raft_sim::plan::FaultClass;
use durlog_raft_sim::shrink::{Shrunk, shrink};
use durlog_raft_sim::tally::Tally;
use durlog_raft_sim::trace::Fnv;
use durlog_raft_sim::{Outcome, Plan, run};

#[derive(Parser)]
#[command(about = "Deterministic simulation of a durlog-raft cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every seed of a range.
    Run {
        /// Seeds as A..B.
        #[arg(long, default_value = "0..100")]
        seeds: String,
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Stops at the first violation.
        #[arg(long)]
        fail_fast: bool,
        /// Fault classes switched off, comma-separated.
        #[arg(long, default_value = "")]
        off: String,
        /// How many failing seeds to shrink and trace.
        #[arg(long, default_value_t = 1)]
        shrink: usize,
        /// Prints each seed's digest (to compare two campaigns seed by seed).
        #[arg(long)]
        digests: bool,
        /// Runs each seed twice in this process; a seed whose two digests
        /// differ is a violation (nondeterminism).
        #[arg(long)]
        twice: bool,
    },
    /// Replays one seed, with its trace.
    Repro {
        #[arg(long)]
        seed: u64,
        #[arg(long, default_value = "")]
        off: String,
        /// Which actions to keep, one 0 or 1 each (as a shrink prints).
        #[arg(long)]
        keep: Option<String>,
        #[arg(long)]
        trace: bool,
    },
}

fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| format!("seeds {text:?}: expected A..B"))?;
    let parse = |part: &str| {
        part.parse::<u64>()
            .map_err(|error| format!("seeds {text:?}: {error}"))
    };
    Ok(parse(start)?..parse(end)?)
}

fn parse_off(text: &str) -> Result<Vec<FaultClass>, String> {
    text.split(',')
        .filter(|name| !name.is_empty())
        .map(|name| {
            FaultClass::parse(name).ok_or_else(|| {
                let names: Vec<&str> = FaultClass::ALL.iter().map(|class| class.name()).collect();
                format!("fault class {name:?}: expected one of {}", names.join(", "))
            })
        })
        .collect()
}

/// The plan of `seed` with `off` switched off.
pub fn plan_of(seed: u64, off: &[FaultClass]) -> Plan {
    off.iter()
        .fold(Plan::draw(seed), |plan, &class| plan.without(class))
}

fn off_text(off: &[FaultClass]) -> String {
    let names: Vec<&str> = off.iter().map(|class| class.name()).collect();
    names.join(",")
}

fn repro_command(seed: u64, off: &[FaultClass], keep: Option<&[bool]>) -> String {
    let mut command = format!("cargo run --release -p durlog-raft-sim -- repro --seed {seed}");
    if !off.is_empty() {
        command.push_str(&format!(" --off {}", off_text(off)));
    }
    if let Some(keep) = keep {
        let mask: String = keep
            .iter()
            .map(|&kept| if kept { '1' } else { '0' })
            .collect();
        command.push_str(&format!(" --keep {mask}"));
    }
    command.push_str(" --trace");
    command
}

fn campaign(
    seeds: Range<u64>,
    jobs: usize,
    fail_fast: bool,
    off: &[FaultClass],
    twice: bool,
) -> BTreeMap<u64, Outcome> {
    let next = AtomicU64::new(seeds.start);
    let stop = AtomicBool::new(false);
    let results = Mutex::new(BTreeMap::new());
    let done = AtomicU64::new(0);
    let total = seeds.end.saturating_sub(seeds.start);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let plan = plan_of(seed, off);
                    let mut outcome = run(&plan, None, false);
                    if twice {
                        let again = run(&plan, None, false);
                        if again.digest != outcome.digest && outcome.violation.is_none() {
                            outcome.violation = Some(format!(
                                "nondeterminism: digest {:016x}, then {:016x} in the same process",
                                outcome.digest, again.digest
                            ));
                        }
                    }
                    if outcome.violation.is_some() && fail_fast {
                        stop.store(true, Ordering::Relaxed);
                    }
                    results.lock().expect("results").insert(seed, outcome);
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if finished.is_multiple_of(500) {
                        eprintln!("{finished}/{total} seeds");
                    }
                }
            });
        }
    });
    results.into_inner().expect("results")
}

fn print_shrunk(seed: u64, off: &[FaultClass], shrunk: &Shrunk) {
    println!(
        "shrunk: {} of {} actions kept, fault classes off: [{}]",
        shrunk.keep.iter().filter(|&&kept| kept).count(),
        shrunk.keep.len(),
        off_text(&shrunk.off)
    );
    println!(
        "replay the shrunk run: {}",
        repro_command(seed, &shrunk.off, Some(&shrunk.keep))
    );
    let _ = off;
    println!("trace of the shrunk run:");
    for line in &shrunk.outcome.trace {
        println!("  {line}");
    }
}

/// How a campaign runs and what it prints.
struct Options {
    jobs: usize,
    fail_fast: bool,
    shrinks: usize,
    digests: bool,
    twice: bool,
}

fn run_command(seeds: Range<u64>, off: &[FaultClass], options: &Options) -> ExitCode {
    let Options {
        jobs,
        fail_fast,
        shrinks,
        digests,
        twice,
    } = *options;
    let started = Instant::now();
    let results = campaign(seeds.clone(), jobs, fail_fast, off, twice);
    let wall = started.elapsed().as_secs_f64();
    let mut digest = Fnv::default();
    let mut tally = Tally::default();
    let mut violations = 0;
    let mut simulated_ns = 0;
    for (&seed, outcome) in &results {
        std::hash::Hasher::write_u64(&mut digest, seed);
        std::hash::Hasher::write_u64(&mut digest, outcome.digest);
        tally.merge(&outcome.tally);
        if digests {
            println!("seed {seed} digest {:016x}", outcome.digest);
        }
        simulated_ns += outcome.simulated_ns;
        if let Some(violation) = &outcome.violation {
            violations += 1;
            println!("VIOLATION seed {seed}: {violation}");
            println!("  replay: {}", repro_command(seed, off, None));
            if violations <= shrinks {
                let shrunk = shrink(&plan_of(seed, off), off);
                print_shrunk(seed, off, &shrunk);
            }
        }
    }
    let count = results.len() as f64;
    print!("{tally}");
    println!(
        "seeds       {} ({}..{})",
        results.len(),
        seeds.start,
        seeds.end
    );
    println!("jobs        {jobs}");
    println!("wall        {wall:.1} s");
    println!("seeds/s     {:.1}", count / wall.max(1e-9));
    println!(
        "sim s per wall s {:.1} (per job)",
        simulated_ns as f64 / 1e9 / wall.max(1e-9) / jobs.max(1) as f64
    );
    if let Some(passed) = tally.counts.get("liveness-phases-passed") {
        println!(
            "liveness    {passed} passed, bound {} ms, mean {:.0} ms",
            Plan::draw(seeds.start).liveness_ms,
            tally.get("liveness-ms") as f64 / (*passed).max(1) as f64
        );
    }
    println!("violations  {violations}");
    println!("digest      {:016x}", std::hash::Hasher::finish(&digest));
    if violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn repro(seed: u64, off: &[FaultClass], keep: Option<String>, trace: bool) -> ExitCode {
    let plan = plan_of(seed, off);
    let keep: Option<Vec<bool>> = keep.map(|mask| mask.chars().map(|c| c == '1').collect());
    let outcome = run(&plan, keep.as_deref(), trace);
    if trace {
        println!(
            "plan: {:?}",
            Plan {
                steps: Vec::new(),
                ..plan.clone()
            }
        );
    }
    for line in &outcome.trace {
        println!("{line}");
    }
    print!("{}", outcome.tally);
    println!("digest      {:016x}", outcome.digest);
    match &outcome.violation {
        Some(violation) => {
            println!("VIOLATION seed {seed}: {violation}");
            ExitCode::FAILURE
        }
        None => {
            println!("no violation");
            ExitCode::SUCCESS
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            seeds,
            jobs,
            fail_fast,
            off,
            shrink,
            digests,
            twice,
        } => parse_seeds(&seeds)
            .and_then(|seeds| Ok((seeds, parse_off(&off)?)))
            .map(|(seeds, off)| {
                let options = Options {
                    jobs,
                    fail_fast,
                    shrinks: shrink,
                    digests,
                    twice,
                };
                run_command(seeds, &off, &options)
            }),
        Command::Repro {
            seed,
            off,
            keep,
            trace,
        } => parse_off(&off).map(|off| repro(seed, &off, keep, trace)),
    };
    result.unwrap_or_else(|error| {
        eprintln!("durlog-raft-sim: {error}");
        ExitCode::from(2)
    })
}

//! `durlog-sim`: run seeded crash simulations of durlog, or replay one.

use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use durlog_sim::exhaust::{self as exhaustive, ExhaustOptions, ExhaustProgress, StateId};
use durlog_sim::shard::{self, ShardReport};
use durlog_sim::{
    Plan, Progress, RunOptions, Summary, keep_ranges, parse_keep, repro_command,
    run_campaign_digests, run_plan, shard_seeds, shrink,
};
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
    fn options(&self) -> RunOptions {
        RunOptions {
            faults: self.faults.clone().map(|list| list.0),
            steps: self.steps,
            canary: self.canary,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a range of seeds and print a summary (deterministic on stdout;
    /// progress and timing on stderr). Exits 1 if any seed fails.
    Run {
        /// Seeds to run, as A..B (B excluded).
        #[arg(long, default_value = "0..1000", value_parser = parse_range)]
        seeds: Range<u64>,
        /// Threads (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Take every N-th seed starting at the I-th: I/N.
        #[arg(long, default_value = "0/1", value_parser = parse_shard)]
        shard: (u64, u64),
        /// Failing seeds to shrink and print in full (the rest are listed).
        #[arg(long, default_value_t = 3)]
        shrink: usize,
        /// Stop at the first violation (which seeds ran then depends on
        /// thread timing, so stdout is deterministic only without this).
        #[arg(long)]
        fail_fast: bool,
        /// Also write a machine-readable report (JSON) to FILE: every count
        /// of the summary, the violations, the range, shard and options,
        /// and each seed's trace digest, for `durlog-sim merge`.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Merge the reports of the shards of one range (`run --shard I/N
    /// --report FILE`, I = 0..N) and print what one run of the whole range
    /// prints: the same summary, digest and violations, byte for byte.
    /// Exits 1 if any seed failed, 2 if the reports do not make up the
    /// range exactly (other options or ranges, overlaps, gaps).
    Merge {
        /// The shard reports, in any order.
        #[arg(required = true, value_name = "FILE")]
        reports: Vec<PathBuf>,
        /// Failing seeds to shrink and print in full (the rest are listed).
        #[arg(long, default_value_t = 3)]
        shrink: usize,
    },
    /// Check every crash state of every workload of up to K operations
    /// (SPEC section 13) with the oracle of `run`; or, with --replay, run
    /// one state again with its full trace. Exits 1 on a violation.
    Exhaust {
        /// Workloads of 1 to K operations (8^K of the longest).
        #[arg(long, default_value_t = 2, value_name = "K")]
        ops: u32,
        /// Dirty pages decided one by one per power loss; the further
        /// pages of a power loss are decided together (kept or lost).
        #[arg(long, default_value_t = durlog_sim::exhaust::PAGES_MAX)]
        pages_max: u32,
        /// Do not crash recoveries (by default the recovery after each
        /// state is crashed at each of its operations too).
        #[arg(long)]
        no_recovery_crashes: bool,
        /// Stop taking workloads at the first violation.
        #[arg(long)]
        fail_fast: bool,
        /// Threads (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Run the one state a violation names (e.g. Pal:c7:r2:0.1.1) with
        /// its trace, instead of exploring.
        #[arg(long, value_name = "STATE")]
        replay: Option<String>,
        /// Leave out the disk operations from a replay's trace.
        #[arg(long)]
        no_disk_ops: bool,
        /// Plant a failure in the oracle's model at the end of every
        /// workload that acknowledged something, to show failures are
        /// reported with a command that replays them.
        #[arg(long)]
        canary: bool,
    },
    /// Replay one seed with its full operation and fault trace.
    Repro {
        #[arg(long)]
        seed: u64,
        /// Run only these steps of the seed's plan (as printed by a shrink),
        /// e.g. 0-3,7,9.
        #[arg(long)]
        keep: Option<String>,
        /// Leave out the disk operations from the trace.
        #[arg(long)]
        no_disk_ops: bool,
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

fn parse_range(text: &str) -> Result<Range<u64>, String> {
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?} is not a range A..B"))?;
    let number = |part: &str| {
        part.trim()
            .parse::<u64>()
            .map_err(|_| format!("{part:?} in {text:?} is not a number"))
    };
    let (start, end) = (number(start)?, number(end)?);
    if start > end {
        return Err(format!("{text:?}: the range is empty backwards"));
    }
    Ok(start..end)
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (index, count) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?} is not I/N"))?;
    let number = |part: &str| {
        part.trim()
            .parse::<u64>()
            .map_err(|_| format!("{part:?} in {text:?} is not a number"))
    };
    let (index, count) = (number(index)?, number(count)?);
    if count == 0 || index >= count {
        return Err(format!("shard {text:?}: need 0 <= I < N"));
    }
    Ok((index, count))
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            seeds,
            jobs,
            shard,
            shrink: shrink_count,
            fail_fast,
            report,
            common,
        } => run(
            Campaign {
                range: seeds,
                shard,
                options: common.options(),
            },
            jobs,
            shrink_count,
            fail_fast,
            report.as_deref(),
        ),
        Command::Merge {
            reports,
            shrink: shrink_count,
        } => merge(&reports, shrink_count),
        Command::Exhaust {
            ops,
            pages_max,
            no_recovery_crashes,
            fail_fast,
            jobs,
            replay,
            no_disk_ops,
            canary,
        } => match replay {
            Some(state) => exhaust_replay(&state, pages_max, !no_disk_ops, canary),
            None => exhaust(
                ExhaustOptions {
                    ops,
                    pages_max,
                    recovery_crashes: !no_recovery_crashes,
                    fail_fast,
                    canary,
                },
                jobs,
            ),
        },
        Command::Repro {
            seed,
            keep,
            no_disk_ops,
            common,
        } => repro(seed, keep.as_deref(), !no_disk_ops, &common.options()),
    }
}

/// What `run` was asked to do.
struct Campaign {
    range: Range<u64>,
    shard: (u64, u64),
    options: RunOptions,
}

fn run(
    campaign: Campaign,
    jobs: Option<usize>,
    shrink_count: usize,
    fail_fast: bool,
    report: Option<&std::path::Path>,
) -> ExitCode {
    let Campaign {
        range,
        shard,
        options,
    } = &campaign;
    if let Some(path) = report
        && let Err(error) = shard::check_report_path(path)
    {
        eprintln!("durlog-sim: cannot write the report: {error}");
        return ExitCode::from(2);
    }
    let seeds: Vec<u64> = shard_seeds(range.clone(), shard.0, shard.1).collect();
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let progress = Progress::default();
    let bar = indicatif::ProgressBar::new(seeds.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} seeds {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = Instant::now();
    let (summary, digests) = std::thread::scope(|scope| {
        let worker =
            scope.spawn(|| run_campaign_digests(&seeds, jobs, options, &progress, fail_fast));
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            let cycles = progress.cycles.load(Ordering::Relaxed);
            let rate = cycles as f64 / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_position(progress.seeds_done.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{rate:.0} cycles/s, {} violations",
                progress.violations.load(Ordering::Relaxed)
            ));
        }
        worker.join().expect("campaign thread")
    });
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    // Written before any shrinking, which can take long: the report is
    // what a campaign split over machines waits for. A report that cannot
    // be written still leaves the summary on stdout, and exit code 2.
    let written = report.map(|path| {
        let report = ShardReport::new(range.clone(), *shard, options, &summary, &digests);
        shard::write_report(path, &report)
    });
    eprintln!(
        "{} seeds, {} cycles in {elapsed:.2} s on {jobs} threads: {:.0} cycles/s, {:.0} cycles/s per thread, {:.0} appends/s, {:.0} crashes/s",
        summary.seeds,
        summary.counters.cycles,
        summary.counters.cycles as f64 / elapsed,
        summary.counters.cycles as f64 / elapsed / jobs as f64,
        summary.counters.appends_submitted as f64 / elapsed,
        summary.counters.crashes as f64 / elapsed,
    );
    let code = print_outcome(&campaign, &summary, shrink_count);
    match written {
        Some(Err(error)) => {
            eprintln!("durlog-sim: cannot write the report: {error}");
            ExitCode::from(2)
        }
        _ => code,
    }
}

/// Reads the shard reports, merges them, and prints what one `run` of the
/// whole range prints.
fn merge(paths: &[PathBuf], shrink_count: usize) -> ExitCode {
    let mut reports = Vec::with_capacity(paths.len());
    for path in paths {
        match shard::read_report(path) {
            Ok(report) => reports.push((path.display().to_string(), report)),
            Err(error) => {
                eprintln!("durlog-sim merge: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let merged = match shard::merge(&reports) {
        Ok(merged) => merged,
        Err(error) => {
            eprintln!("durlog-sim merge: {error}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "merged {} shard reports of seeds {}..{}: {} seeds, {} cycles",
        merged.shards,
        merged.range.start,
        merged.range.end,
        merged.summary.seeds,
        merged.summary.counters.cycles
    );
    let campaign = Campaign {
        range: merged.range,
        shard: (0, 1),
        options: merged.options,
    };
    print_outcome(&campaign, &merged.summary, shrink_count)
}

/// The deterministic stdout of a campaign: the command, the summary, and
/// every violation with its reproduction (the first `shrink_count` shrunk).
fn print_outcome(campaign: &Campaign, summary: &Summary, shrink_count: usize) -> ExitCode {
    let options = &campaign.options;
    println!(
        "{}",
        shard::run_header(&campaign.range, campaign.shard, options)
    );
    println!("{summary}");
    if summary.violations.is_empty() {
        return ExitCode::SUCCESS;
    }
    for (index, (seed, violation)) in summary.violations.iter().enumerate() {
        println!();
        println!(
            "VIOLATION seed {seed} at step {}: {}",
            violation.step, violation.message
        );
        println!("  reproduce: {}", repro_command(*seed, options, None));
        if index < shrink_count {
            print_shrunk(*seed, violation.step, options);
        }
    }
    let _ = std::io::stdout().flush();
    ExitCode::FAILURE
}

fn print_shrunk(seed: u64, step: usize, options: &RunOptions) {
    let plan = Plan::draw(seed, options);
    let shrunk = shrink(&plan, step);
    let kept = shrunk.keep.iter().filter(|kept| **kept).count();
    let faults: Vec<FaultKind> = shrunk.plan.faults.enabled();
    let shrunk_options = RunOptions {
        faults: Some(faults),
        ..options.clone()
    };
    println!(
        "  shrunk to {kept} of {} steps, faults [{}]: {}",
        plan.actions.len(),
        shrunk.plan.faults,
        repro_command(seed, &shrunk_options, Some(&keep_ranges(&shrunk.keep)))
    );
    match &shrunk.result.violation {
        Some(violation) => println!("  shrunk failure: {}", violation.message),
        None => println!("  (the shrunk run no longer fails; use the full reproduction)"),
    }
    println!("  shrunk trace:");
    for line in &shrunk.result.trace {
        println!("    {line}");
    }
}

fn repro(seed: u64, keep: Option<&str>, disk_ops: bool, options: &RunOptions) -> ExitCode {
    let plan = Plan::draw(seed, options);
    let keep = match keep
        .map(|text| parse_keep(text, plan.actions.len()))
        .transpose()
    {
        Ok(keep) => keep,
        Err(error) => {
            eprintln!("durlog-sim: {error}");
            return ExitCode::from(2);
        }
    };
    let result = run_plan(&plan, keep.as_deref(), true);
    for line in &result.trace {
        if disk_ops || !line.starts_with("      disk:") {
            println!("{line}");
        }
    }
    println!("digest {:016x}", result.digest);
    match result.violation {
        Some(violation) => {
            println!(
                "VIOLATION seed {seed} at step {}: {}",
                violation.step, violation.message
            );
            ExitCode::FAILURE
        }
        None => {
            println!("ok: seed {seed} passes");
            ExitCode::SUCCESS
        }
    }
}

fn exhaust(options: ExhaustOptions, jobs: Option<usize>) -> ExitCode {
    if options.ops == 0 {
        eprintln!("durlog-sim exhaust: --ops must be at least 1");
        return ExitCode::from(2);
    }
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = exhaustive::Workload::all(options.ops).len() as u64;
    let progress = ExhaustProgress::default();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} workloads {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = Instant::now();
    let summary = std::thread::scope(|scope| {
        let worker = scope.spawn(|| exhaustive::run_exhaust(options, jobs, &progress));
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            bar.set_position(progress.workloads_done.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{} states, {} violations",
                progress.states.load(Ordering::Relaxed),
                progress.violations.load(Ordering::Relaxed)
            ));
        }
        worker.join().expect("exhaust thread")
    });
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "{} workloads, {} states in {elapsed:.2} s on {jobs} threads: {:.0} states/s",
        summary.workloads,
        summary.states,
        summary.states as f64 / elapsed
    );
    println!("{summary}");
    if summary.violations == 0 {
        return ExitCode::SUCCESS;
    }
    for (id, violation, before) in &summary.kept {
        println!();
        let at = if violation.message.starts_with(exhaustive::PANIC_PREFIX) {
            "a panic (its replay shows where)".to_string()
        } else {
            let op = id
                .workload
                .op_at_step(violation.step)
                .map_or("the final checks".to_string(), |(position, op)| {
                    format!("operation {} ({op:?})", position + 1)
                });
            format!("at step {} ({op})", violation.step)
        };
        println!(
            "VIOLATION {id} {at}, the first of its workload, after {before} states: {}",
            violation.message
        );
        println!(
            "  reproduce: {}",
            exhaustive::replay_command(id, options.pages_max, options.canary)
        );
    }
    let more = summary.failing_workloads - summary.kept.len() as u64;
    if more > 0 {
        println!();
        println!(
            "(and {more} more failing workloads; the first violation of each is shown for the first {})",
            summary.kept.len()
        );
    }
    let _ = std::io::stdout().flush();
    ExitCode::FAILURE
}

fn exhaust_replay(state: &str, pages_max: u32, disk_ops: bool, canary: bool) -> ExitCode {
    let id: StateId = match state.parse() {
        Ok(id) => id,
        Err(error) => {
            eprintln!("durlog-sim exhaust --replay: {error}");
            return ExitCode::from(2);
        }
    };
    let (result, misfit) = exhaustive::replay(&id, pages_max, canary);
    for line in &result.trace {
        if disk_ops || !line.starts_with("      disk:") {
            println!("{line}");
        }
    }
    if misfit {
        println!("warning: the choices do not fit this run (made by another build?)");
    }
    match result.violation {
        Some(violation) => {
            println!(
                "VIOLATION {id} at step {}: {}",
                violation.step, violation.message
            );
            ExitCode::FAILURE
        }
        None => {
            println!("ok: state {id} passes");
            ExitCode::SUCCESS
        }
    }
}

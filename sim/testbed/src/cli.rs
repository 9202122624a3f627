//! The commands a scenario's binary is made of: `run` (a campaign, with
//! `--shard`, `--report`, `--fail-fast`, `--check-determinism`), `merge`
//! (shard reports into one summary), `repro` (one seed, or a shrunk part
//! of it, with its trace) and `exhaust` (every crash state of small
//! workloads, or one of them again with `--replay`).
//!
//! Each is a clap `Args` struct to flatten into the binary's own
//! subcommands beside the scenario's options, and a function that runs it
//! and returns the exit code: 0 clean, 1 a violation, 2 a usage error or
//! reports that do not make up one range. stdout is deterministic for the
//! same arguments; progress and timing go to stderr.
//!
//! A scenario's trace lines that begin (after indentation) with `disk:`
//! are the disk's operations, left out by `--no-disk-ops`.

use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::campaign::{Progress, Summary, check_determinism, run_campaign};
use crate::explore::{
    ExhaustOptions, ExhaustProgress, Exhaustible, PAGES_MAX, Share, StateId, replay,
    replay_command, run_exhaust,
};
use crate::options;
use crate::shard::{self, ShardReport, run_header};
use crate::shrink::{parse_keep, shrink};
use crate::{Scenario, Tally, run_caught, seeds::shard_seeds};

mod store;

pub use store::{StoreCommand, store_main};

/// `run`: a range of seeds.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Seeds to run, as A..B (B excluded).
    #[arg(long, default_value = "0..1000", value_parser = parse_range)]
    pub seeds: Range<u64>,
    /// Threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Take every N-th seed starting at the I-th: I/N.
    #[arg(long, default_value = "0/1", value_parser = parse_shard)]
    pub shard: (u64, u64),
    /// Failing seeds to shrink and print in full (the rest are listed).
    #[arg(long, default_value_t = 1)]
    pub shrink: usize,
    /// Stop at the first violation (which seeds ran then depends on
    /// thread timing, so stdout is deterministic only without this).
    #[arg(long)]
    pub fail_fast: bool,
    /// Also write a machine-readable report (JSON) to FILE: every count
    /// of the summary, the violations, the range, shard and options, and
    /// each seed's trace digest, for `merge`.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Run every seed twice instead, in another order, and compare the
    /// digests, counts and verdicts: exits 1 if any seed differs.
    #[arg(long)]
    pub check_determinism: bool,
    /// Exit 0 even if a mark of the scenario was never reached (for a
    /// campaign too short, or with too few faults, to reach them all).
    #[arg(long)]
    pub allow_unreached_marks: bool,
    /// Exit 0 even if this mark was never reached (repeatable): for a mark
    /// too rare for the campaign's length.
    #[arg(long, value_name = "MARK")]
    pub allow_unreached_mark: Vec<String>,
}

/// `merge`: the reports of the shards of one range.
#[derive(clap::Args, Clone, Debug)]
pub struct MergeArgs {
    /// The shard reports, in any order.
    #[arg(required = true, value_name = "FILE")]
    pub reports: Vec<PathBuf>,
    /// Failing seeds to shrink and print in full (the rest are listed).
    #[arg(long, default_value_t = 1)]
    pub shrink: usize,
    /// Exit 0 even if a mark of the scenario was never reached.
    #[arg(long)]
    pub allow_unreached_marks: bool,
    /// Exit 0 even if this mark was never reached (repeatable).
    #[arg(long, value_name = "MARK")]
    pub allow_unreached_mark: Vec<String>,
}

/// `repro`: one seed again, with its trace.
#[derive(clap::Args, Clone, Debug)]
pub struct ReproArgs {
    #[arg(long)]
    pub seed: u64,
    /// Run only these steps of the seed's plan (as printed by a shrink),
    /// e.g. 0-3,7,9.
    #[arg(long)]
    pub keep: Option<String>,
    /// Leave out the disk operations from the trace.
    #[arg(long)]
    pub no_disk_ops: bool,
}

/// `exhaust`: every crash state of every workload of up to K operations.
#[derive(clap::Args, Clone, Debug)]
pub struct ExhaustArgs {
    /// Workloads of 1 to K operations.
    #[arg(long, default_value_t = 2, value_name = "K")]
    pub ops: u32,
    /// Dirty pages decided one by one per power loss; the further pages
    /// of a power loss are decided together (kept or lost).
    #[arg(long, default_value_t = PAGES_MAX)]
    pub pages_max: u32,
    /// Do not crash recoveries (by default the recovery after each state
    /// is crashed at each of its operations too).
    #[arg(long)]
    pub no_recovery_crashes: bool,
    /// Stop taking workloads at the first violation.
    #[arg(long)]
    pub fail_fast: bool,
    /// Where a state judged before is looked for: at the same fault point
    /// (each-point), at every fault point of the workload by the images
    /// and the runner's digests (across-points), or as each-point with
    /// every match demanded to be judged alike (verify).
    #[arg(long, value_enum, default_value_t = Share::AcrossPoints)]
    pub share: Share,
    /// Threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run the one state a violation names (e.g. Pal:c7:r2:0.1.1) with its
    /// trace, instead of exploring.
    #[arg(long, value_name = "STATE")]
    pub replay: Option<String>,
    /// Leave out the disk operations from a replay's trace.
    #[arg(long)]
    pub no_disk_ops: bool,
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

fn jobs_or_cores(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what} {{msg}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// `run`: the campaign of `args` on `scenario` (`version`: the scenario
/// binary's, for reports).
pub fn run<S: Scenario>(scenario: &S, args: &RunArgs, version: &str) -> ExitCode {
    if let Some(path) = &args.report
        && let Err(error) = shard::check_report_path(path)
    {
        eprintln!("{}: cannot write the report: {error}", scenario.command());
        return ExitCode::from(2);
    }
    if let Err(error) = options::check_round_trip(scenario.options()) {
        eprintln!("{}: {error}", scenario.command());
        return ExitCode::from(2);
    }
    let seeds: Vec<u64> = shard_seeds(args.seeds.clone(), args.shard.0, args.shard.1).collect();
    let jobs = jobs_or_cores(args.jobs);
    if args.check_determinism {
        return determinism(scenario, &seeds, jobs);
    }
    let progress = Progress::default();
    let bar = progress_bar(seeds.len() as u64, "seeds");
    let started = Instant::now();
    let (summary, digests) = std::thread::scope(|scope| {
        let worker =
            scope.spawn(|| run_campaign(scenario, &seeds, jobs, &progress, args.fail_fast));
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
    let written = args.report.as_ref().map(|path| {
        let report = ShardReport::new(
            scenario,
            version,
            args.seeds.clone(),
            args.shard,
            &summary,
            &digests,
        );
        shard::write_report(path, &report)
    });
    let cycles = summary.tally.cycles();
    eprintln!(
        "{} seeds, {cycles} cycles in {elapsed:.2} s on {jobs} threads: {:.1} seeds/s, {:.0} cycles/s, {:.0} cycles/s per thread",
        summary.seeds,
        summary.seeds as f64 / elapsed,
        cycles as f64 / elapsed,
        cycles as f64 / elapsed / jobs as f64,
    );
    let header = run_header(scenario, &args.seeds, args.shard);
    // A shard need not reach every mark: the merge of all shards must.
    let marks = MarksRequired {
        all: args.report.is_none() && !args.allow_unreached_marks,
        except: &args.allow_unreached_mark,
    };
    let code = print_outcome(scenario, &header, &summary, args.shrink, marks);
    match written {
        Some(Err(error)) => {
            eprintln!("{}: cannot write the report: {error}", scenario.command());
            ExitCode::from(2)
        }
        _ => code,
    }
}

fn determinism<S: Scenario>(scenario: &S, seeds: &[u64], jobs: usize) -> ExitCode {
    let started = Instant::now();
    let divergences = check_determinism(scenario, seeds, jobs, &Progress::default());
    eprintln!(
        "{} seeds run twice in {:.2} s",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "determinism: {} seeds run twice, {} differ",
        seeds.len(),
        divergences.len()
    );
    for divergence in &divergences {
        println!(
            "DIVERGENCE seed {}: digests {:016x} and {:016x}{}",
            divergence.seed,
            divergence.digests.0,
            divergence.digests.1,
            if divergence.tally_differs {
                ", counts or verdicts differ too"
            } else {
                ""
            }
        );
        println!("  reproduce: {}", scenario.repro(divergence.seed));
    }
    if divergences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `merge`: the reports of `args`, printed as one run of the whole range
/// prints. The reports' options, read back into `scenario`'s type, make
/// the scenario that shrinks their violations.
pub fn merge<S: Scenario>(scenario: &S, args: &MergeArgs) -> ExitCode {
    let command = scenario.command();
    let mut reports = Vec::with_capacity(args.reports.len());
    for path in &args.reports {
        match shard::read_report::<S::Tally>(path) {
            Ok(report) => reports.push((path.display().to_string(), report)),
            Err(error) => {
                eprintln!("{command} merge: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let merged = match shard::merge(&reports) {
        Ok(merged) => merged,
        Err(error) => {
            eprintln!("{command} merge: {error}");
            return ExitCode::from(2);
        }
    };
    let scenario = match serde_json::from_value::<S::Options>(merged.options.clone()) {
        Ok(options) => scenario.with_options(options),
        Err(error) => {
            eprintln!(
                "{command} merge: the reports' options {} are not this scenario's: {error}",
                merged.options
            );
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "merged {} shard reports of seeds {}..{}: {} seeds, {} cycles",
        merged.shards,
        merged.range.start,
        merged.range.end,
        merged.summary.seeds,
        merged.summary.tally.cycles()
    );
    let header = run_header(&scenario, &merged.range, (0, 1));
    let marks = MarksRequired {
        all: !args.allow_unreached_marks,
        except: &args.allow_unreached_mark,
    };
    print_outcome(&scenario, &header, &merged.summary, args.shrink, marks)
}

/// Violations listed one by one; the rest are counted.
const VIOLATIONS_LISTED: usize = 20;

/// Lines of a shrunk trace printed; `repro` prints the rest.
const SHRUNK_TRACE_LINES: usize = 60;

/// Which of the scenario's marks a campaign must reach.
struct MarksRequired<'a> {
    /// All of them (but `except`), or none.
    all: bool,
    except: &'a [String],
}

/// The deterministic stdout of a campaign: the command, the summary, and
/// the violations with their reproduction (the first `shrink_count`
/// shrunk). Exits 1 on a violation, or on a mark of the scenario that no
/// seed reached that `marks` requires.
fn print_outcome<S: Scenario>(
    scenario: &S,
    header: &str,
    summary: &Summary<S::Tally>,
    shrink_count: usize,
    marks: MarksRequired<'_>,
) -> ExitCode {
    println!("{header}");
    println!("{summary}");
    let missed: Vec<&str> = (summary.marks_missed().into_iter())
        .filter(|mark| marks.all && !marks.except.iter().any(|allowed| allowed == mark))
        .collect();
    let marks_failed = !missed.is_empty();
    if marks_failed {
        println!();
        println!(
            "FAILED: {} mark{} of the scenario never reached: {} (a change made them unreachable, or the campaign is too short or its faults too few; --allow-unreached-marks for a campaign not meant to reach them)",
            missed.len(),
            if missed.len() == 1 { "" } else { "s" },
            missed.join("; ")
        );
    }
    if summary.violations.is_empty() {
        let _ = std::io::stdout().flush();
        return if marks_failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    for (index, (seed, violation)) in summary.violations.iter().enumerate() {
        if index == VIOLATIONS_LISTED {
            println!();
            println!(
                "(and {} more violations, in the report with --report FILE)",
                summary.violations.len() - VIOLATIONS_LISTED
            );
            break;
        }
        println!();
        println!(
            "VIOLATION seed {seed} at step {}: {}",
            violation.step, violation.message
        );
        println!("  reproduce: {}", scenario.repro(*seed));
        if index < shrink_count {
            print_shrunk(scenario, *seed, violation.step);
        }
    }
    let _ = std::io::stdout().flush();
    ExitCode::FAILURE
}

fn print_shrunk<S: Scenario>(scenario: &S, seed: u64, step: usize) {
    let plan = scenario.draw(seed);
    let shrunk = shrink(scenario, seed, step);
    println!(
        "  shrunk to {} of {} steps, faults [{}]: {}",
        shrunk.kept(),
        scenario.actions(&plan),
        scenario.describe_faults(&shrunk.plan),
        shrunk.repro(scenario, seed)
    );
    match &shrunk.outcome.violation {
        Some(violation) => println!("  shrunk failure: {}", violation.message),
        None => println!("  (the shrunk run no longer fails; use the full reproduction)"),
    }
    println!("  shrunk trace:");
    let lines = &shrunk.outcome.trace;
    for line in lines.iter().take(SHRUNK_TRACE_LINES) {
        println!("    {line}");
    }
    if lines.len() > SHRUNK_TRACE_LINES {
        println!(
            "    ... {} more lines: the shrunk repro prints them all",
            lines.len() - SHRUNK_TRACE_LINES
        );
    }
}

fn is_disk_op(line: &str) -> bool {
    line.trim_start().starts_with("disk:")
}

/// `repro`: one seed of `scenario` with its trace.
pub fn repro<S: Scenario>(scenario: &S, args: &ReproArgs) -> ExitCode {
    let plan = scenario.draw(args.seed);
    let keep = match args
        .keep
        .as_deref()
        .map(|text| parse_keep(text, scenario.actions(&plan)))
        .transpose()
    {
        Ok(keep) => keep,
        Err(error) => {
            eprintln!("{}: {error}", scenario.command());
            return ExitCode::from(2);
        }
    };
    let (outcome, _) = run_caught(scenario, &plan, keep.as_deref(), true);
    for line in &outcome.trace {
        if !args.no_disk_ops || !is_disk_op(line) {
            println!("{line}");
        }
    }
    println!("digest {:016x}", outcome.digest);
    match outcome.violation {
        Some(violation) => {
            println!(
                "VIOLATION seed {} at step {}: {}",
                args.seed, violation.step, violation.message
            );
            ExitCode::FAILURE
        }
        None => {
            println!("ok: seed {} passes", args.seed);
            ExitCode::SUCCESS
        }
    }
}

/// `exhaust`: every crash state of `scenario`'s workloads, or one again.
pub fn exhaust<E: Exhaustible>(scenario: &E, args: &ExhaustArgs) -> ExitCode {
    if let Some(state) = &args.replay {
        return exhaust_replay(scenario, state, args);
    }
    if args.ops == 0 {
        eprintln!("{} exhaust: --ops must be at least 1", scenario.command());
        return ExitCode::from(2);
    }
    let options = ExhaustOptions {
        ops: args.ops,
        pages_max: args.pages_max,
        recovery_crashes: !args.no_recovery_crashes,
        fail_fast: args.fail_fast,
        share: args.share,
    };
    let jobs = jobs_or_cores(args.jobs);
    let total = scenario.workloads(args.ops).len() as u64;
    let progress = ExhaustProgress::default();
    let bar = progress_bar(total, "workloads");
    let started = Instant::now();
    let summary = std::thread::scope(|scope| {
        let worker = scope.spawn(|| run_exhaust(scenario, options, jobs, &progress));
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
    for (id, violation, at, before) in &summary.kept {
        println!();
        println!(
            "VIOLATION {id} {at}, the first of its workload, after {before} states: {}",
            violation.message
        );
        println!(
            "  reproduce: {}",
            replay_command(scenario, id, options.pages_max)
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

fn exhaust_replay<E: Exhaustible>(scenario: &E, state: &str, args: &ExhaustArgs) -> ExitCode {
    let id: StateId<E::Workload> = match state.parse() {
        Ok(id) => id,
        Err(error) => {
            eprintln!("{} exhaust --replay: {error}", scenario.command());
            return ExitCode::from(2);
        }
    };
    let (violation, trace, misfit) = replay(scenario, &id, args.pages_max);
    for line in &trace {
        if !args.no_disk_ops || !is_disk_op(line) {
            println!("{line}");
        }
    }
    if misfit {
        println!("warning: the choices do not fit this run (made by another build?)");
    }
    match violation {
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

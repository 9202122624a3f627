//! `durlog-bench`: durlog's durable-append throughput against the raw
//! fdatasync floor and peer engines, plus durlog's reads, Open and memory,
//! measured side by side in one run on a real disk (never tmpfs).
//!
//! `durlog-bench all --plot` runs everything and writes
//! bench/results/{results.json,summary.md,appends.svg}; `--quick` runs a
//! few-second smoke version (results go to bench/results/quick/). See
//! BENCHMARKS.md at the repository root for the figures and how to read them.

mod engine;
mod filter;
mod follow;
mod guard;
mod harness;
mod plot;
mod report;
mod retention;
mod roll;
mod scale;
mod systems;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

use report::{Failure, OpenResult, Report, Settings, cell};
use systems::{FLOOR_GROWING, FLOOR_PREALLOCATED};

#[derive(Parser)]
#[command(
    name = "durlog-bench",
    about = "Benchmarks of durlog against the fdatasync floor and peer engines"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    options: Options,
}

#[derive(Subcommand, Clone)]
enum Cmd {
    /// Everything below, in one run.
    All,
    /// Durable appends: the raw floor, durlog and the peers, at every
    /// writer count and event size.
    Append,
    /// durlog appending on the simulated disk (no real I/O).
    Sim,
    /// Random single-event reads from a generated log.
    Read,
    /// Open (recovery scan) of a generated log from page cache.
    Open,
    /// Resident memory per stored event of an open log.
    Memory,
    /// Redraw results/appends.svg from results/results.json.
    Plot,
    /// Latency of the appends that roll a segment, with the next segment
    /// created at the roll and prepared ahead (results/roll.md). Event size
    /// from --sizes (first; default 4096), rounds from --rounds.
    Roll {
        /// Rolls per round.
        #[arg(long, default_value_t = 8)]
        rolls: u64,
    },
    /// Reading the whole log and following it: catch-up read_all next to
    /// Open, live delivery latency, and what subscribers cost the writers
    /// (results/follow.md). Log size from --open-bytes, sizes from
    /// --sizes, rounds from --rounds, seconds per live run from --duration.
    Follow,
    /// What a filter saves: read_all of a generated log of events of eight
    /// types next to read_all_filtered by one type (an eighth of the
    /// events) and by one stream prefix (an eighth of the records), rounds
    /// alternating, page cache warm (results/filter.md). Log size from
    /// --open-bytes (1 GiB), rounds from --rounds.
    Filter,
    /// Retention and truncation: appends/s with a retention that purges
    /// continuously next to none, and one purge of 1,000 segments
    /// (results/retention.md). Rounds from --rounds, seconds per run from
    /// --duration.
    Retention,
    /// Open time and resident memory against log size: logs of each of
    /// --counts one-event records (event size from --sizes, first; default
    /// 100), opened cold and warm in fresh processes, reading every record
    /// and trusting index files, rounds alternating (results/scale.md).
    /// About 17 GB of disk at 10^8 events of 100 B.
    Scale {
        /// Event counts, one log each.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1000000,10000000,100000000"
        )]
        counts: Vec<u64>,
    },
    /// Internal: one open of a scale log in a fresh process.
    #[command(hide = true)]
    ScaleChild {
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        events: u64,
        /// Open trusting the log's index files.
        #[arg(long)]
        trust: bool,
        #[arg(long)]
        cold: bool,
    },
    /// Internal: measure memory in a fresh process.
    #[command(hide = true)]
    MemoryChild {
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        events: u64,
    },
}

#[derive(Args, Clone)]
struct Options {
    /// Where data goes (a fresh directory is made inside it); default
    /// bench/bench-data/ in the repository. Refused if on tmpfs.
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// A few seconds in all: CI smoke run (results go to results/quick/).
    #[arg(long, global = true)]
    quick: bool,
    /// Writer thread counts [default 1,2,4,8,16,32,64].
    #[arg(long, global = true, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Event data sizes in bytes [default 100,4096].
    #[arg(long, global = true, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Systems to drive [default durlog,okaywal,raft-engine,fjall,redb].
    #[arg(long, global = true, value_delimiter = ',')]
    systems: Option<Vec<String>>,
    /// Measured seconds per run [default 1.0].
    #[arg(long, global = true)]
    duration: Option<f64>,
    /// Warm-up seconds per run [default 0.25].
    #[arg(long, global = true)]
    warmup: Option<f64>,
    /// Rounds per cell; the tables give the median [default 3].
    #[arg(long, global = true)]
    rounds: Option<usize>,
    /// Events in the log that reads sample [default 1000000].
    #[arg(long, global = true)]
    read_events: Option<u64>,
    /// Bytes of the log that Open scans [default 1 GiB].
    #[arg(long, global = true)]
    open_bytes: Option<u64>,
    /// One-event records in the memory measurement [default 10000000].
    #[arg(long, global = true)]
    memory_events: Option<u64>,
    /// Also draw results/appends.svg.
    #[arg(long, global = true)]
    plot: bool,
    /// Where results go [default bench/results, or bench/results/quick].
    #[arg(long, global = true)]
    results: Option<PathBuf>,
    /// What to call the durlog under test in the report, instead of `git
    /// rev-parse --short HEAD` (for a build from an exported snapshot).
    #[arg(long, global = true)]
    label: Option<String>,
    /// Keep the data directory afterwards.
    #[arg(long, global = true)]
    keep: bool,
}

const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

fn settings(options: &Options) -> Settings {
    let quick = options.quick;
    Settings {
        threads: options.threads.clone().unwrap_or(if quick {
            vec![1, 8]
        } else {
            vec![1, 2, 4, 8, 16, 32, 64]
        }),
        sizes: options
            .sizes
            .clone()
            .unwrap_or(if quick { vec![100] } else { vec![100, 4096] }),
        systems: options
            .systems
            .clone()
            .unwrap_or_else(|| systems::ALL.iter().map(|s| s.to_string()).collect()),
        duration_s: options.duration.unwrap_or(if quick { 0.15 } else { 1.0 }),
        warmup_s: options.warmup.unwrap_or(if quick { 0.05 } else { 0.25 }),
        rounds: options.rounds.unwrap_or(if quick { 1 } else { 3 }).max(1),
        read_events: options
            .read_events
            .unwrap_or(if quick { 20_000 } else { 1_000_000 }),
        open_bytes: options
            .open_bytes
            .unwrap_or(if quick { 32 << 20 } else { 1 << 30 }),
        memory_events: options
            .memory_events
            .unwrap_or(if quick { 200_000 } else { 10_000_000 }),
        quick,
    }
}

fn main() {
    if let Err(error) = run(Cli::parse()) {
        eprintln!("durlog-bench: {error:#}");
        std::process::exit(2);
    }
}

fn run(cli: Cli) -> Result<()> {
    let options = cli.options;
    let results_dir = options.results.clone().unwrap_or_else(|| {
        let base = Path::new(CRATE_DIR).join("results");
        if options.quick {
            base.join("quick")
        } else {
            base
        }
    });
    match cli.command {
        Cmd::MemoryChild { log, events } => {
            let memory = engine::memory_child(&log, engine::memory_shape(events))?;
            println!("{}", serde_json::to_string(&memory)?);
            return Ok(());
        }
        Cmd::ScaleChild {
            log,
            events,
            cold,
            trust,
        } => {
            let size = options.sizes.as_ref().and_then(|sizes| sizes.first());
            let shape = scale::shape(events, size.copied().unwrap_or(100));
            let opened = scale::child(&log, shape, scale::Open { cold, trust })?;
            println!("{}", serde_json::to_string(&opened)?);
            return Ok(());
        }
        Cmd::Plot => {
            let path = results_dir.join("results.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let report: Report = serde_json::from_str(&text)?;
            plot::draw(&report, &results_dir.join("appends.svg"))?;
            println!("wrote {}", results_dir.join("appends.svg").display());
            return Ok(());
        }
        _ => {}
    }

    let base = options
        .dir
        .clone()
        .unwrap_or_else(|| Path::new(CRATE_DIR).join("bench-data"));
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    guard::refuse_memory_fs(&base)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let data = base.join(format!("run-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&data)?;
    guard::refuse_memory_fs(&data)?;
    if let Cmd::Roll { rolls } = cli.command {
        let size = options
            .sizes
            .as_ref()
            .and_then(|sizes| sizes.first().copied());
        let rounds = options.rounds.unwrap_or(3).max(1);
        let table = roll::run(&data, size.unwrap_or(4096), rounds, rolls);
        return table_section(table, &data, options.keep, &results_dir.join("roll.md"));
    }

    if let Cmd::Scale { counts } = &cli.command {
        let size = options.sizes.as_ref().and_then(|sizes| sizes.first());
        let rounds = options.rounds.unwrap_or(3).max(1);
        let table = scale::run(
            &data,
            counts,
            size.copied().unwrap_or(100),
            rounds,
            options.keep,
        );
        return table_section(table, &data, options.keep, &results_dir.join("scale.md"));
    }

    if let Cmd::Retention = cli.command {
        let settings = settings(&options);
        let table = retention::run(&data, settings.rounds, settings.duration_s.max(1.0));
        return table_section(
            table,
            &data,
            options.keep,
            &results_dir.join("retention.md"),
        );
    }

    if let Cmd::Filter = cli.command {
        let settings = settings(&options);
        let table = filter::run(&data.join("filter"), settings.open_bytes, settings.rounds);
        return table_section(table, &data, options.keep, &results_dir.join("filter.md"));
    }

    if let Cmd::Follow = cli.command {
        let settings = settings(&options);
        let table = follow::run(
            &data,
            settings.open_bytes,
            &settings.sizes,
            settings.rounds,
            settings.duration_s.max(1.0),
        );
        return table_section(table, &data, options.keep, &results_dir.join("follow.md"));
    }

    let started = Instant::now();
    let repo = Path::new(CRATE_DIR).parent().unwrap_or(Path::new("."));
    let mut machine = guard::describe(&data, repo);
    if let Some(label) = &options.label {
        machine.commit = label.clone();
    }
    let mut report = Report {
        machine,
        settings: settings(&options),
        ..Report::default()
    };
    eprintln!(
        "durlog-bench: data in {} ({})",
        data.display(),
        report.machine.filesystem
    );
    let cmd = cli.command.clone();
    let all = matches!(cmd, Cmd::All);
    let outcome = (|| -> Result<()> {
        if all || matches!(cmd, Cmd::Append) {
            append_section(&mut report, &data)?;
        }
        if all || matches!(cmd, Cmd::Sim) {
            sim_section(&mut report)?;
        }
        if all || matches!(cmd, Cmd::Read) {
            read_section(&mut report, &data)?;
        }
        if all || matches!(cmd, Cmd::Open) {
            open_section(&mut report, &data)?;
        }
        if all || matches!(cmd, Cmd::Memory) {
            memory_section(&mut report, &data)?;
        }
        Ok(())
    })();
    if !options.keep {
        let _ = std::fs::remove_dir_all(&data);
    }
    outcome?;
    report.total_seconds = started.elapsed().as_secs_f64();
    report.machine.loadavg_end = guard::loadavg();

    let markdown = report.markdown();
    println!("{markdown}");
    println!("total {:.0} s", report.total_seconds);
    std::fs::create_dir_all(&results_dir)?;
    let name = if all {
        "results".to_string()
    } else {
        format!("results-{}", command_name(&cmd))
    };
    std::fs::write(
        results_dir.join(format!("{name}.json")),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(
        results_dir.join(format!("{}.md", name.replace("results", "summary"))),
        &markdown,
    )?;
    if options.plot && !report.appends.is_empty() {
        plot::draw(&report, &results_dir.join("appends.svg"))?;
        eprintln!(
            "durlog-bench: wrote {}",
            results_dir.join("appends.svg").display()
        );
    }
    Ok(())
}

/// The end of a section that makes one table (roll, scale, retention,
/// filter, follow): its data removed unless `keep`, the table printed and
/// written to `path`.
fn table_section(table: Result<String>, data: &Path, keep: bool, path: &Path) -> Result<()> {
    if !keep {
        let _ = std::fs::remove_dir_all(data);
    }
    let table = table?;
    println!("{table}");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, &table)?;
    Ok(())
}

fn command_name(cmd: &Cmd) -> &'static str {
    match cmd {
        Cmd::All => "all",
        Cmd::Append => "append",
        Cmd::Sim => "sim",
        Cmd::Read => "read",
        Cmd::Open => "open",
        Cmd::Memory => "memory",
        Cmd::Plot => "plot",
        Cmd::Roll { .. } => "roll",
        Cmd::Follow => "follow",
        Cmd::Filter => "filter",
        Cmd::Retention => "retention",
        Cmd::MemoryChild { .. } => "memory-child",
        Cmd::Scale { .. } => "scale",
        Cmd::ScaleChild { .. } => "scale-child",
    }
}

fn durations(settings: &Settings) -> (Duration, Duration) {
    (
        Duration::from_secs_f64(settings.warmup_s),
        Duration::from_secs_f64(settings.duration_s),
    )
}

/// Rounds outermost, so that every cell of a round sees the same disk
/// weather; within a round, sizes, then writer counts, then systems.
fn append_section(report: &mut Report, data: &Path) -> Result<()> {
    let settings = report.settings.clone();
    let (warmup, duration) = durations(&settings);
    let mut live: Vec<String> = settings.systems.clone();
    let mut run_id = 0u64;
    for round in 0..settings.rounds {
        for &size in &settings.sizes {
            for &threads in &settings.threads {
                // The disk's speed drifts with the load of the shared
                // machine, so the growing-file floor is measured again
                // before every writer count (its figure is the median of
                // all these runs), the preallocated one once per round.
                let floors: &[&str] = if threads == settings.threads[0] {
                    &[FLOOR_GROWING, FLOOR_PREALLOCATED]
                } else {
                    &[FLOOR_GROWING]
                };
                for &floor in floors {
                    run_id += 1;
                    let dir = data.join(format!("r{run_id}"));
                    let sample = one_run(floor, &dir, 1, size, warmup, duration)?;
                    progress(round, floor, size, 1, &sample);
                    cell(&mut report.appends, floor, size, 1)
                        .rounds
                        .push(sample);
                }
                // Rotate the order each round, so that no system always runs
                // first after the floor, or last.
                let mut order = live.clone();
                if !order.is_empty() {
                    let turn = round % order.len();
                    order.rotate_left(turn);
                }
                for system in order {
                    run_id += 1;
                    let dir = data.join(format!("r{run_id}-{system}"));
                    match one_run(&system, &dir, threads, size, warmup, duration) {
                        Ok(sample) => {
                            progress(round, &system, size, threads, &sample);
                            cell(&mut report.appends, &system, size, threads)
                                .rounds
                                .push(sample);
                        }
                        Err(error) if system != "durlog" => {
                            // A peer that fails is reported and left out of
                            // the rest of the run; durlog failing is fatal.
                            eprintln!(
                                "durlog-bench: {system} failed, dropped from this run: {error:#}"
                            );
                            report.failures.push(Failure {
                                system: system.clone(),
                                size,
                                threads,
                                error: format!("{error:#}"),
                            });
                            live.retain(|s| *s != system);
                        }
                        Err(error) => {
                            return Err(
                                error.context(format!("durlog, {threads} writers, {size} B"))
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn one_run(
    system: &str,
    dir: &Path,
    threads: usize,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<harness::Sample> {
    let outcome = (|| {
        let opened = systems::open(system, dir)?;
        let mut sample = harness::run(opened.as_system(), threads, size, warmup, duration)?;
        opened.annotate(&mut sample);
        drop(opened);
        Ok(sample)
    })();
    let _ = std::fs::remove_dir_all(dir);
    outcome
}

fn progress(round: usize, system: &str, size: usize, threads: usize, sample: &harness::Sample) {
    eprintln!(
        "round {} {:>22} {:>5} B {:>2} writers: {:>10.0}/s  p50 {:>7.0} us  p99 {:>7.0} us{}",
        round + 1,
        system,
        size,
        threads,
        sample.ops_per_s,
        sample.p50_us,
        sample.p99_us,
        sample
            .appends_per_group
            .map_or(String::new(), |g| format!("  {g:.1}/group")),
    );
}

fn sim_section(report: &mut Report) -> Result<()> {
    let settings = report.settings.clone();
    let (warmup, duration) = durations(&settings);
    // On the simulated disk nothing waits for I/O: a short run suffices,
    // and keeps the in-memory disk small.
    let duration = duration.min(Duration::from_millis(500));
    for round in 0..settings.rounds {
        for &size in &settings.sizes {
            let sample =
                engine::sim_round(1, size, warmup.min(Duration::from_millis(100)), duration)?;
            progress(round, "durlog on SimVfs", size, 1, &sample);
            cell(&mut report.sim, "durlog on SimVfs", size, 1)
                .rounds
                .push(sample);
        }
    }
    Ok(())
}

fn read_section(report: &mut Report, data: &Path) -> Result<()> {
    let settings = report.settings.clone();
    let (warmup, duration) = durations(&settings);
    let shape = engine::Shape {
        events: settings.read_events,
        streams: (settings.read_events / 1000).clamp(1, 1000),
        data_bytes: 100,
        segment_bytes: durlog::DEFAULT_SEGMENT_BYTES,
    };
    let dir = data.join("read");
    let reader = engine::RandomRead::prepare(&dir, shape)?;
    let mut thread_counts = vec![
        1,
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    ];
    thread_counts.dedup();
    for round in 0..settings.rounds {
        for &threads in &thread_counts {
            let sample = harness::run(&reader, threads, 0, warmup, duration)?;
            progress(round, "durlog random read", 100, threads, &sample);
            cell(&mut report.read, "durlog random read", 100, threads)
                .rounds
                .push(sample);
        }
    }
    drop(reader);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn open_section(report: &mut Report, data: &Path) -> Result<()> {
    let settings = report.settings.clone();
    for &size in &settings.sizes {
        let dir = data.join(format!("open-{size}"));
        let rounds = engine::open_scan(&dir, settings.open_bytes, size, settings.rounds)?;
        for round in &rounds {
            eprintln!(
                "open {:>5} B events: {} records, {} bytes in {:.3} s = {:.2} GB/s",
                size,
                round.records,
                round.record_bytes,
                round.seconds,
                round.record_bytes as f64 / round.seconds / 1e9
            );
        }
        report.open.push(OpenResult {
            data_bytes: size,
            rounds,
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn memory_section(report: &mut Report, data: &Path) -> Result<()> {
    let events = report.settings.memory_events;
    let dir = data.join("memory");
    let bytes = engine::generate(&dir, engine::memory_shape(events))?;
    eprintln!("memory: wrote {events} records, {bytes} bytes; opening in a fresh process");
    let output = Command::new(std::env::current_exe()?)
        .arg("memory-child")
        .arg("--log")
        .arg(&dir)
        .arg("--events")
        .arg(events.to_string())
        .output()?;
    let _ = std::fs::remove_dir_all(&dir);
    if !output.status.success() {
        bail!(
            "memory-child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let memory: engine::Memory =
        serde_json::from_slice(&output.stdout).context("memory-child output")?;
    eprintln!(
        "memory: {:.1} bytes/event after open, {:.1} after malloc_trim",
        memory.bytes_per_event(memory.rss_after_open_kib),
        memory.bytes_per_event(memory.rss_after_trim_kib)
    );
    report.memory = Some(memory);
    Ok(())
}

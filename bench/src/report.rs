//! Everything one run measured, as JSON (results/results.json) and as the
//! Markdown tables BENCHMARKS.md quotes (results/summary.md).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::engine::{Memory, OpenRound};
use crate::guard::Machine;
use crate::harness::{Sample, median_spread};
use crate::systems::{FLOOR_GROWING, FLOOR_PREALLOCATED};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Settings {
    pub threads: Vec<usize>,
    pub sizes: Vec<usize>,
    pub systems: Vec<String>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rounds: usize,
    pub read_events: u64,
    pub open_bytes: u64,
    pub memory_events: u64,
    pub quick: bool,
}

/// The rounds of one (system, size, threads) cell.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Series {
    pub system: String,
    pub size: usize,
    pub threads: usize,
    pub rounds: Vec<Sample>,
}

impl Series {
    pub fn ops(&self) -> (f64, f64) {
        median_spread(&self.rounds.iter().map(|s| s.ops_per_s).collect::<Vec<_>>())
    }
    pub fn median_ops(&self) -> f64 {
        self.ops().0
    }
    fn median_of(&self, field: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.rounds.iter().filter_map(field).collect();
        (!values.is_empty()).then(|| median_spread(&values).0)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failure {
    pub system: String,
    pub size: usize,
    pub threads: usize,
    pub error: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpenResult {
    pub data_bytes: usize,
    pub rounds: Vec<OpenRound>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub machine: Machine,
    pub settings: Settings,
    /// The raw floors (1 thread) and every system at every writer count.
    pub appends: Vec<Series>,
    pub failures: Vec<Failure>,
    /// durlog on the simulated disk (no real I/O).
    pub sim: Vec<Series>,
    /// Random single-event reads (size = event data bytes).
    pub read: Vec<Series>,
    pub open: Vec<OpenResult>,
    pub memory: Option<Memory>,
    pub total_seconds: f64,
}

pub fn cell<'a>(
    list: &'a mut Vec<Series>,
    system: &str,
    size: usize,
    threads: usize,
) -> &'a mut Series {
    let at = list
        .iter()
        .position(|s| s.system == system && s.size == size && s.threads == threads);
    let at = at.unwrap_or_else(|| {
        list.push(Series {
            system: system.to_string(),
            size,
            threads,
            rounds: Vec::new(),
        });
        list.len() - 1
    });
    &mut list[at]
}

impl Report {
    pub fn find(&self, system: &str, size: usize, threads: usize) -> Option<&Series> {
        self.appends.iter().find(|s| {
            s.system == system && s.size == size && s.threads == threads && !s.rounds.is_empty()
        })
    }

    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = self.appends.iter().map(|s| s.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// Systems other than the floors, in the order first measured.
    pub fn systems(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for series in &self.appends {
            let floor = series.system == FLOOR_GROWING || series.system == FLOOR_PREALLOCATED;
            if !floor && !out.contains(&series.system) {
                out.push(series.system.clone());
            }
        }
        out
    }

    pub fn thread_counts(&self) -> Vec<usize> {
        let mut threads: Vec<usize> = self
            .appends
            .iter()
            .filter(|s| s.system != FLOOR_GROWING && s.system != FLOOR_PREALLOCATED)
            .map(|s| s.threads)
            .collect();
        threads.sort_unstable();
        threads.dedup();
        threads
    }

    fn floor(&self, size: usize) -> Option<f64> {
        self.find(FLOOR_GROWING, size, 1).map(Series::median_ops)
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let s = &self.settings;
        let _ = writeln!(
            out,
            "Run {} on {} cores ({}), {}, {} RAM; filesystem `{}`; durlog at {}.",
            m.date_utc, m.nproc, m.cpu, m.kernel, m.memory, m.filesystem, m.commit
        );
        let _ = writeln!(
            out,
            "Load average at start: `{}`; at end: `{}` (2 cores, shared machine).",
            m.loadavg_start, m.loadavg_end
        );
        let _ = writeln!(
            out,
            "Each cell: median of {} rounds of {:.2} s (after {:.2} s warm-up); `spread` = (max - min) / median over the rounds. Ratios are to the raw growing-file floor of the same event size, measured in the same run: the median of all its runs, one before each writer count of each round.\n",
            s.rounds, s.duration_s, s.warmup_s
        );
        self.floor_table(&mut out);
        for size in self.sizes() {
            self.throughput_table(&mut out, size);
            self.latency_table(&mut out, size);
        }
        self.group_table(&mut out);
        self.engine_tables(&mut out);
        if !self.failures.is_empty() {
            let _ = writeln!(out, "### Failures\n");
            for failure in &self.failures {
                let _ = writeln!(
                    out,
                    "- {} ({}, {} writers): {}",
                    failure.system,
                    size_label(failure.size),
                    failure.threads,
                    failure.error
                );
            }
            out.push('\n');
        }
        out
    }

    fn floor_table(&self, out: &mut String) {
        let _ = writeln!(out, "### Raw floor: 1 thread, write + fdatasync\n");
        let _ = writeln!(
            out,
            "| file | event | ops/s | spread | p50 us | p99 us | runs |\n|---|---|---|---|---|---|---|"
        );
        for size in self.sizes() {
            for floor in [FLOOR_GROWING, FLOOR_PREALLOCATED] {
                if let Some(series) = self.find(floor, size, 1) {
                    let (median, spread) = series.ops();
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {:.0}% | {:.0} | {:.0} | {} |",
                        floor.trim_start_matches("raw "),
                        size_label(size),
                        thousands(median),
                        spread * 100.0,
                        series.median_of(|s| Some(s.p50_us)).unwrap_or(f64::NAN),
                        series.median_of(|s| Some(s.p99_us)).unwrap_or(f64::NAN),
                        series.rounds.len(),
                    );
                }
            }
        }
        out.push('\n');
    }

    fn throughput_table(&self, out: &mut String, size: usize) {
        let systems = self.systems();
        let floor = self.floor(size);
        let _ = writeln!(
            out,
            "### Durable appends/s, {} events (ratio to the floor; spread)\n",
            size_label(size)
        );
        let _ = writeln!(out, "| writers | {} |", systems.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(systems.len()));
        for threads in self.thread_counts() {
            let mut row = format!("| {threads} |");
            for system in &systems {
                match self.find(system, size, threads) {
                    Some(series) => {
                        let (median, spread) = series.ops();
                        let ratio =
                            floor.map_or(String::new(), |f| format!(" ({:.2}x)", median / f));
                        let _ = write!(
                            row,
                            " {}{ratio} {:.0}% |",
                            thousands(median),
                            spread * 100.0
                        );
                    }
                    None => row.push_str(" - |"),
                }
            }
            let _ = writeln!(out, "{row}");
        }
        out.push('\n');
    }

    fn latency_table(&self, out: &mut String, size: usize) {
        let systems = self.systems();
        let _ = writeln!(
            out,
            "### Append latency p50 / p99 (us), {} events\n",
            size_label(size)
        );
        let _ = writeln!(out, "| writers | {} |", systems.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(systems.len()));
        for threads in self.thread_counts() {
            let mut row = format!("| {threads} |");
            for system in &systems {
                match self.find(system, size, threads) {
                    Some(series) => {
                        let p50 = series.median_of(|s| Some(s.p50_us)).unwrap_or(f64::NAN);
                        let p99 = series.median_of(|s| Some(s.p99_us)).unwrap_or(f64::NAN);
                        let _ = write!(row, " {p50:.0} / {p99:.0} |");
                    }
                    None => row.push_str(" - |"),
                }
            }
            let _ = writeln!(out, "{row}");
        }
        out.push('\n');
    }

    fn group_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "### durlog group commit (from `Log::stats()`, whole run incl. warm-up)\n"
        );
        let _ = writeln!(
            out,
            "| event | writers | appends/s | appends per group | sync p50 us (pow-2 bucket) |\n|---|---|---|---|---|"
        );
        for size in self.sizes() {
            for threads in self.thread_counts() {
                if let Some(series) = self.find("durlog", size, threads) {
                    let _ = writeln!(
                        out,
                        "| {} | {threads} | {} | {:.1} | {:.0} |",
                        size_label(size),
                        thousands(series.median_ops()),
                        series
                            .median_of(|s| s.appends_per_group)
                            .unwrap_or(f64::NAN),
                        series.median_of(|s| s.sync_p50_us).unwrap_or(f64::NAN),
                    );
                }
            }
        }
        out.push('\n');
    }

    fn engine_tables(&self, out: &mut String) {
        if !self.sim.is_empty() {
            let _ = writeln!(
                out,
                "### durlog on SimVfs (in memory, sync is a copy): appends/s\n"
            );
            let _ = writeln!(
                out,
                "| event | writers | appends/s | spread | p50 us | p99 us |\n|---|---|---|---|---|---|"
            );
            for series in &self.sim {
                self.plain_row(out, series);
            }
            out.push('\n');
        }
        if !self.read.is_empty() {
            let _ = writeln!(
                out,
                "### Random single-event read, log of {} events (page cache)\n",
                thousands(self.settings.read_events as f64)
            );
            let _ = writeln!(
                out,
                "| event | reader threads | reads/s | spread | p50 us | p99 us |\n|---|---|---|---|---|---|"
            );
            for series in &self.read {
                self.plain_row(out, series);
            }
            out.push('\n');
        }
        if !self.open.is_empty() {
            let _ = writeln!(out, "### Open (recovery scan) from page cache\n");
            let _ = writeln!(
                out,
                "| event | log bytes | records | segments | seconds | GB/s | spread |\n|---|---|---|---|---|---|---|"
            );
            for open in &self.open {
                let Some(first) = open.rounds.first() else {
                    continue;
                };
                let seconds: Vec<f64> = open.rounds.iter().map(|r| r.seconds).collect();
                let (median, spread) = median_spread(&seconds);
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.3} | {:.2} | {:.0}% |",
                    size_label(open.data_bytes),
                    thousands(first.record_bytes as f64),
                    thousands(first.records as f64),
                    first.segments,
                    median,
                    first.record_bytes as f64 / median / 1e9,
                    spread * 100.0
                );
            }
            out.push('\n');
        }
        if let Some(memory) = &self.memory {
            let shape = memory.shape.unwrap_or(crate::engine::memory_shape(0));
            let _ = writeln!(out, "### Resident memory of an open log (VmRSS)\n");
            let _ = writeln!(
                out,
                "{} one-event records, {} streams, {} B of data each; open took {:.2} s.\n",
                thousands(shape.events as f64),
                shape.streams,
                shape.data_bytes,
                memory.open_seconds
            );
            let _ = writeln!(
                out,
                "| measured | RSS KiB | bytes/event beyond the empty process |\n|---|---|---|"
            );
            let _ = writeln!(
                out,
                "| before open | {} | - |",
                thousands(memory.rss_before_kib as f64)
            );
            let _ = writeln!(
                out,
                "| after open | {} | {:.1} |",
                thousands(memory.rss_after_open_kib as f64),
                memory.bytes_per_event(memory.rss_after_open_kib)
            );
            let _ = writeln!(
                out,
                "| after open + malloc_trim(0) | {} | {:.1} |\n",
                thousands(memory.rss_after_trim_kib as f64),
                memory.bytes_per_event(memory.rss_after_trim_kib)
            );
        }
    }

    fn plain_row(&self, out: &mut String, series: &Series) {
        let (median, spread) = series.ops();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0}% | {:.1} | {:.1} |",
            size_label(series.size),
            series.threads,
            thousands(median),
            spread * 100.0,
            series.median_of(|s| Some(s.p50_us)).unwrap_or(f64::NAN),
            series.median_of(|s| Some(s.p99_us)).unwrap_or(f64::NAN),
        );
    }
}

/// An event size as the tables and the plot label it.
pub fn size_label(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// 12345.6 -> "12,346"; large values shortened to "1.2M".
pub fn thousands(value: f64) -> String {
    if value >= 10_000_000.0 {
        return format!("{:.1}M", value / 1e6);
    }
    let whole = value.round() as u64;
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

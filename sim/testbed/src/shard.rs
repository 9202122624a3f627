//! Shard reports: one campaign split over machines, put back together.
//!
//! `run --seeds A..B --shard I/N --report FILE` writes a [`ShardReport`]
//! (JSON): the range, the shard, the options, the scenario's tally, the
//! marks, the violations, and the trace digest of each seed the shard ran.
//! `merge FILE...` reads the reports of one range and [`merge`] rebuilds
//! the [`Summary`] one machine running the whole range computes: tallies
//! and marks add, violations sort by seed, and the digest is folded again
//! from the seeds' digests in seed order ([`fold_digests`]), so it is the
//! same number, bit for bit, as an unsplit run's. (The fold mixes at every
//! step and is not associative: per-shard digests could not be combined.
//! Keeping each seed's digest, 16 hex digits a seed, also lets two
//! campaigns be compared seed by seed.)
//!
//! A merge accepts only reports that make up one range exactly, and
//! refuses with one line naming the files: another format, scenario or
//! version, other options, another range or shard count, two reports of
//! one shard (overlap), a shard missing (gap), a shard `--fail-fast`
//! stopped early, or a report whose counts do not add up.

use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::campaign::Summary;
use crate::options::{self, flags_text};
use crate::seeds::{fold_digests, shard_seeds};
use crate::{Marks, Scenario, Tally, Violation};

/// The `format` field of every report this version writes and reads.
pub const REPORT_FORMAT: &str = "durlog-testbed shard report 2";

/// What `run --report FILE` writes: everything the summary of one shard
/// prints, and what a merge needs to print the whole range's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardReport<T> {
    /// [`REPORT_FORMAT`].
    pub format: String,
    /// The scenario's command and version.
    pub command: String,
    pub version: String,
    /// The range the campaign splits (`--seeds`).
    pub seeds: SeedRange,
    /// Which part of it this report holds (`--shard`).
    pub shard: ShardIndex,
    /// The scenario's options, as its `Options` type serializes them.
    pub options: serde_json::Value,
    /// The same options as flags, for people.
    pub flags: String,
    /// Every seed of the shard ran (`--fail-fast` may stop a shard early;
    /// such a report is refused by a merge).
    pub complete: bool,
    pub seeds_run: u64,
    pub tally: T,
    pub marks: Marks,
    /// The marks the scenario expects.
    pub expected_marks: Vec<String>,
    /// Failing seeds, in seed order.
    pub violations: Vec<ReportViolation>,
    /// This shard's own digest, as its summary printed it (16 hex digits).
    pub digest: String,
    /// The trace digest of every seed of the shard, 16 hex digits each:
    /// entry k is seed `seeds.start + shard.index + k * shard.count`.
    pub seed_digests: Vec<String>,
}

/// Seeds `start..end` (`end` excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRange {
    pub start: u64,
    pub end: u64,
}

/// Shard `index` of `count`: every `count`-th seed from the `index`-th.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardIndex {
    pub index: u64,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportViolation {
    pub seed: u64,
    pub step: usize,
    pub message: String,
    /// The command that replays the seed.
    pub reproduce: String,
}

impl<T: Tally> ShardReport<T> {
    /// The report of shard `shard` (index, count) of `range` of
    /// `scenario`: its `summary` and the digest of each of its seeds, in
    /// the order of [`shard_seeds`] (as [`crate::run_campaign`] returns
    /// them).
    pub fn new<S: Scenario<Tally = T>>(
        scenario: &S,
        version: &str,
        range: Range<u64>,
        shard: (u64, u64),
        summary: &Summary<T>,
        seed_digests: &[u64],
    ) -> ShardReport<T> {
        let expected = shard_seeds(range.clone(), shard.0, shard.1).count();
        assert_eq!(seed_digests.len(), expected, "one digest per seed");
        ShardReport {
            format: REPORT_FORMAT.to_string(),
            command: scenario.command().to_string(),
            version: version.to_string(),
            seeds: SeedRange {
                start: range.start,
                end: range.end,
            },
            shard: ShardIndex {
                index: shard.0,
                count: shard.1,
            },
            options: options::to_value(scenario.options()),
            flags: flags_text(scenario.options()),
            complete: summary.seeds == expected as u64,
            seeds_run: summary.seeds,
            tally: summary.tally.clone(),
            marks: summary.marks.clone(),
            expected_marks: summary.expected_marks.clone(),
            violations: summary
                .violations
                .iter()
                .map(|(seed, violation)| ReportViolation {
                    seed: *seed,
                    step: violation.step,
                    message: violation.message.clone(),
                    reproduce: scenario.repro(*seed),
                })
                .collect(),
            digest: hex(summary.digest),
            seed_digests: seed_digests.iter().map(|digest| hex(*digest)).collect(),
        }
    }

    /// The JSON text of the report (pretty, one seed digest a line, so two
    /// campaigns diff seed by seed).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a report serializes");
        text.push('\n');
        text
    }

    pub fn from_json(text: &str) -> Result<ShardReport<T>, String> {
        serde_json::from_str(text).map_err(|error| error.to_string())
    }

    /// The seed range.
    pub fn range(&self) -> Range<u64> {
        self.seeds.start..self.seeds.end
    }

    /// The summary, rebuilt (its `digest` is this shard's own).
    pub fn to_summary(&self) -> Result<Summary<T>, String> {
        Ok(Summary {
            seeds: self.seeds_run,
            tally: self.tally.clone(),
            marks: self.marks.clone(),
            expected_marks: self.expected_marks.clone(),
            digest: parse_hex(&self.digest)?,
            violations: self
                .violations
                .iter()
                .map(|violation| {
                    let found = Violation {
                        step: violation.step,
                        message: violation.message.clone(),
                    };
                    (violation.seed, found)
                })
                .collect(),
        })
    }

    /// The seeds' digests, parsed back.
    pub fn digests(&self) -> Result<Vec<u64>, String> {
        self.seed_digests
            .iter()
            .map(|text| parse_hex(text))
            .collect()
    }

    /// How the campaign ran, as one comparable line.
    fn campaign(&self) -> String {
        let flags = if self.flags.is_empty() {
            " (default options)"
        } else {
            &self.flags
        };
        format!(
            "{} {} --seeds {}..{}{flags}",
            self.command, self.version, self.seeds.start, self.seeds.end
        )
    }
}

fn hex(digest: u64) -> String {
    format!("{digest:016x}")
}

fn parse_hex(text: &str) -> Result<u64, String> {
    if text.len() != 16 {
        return Err(format!("digest {text:?} is not 16 hex digits"));
    }
    u64::from_str_radix(text, 16).map_err(|_| format!("digest {text:?} is not 16 hex digits"))
}

/// Reads a report; the error names the file.
pub fn read_report<T: Tally>(path: &Path) -> Result<ShardReport<T>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("{}: cannot read: {error}", path.display()))?;
    ShardReport::from_json(&text).map_err(|error| {
        format!(
            "{}: not a shard report of this scenario: {error}",
            path.display()
        )
    })
}

/// Writes a report whole or not at all: to a temporary file beside `path`,
/// synced, then renamed over it, so a merge waiting for reports to appear
/// (a batch scheduler's merge step) never reads half of one.
pub fn write_report<T: Tally>(path: &Path, report: &ShardReport<T>) -> io::Result<()> {
    let temporary = temporary_beside(path)?;
    let write = || -> io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(report.to_json().as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    };
    write().map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        io::Error::new(error.kind(), format!("{}: {error}", path.display()))
    })
}

/// Fails unless a report can be written to `path` (a file created beside
/// it, then removed): checked before a campaign, so a long run never ends
/// on a report it cannot write.
pub fn check_report_path(path: &Path) -> io::Result<()> {
    let temporary = temporary_beside(path)?;
    std::fs::File::create(&temporary)
        .and_then(|_| std::fs::remove_file(&temporary))
        .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))
}

fn temporary_beside(path: &Path) -> io::Result<std::path::PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a report needs a file name"))?;
    Ok(path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// A whole range, put back together from its shards.
#[derive(Clone, Debug)]
pub struct Merged<T> {
    pub range: Range<u64>,
    /// The scenario's options, as its `Options` type serializes them.
    pub options: serde_json::Value,
    /// How many shards the range was split into.
    pub shards: u64,
    /// What one run of the whole range computes, digest included.
    pub summary: Summary<T>,
}

/// Merges the reports (each with the name of its file, for messages) of
/// every shard of one range. Refuses, with one line naming the files,
/// reports that do not make up the range exactly once.
pub fn merge<T: Tally>(reports: &[(String, ShardReport<T>)]) -> Result<Merged<T>, String> {
    let Some((first_name, first)) = reports.first() else {
        return Err("no reports to merge".into());
    };
    for (name, report) in reports {
        check_alone(name, report)?;
        if report.campaign() != first.campaign() || report.options != first.options {
            return Err(format!(
                "{first_name} and {name} are not of one campaign: `{}` vs `{}`",
                first.campaign(),
                report.campaign()
            ));
        }
        if report.shard.count != first.shard.count {
            return Err(format!(
                "{first_name} and {name} split the range differently: shard {}/{} vs {}/{}",
                first.shard.index, first.shard.count, report.shard.index, report.shard.count
            ));
        }
    }
    let count = first.shard.count;
    let mut by_index: BTreeMap<u64, &(String, ShardReport<T>)> = BTreeMap::new();
    for entry in reports {
        if let Some((other, _)) = by_index.insert(entry.1.shard.index, entry) {
            return Err(format!(
                "{other} and {} overlap: both hold shard {}/{count} of seeds {}..{}",
                entry.0, entry.1.shard.index, first.seeds.start, first.seeds.end
            ));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|index| !by_index.contains_key(index))
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = reports.iter().map(|(name, _)| name.as_str()).collect();
        return Err(format!(
            "gap: no report holds shard {} of seeds {}..{} (given: {})",
            missing.join(", "),
            first.seeds.start,
            first.seeds.end,
            names.join(", ")
        ));
    }
    let range = first.range();
    let mut summary = Summary {
        expected_marks: first.expected_marks.clone(),
        ..Summary::default()
    };
    let mut digests = Vec::with_capacity(by_index.len());
    for (name, report) in by_index.values() {
        let part = report
            .to_summary()
            .map_err(|error| format!("{name}: {error}"))?;
        summary.add(part.seeds, &part.tally, &part.marks);
        summary.violations.extend(part.violations);
        digests.push(
            report
                .digests()
                .map_err(|error| format!("{name}: {error}"))?,
        );
    }
    summary.violations.sort_by_key(|(seed, _)| *seed);
    // Seed start + k lies in shard k % count, at position k / count.
    let width = range.end - range.start;
    summary.digest =
        fold_digests((0..width).map(|k| digests[(k % count) as usize][(k / count) as usize]));
    Ok(Merged {
        range,
        options: first.options.clone(),
        shards: count,
        summary,
    })
}

/// What one report must satisfy on its own.
fn check_alone<T: Tally>(name: &str, report: &ShardReport<T>) -> Result<(), String> {
    if report.format != REPORT_FORMAT {
        return Err(format!(
            "{name}: a report of format {:?}; this build reads {REPORT_FORMAT:?}",
            report.format
        ));
    }
    let ShardIndex { index, count } = report.shard;
    if count == 0 || index >= count || report.seeds.start > report.seeds.end {
        return Err(format!(
            "{name}: shard {index}/{count} of seeds {}..{} is not a shard of a range",
            report.seeds.start, report.seeds.end
        ));
    }
    let seeds = shard_seeds(report.range(), index, count).count() as u64;
    if !report.complete {
        return Err(format!(
            "{name}: incomplete: --fail-fast stopped shard {index}/{count} after {} of its {seeds} seeds; run it again without --fail-fast",
            report.seeds_run
        ));
    }
    if report.seeds_run != seeds || report.seed_digests.len() as u64 != seeds {
        return Err(format!(
            "{name}: shard {index}/{count} of seeds {}..{} has {seeds} seeds, but the report counts {} and holds {} digests",
            report.seeds.start,
            report.seeds.end,
            report.seeds_run,
            report.seed_digests.len()
        ));
    }
    let wrong = |error: String| format!("{name}: {error}");
    let digests = report.digests().map_err(wrong)?;
    parse_hex(&report.digest).map_err(wrong)?;
    if hex(fold_digests(digests.iter().copied())) != report.digest {
        return Err(format!(
            "{name}: the seeds' digests do not fold to the report's digest {}",
            report.digest
        ));
    }
    let outside = report.violations.iter().find(|violation| {
        let offset = violation.seed.wrapping_sub(report.seeds.start);
        !report.range().contains(&violation.seed) || offset % count != index
    });
    if let Some(violation) = outside {
        return Err(format!(
            "{name}: a violation of seed {}, which shard {index}/{count} does not run",
            violation.seed
        ));
    }
    Ok(())
}

/// The first line `run` prints: the command that ran.
pub fn run_header<S: Scenario>(scenario: &S, range: &Range<u64>, shard: (u64, u64)) -> String {
    format!(
        "{} run --seeds {}..{} --shard {}/{}{}",
        scenario.command(),
        range.start,
        range.end,
        shard.0,
        shard.1,
        flags_text(scenario.options())
    )
}

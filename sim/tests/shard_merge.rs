//! A campaign split over machines: `run --shard I/N --report FILE` on each,
//! then `merge`, prints exactly what one machine running the whole range
//! prints; a merge refuses reports that do not make up the range exactly
//! once, with one line naming the files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use durlog_sim::{DurlogSim, RunOptions, Tally, VERSION};
use durlog_testbed::shard::{ReportViolation, ShardReport, merge, read_report, write_report};
use durlog_testbed::{Progress, run_campaign, shard_seeds};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durlog-sim"))
        .args(args)
        .output()
        .expect("durlog-sim runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// Runs `seeds` with `options` as shard `index`/`count`, writing its report
/// into `dir`; returns the report's path.
fn shard_report(dir: &Path, seeds: &str, index: u64, count: u64, options: &[&str]) -> PathBuf {
    let path = dir.join(format!(
        "{seeds}-{index}-of-{count}{}.json",
        options.join("")
    ));
    let shard = format!("{index}/{count}");
    let report = path.to_str().unwrap();
    let mut args = vec![
        "run", "--seeds", seeds, "--shard", &shard, "--report", report,
    ];
    args.extend_from_slice(options);
    let output = sim(&args);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        text(&output.stderr)
    );
    path
}

/// A merge of `paths`; these campaigns are too short to reach every mark.
fn merge_files(paths: &[&PathBuf]) -> Output {
    let mut args = vec!["merge", "--allow-unreached-marks"];
    args.extend(paths.iter().map(|path| path.to_str().unwrap()));
    sim(&args)
}

/// Asserts a refused merge: exit 2, one line on stderr, naming `files`
/// and containing `what`; nothing on stdout.
fn assert_refused(output: &Output, what: &str, files: &[&PathBuf]) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(what), "{what:?} in {stderr}");
    for file in files {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(stderr.contains(name), "{name} named in {stderr}");
    }
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
}

/// The whole stdout (summary, digest, violations with their shrunk traces)
/// and the exit code of four merged shards equal one run's; `--canary`
/// puts failing seeds in the range so that the violations are compared
/// too, and the reports are given out of order.
#[test]
fn four_merged_shards_print_exactly_what_one_run_prints() {
    let dir = tempfile::tempdir().unwrap();
    let one = sim(&[
        "run",
        "--seeds",
        "0..200",
        "--canary",
        "--allow-unreached-marks",
    ]);
    let stdout = text(&one.stdout);
    assert!(stdout.contains("\nVIOLATION seed "), "{stdout}");
    assert!(stdout.contains("  shrunk trace:"), "{stdout}");
    let reports: Vec<PathBuf> = (0..4)
        .map(|index| shard_report(dir.path(), "0..200", index, 4, &["--canary"]))
        .collect();
    let merged = merge_files(&[&reports[2], &reports[0], &reports[3], &reports[1]]);
    assert_eq!(text(&merged.stdout), stdout);
    assert_eq!(merged.status.code(), one.status.code());
    assert_eq!(one.status.code(), Some(1));
}

/// The same with options and a range that does not divide evenly, and a
/// passing run.
#[test]
fn merged_shards_keep_the_options_and_an_uneven_split() {
    let dir = tempfile::tempdir().unwrap();
    let options = ["--faults", "torn-write,crash,failed-fsync", "--steps", "60"];
    let mut args = vec!["run", "--seeds", "7..80", "--allow-unreached-marks"];
    args.extend_from_slice(&options);
    let one = sim(&args);
    assert_eq!(one.status.code(), Some(0), "{}", text(&one.stdout));
    let reports: Vec<PathBuf> = (0..3)
        .map(|index| shard_report(dir.path(), "7..80", index, 3, &options))
        .collect();
    let merged = merge_files(&reports.iter().collect::<Vec<_>>());
    assert_eq!(merged.status.code(), Some(0));
    assert_eq!(text(&merged.stdout), text(&one.stdout));
    let stdout = text(&merged.stdout);
    assert!(
        stdout.starts_with(
            "durlog-sim run --seeds 7..80 --shard 0/1 --faults torn-write,crash,failed-fsync --steps 60\n"
        ),
        "{stdout}"
    );
}

/// Merge refuses overlaps, gaps, other options, other ranges, another
/// split and files that are not reports, each with one line naming them.
#[test]
fn merge_refuses_reports_that_do_not_make_up_one_range() {
    let dir = tempfile::tempdir().unwrap();
    let steps = ["--steps", "20"];
    let report = |seeds: &str, index: u64, count: u64, options: &[&str]| {
        shard_report(dir.path(), seeds, index, count, options)
    };
    let quarters: Vec<PathBuf> = (0..4)
        .map(|index| report("0..40", index, 4, &steps))
        .collect();
    let [r0, r1, r2, r3] = [&quarters[0], &quarters[1], &quarters[2], &quarters[3]];
    assert_eq!(merge_files(&[r0, r1, r2, r3]).status.code(), Some(0));

    assert_refused(&merge_files(&[r0, r1, r1, r2, r3]), "overlap", &[r1]);
    let half = report("0..40", 0, 2, &steps);
    assert_refused(
        &merge_files(&[r0, r1, &half, r3]),
        "split the range differently",
        &[r0, &half],
    );
    assert_refused(&merge_files(&[r0, r1, r3]), "gap", &[r0, r1, r3]);
    assert_refused(&merge_files(&[r0, r1, r3]), "shard 2/4", &[]);
    let other_steps = report("0..40", 2, 4, &["--steps", "21"]);
    assert_refused(
        &merge_files(&[r0, r1, &other_steps, r3]),
        "not of one campaign",
        &[r0, &other_steps],
    );
    let other_faults = report("0..40", 2, 4, &["--steps", "20", "--faults", "crash"]);
    assert_refused(
        &merge_files(&[r0, r1, &other_faults, r3]),
        "--faults crash",
        &[r0, &other_faults],
    );
    let other_range = report("0..44", 2, 4, &steps);
    assert_refused(
        &merge_files(&[r0, r1, &other_range, r3]),
        "--seeds 0..44",
        &[r0, &other_range],
    );
    let not_a_report = dir.path().join("summary.txt");
    std::fs::write(&not_a_report, "seeds 40\n").unwrap();
    assert_refused(
        &merge_files(&[r0, &not_a_report]),
        "not a shard report",
        &[&not_a_report],
    );
}

/// A report stopped by `--fail-fast`, or whose digests were changed, is
/// refused by the library's merge too; a report reads back as written.
#[test]
fn a_report_reads_back_exactly_and_a_changed_one_is_refused() {
    let scenario = DurlogSim {
        options: RunOptions {
            steps: Some(30),
            canary: true,
            ..RunOptions::default()
        },
    };
    let range = 0..300;
    let seeds: Vec<u64> = shard_seeds(range.clone(), 1, 2).collect();
    let (summary, digests) = run_campaign(&scenario, &seeds, 2, &Progress::default(), false);
    let report = ShardReport::new(
        &scenario,
        VERSION,
        range.clone(),
        (1, 2),
        &summary,
        &digests,
    );
    assert!(report.complete);
    assert!(summary.tally.canaries > 0 && summary.tally.counters.appends_acked > 0);
    let back = ShardReport::<Tally>::from_json(&report.to_json()).unwrap();
    assert_eq!(back, report);
    let rebuilt = back.to_summary().unwrap();
    assert_eq!(rebuilt.to_string(), summary.to_string());
    assert_eq!(rebuilt.violations, summary.violations);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.json");
    write_report(&path, &report).unwrap();
    assert_eq!(read_report::<Tally>(&path).unwrap(), report);

    let other: Vec<u64> = shard_seeds(range.clone(), 0, 2).collect();
    let (other_summary, other_digests) =
        run_campaign(&scenario, &other, 2, &Progress::default(), false);
    let first = ShardReport::new(
        &scenario,
        VERSION,
        range,
        (0, 2),
        &other_summary,
        &other_digests,
    );
    let named = |report: &ShardReport<Tally>| {
        vec![
            ("first.json".to_string(), first.clone()),
            ("second.json".to_string(), report.clone()),
        ]
    };
    assert!(merge(&named(&report)).is_ok());

    let mut stopped = report.clone();
    stopped.complete = false;
    let error = merge(&named(&stopped)).unwrap_err();
    assert!(error.contains("second.json: incomplete"), "{error}");

    let mut changed = report.clone();
    changed.seed_digests[3] = "0000000000000000".into();
    let error = merge(&named(&changed)).unwrap_err();
    assert!(error.contains("second.json"), "{error}");
    assert!(error.contains("do not fold"), "{error}");

    let mut foreign = report;
    foreign.violations.push(ReportViolation {
        seed: 2,
        step: 0,
        message: "made up".into(),
        reproduce: String::new(),
    });
    let error = merge(&named(&foreign)).unwrap_err();
    assert!(error.contains("seed 2"), "{error}");
}

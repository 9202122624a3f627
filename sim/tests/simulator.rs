//! The simulator's own guarantees: determinism, the canary, and the replay
//! of every seed that once found a bug.

use std::process::Command;

use durlog_sim::{DurlogSim, Plan, RunOptions, SeedResult, run_plan};
use durlog_testbed::{Progress, mix, run_campaign};

fn run_seed(seed: u64, options: &RunOptions) -> SeedResult {
    run_plan(&Plan::draw(seed, options), None, false)
}

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_durlog-sim"))
}

/// The same seed gives the same run: same trace digest, same counts.
#[test]
fn a_seed_replays_exactly() {
    let options = RunOptions::default();
    for seed in 0..40 {
        let (first, second) = (run_seed(seed, &options), run_seed(seed, &options));
        assert_eq!(first.digest, second.digest, "seed {seed}");
        assert_eq!(first.counters, second.counters, "seed {seed}");
        assert_eq!(first.faults, second.faults, "seed {seed}");
        assert!(
            first.violation.is_none(),
            "seed {seed}: {:?}",
            first.violation
        );
    }
    assert_ne!(run_seed(1, &options).digest, run_seed(2, &options).digest);
}

/// stdout depends only on the arguments, not on the number of threads.
#[test]
fn stdout_is_the_same_for_any_number_of_jobs() {
    let run = |jobs: &str| {
        let output = sim()
            .args(["run", "--seeds", "100..160", "--jobs", jobs])
            .arg("--allow-unreached-marks")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let one = run("1");
    assert_eq!(one, run("2"));
    assert_eq!(one, run("3"));
    assert!(one.contains("violations  0"), "{one}");
}

/// Shards split a range with no overlap and no gap.
#[test]
fn shards_cover_the_range_once() {
    let mut seen: Vec<u64> = (0..3)
        .flat_map(|index| durlog_testbed::shard_seeds(10..50, index, 3))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (10..50).collect::<Vec<_>>());
}

/// Every seed where `--canary` plants its failure is reported, and its
/// printed repro command reproduces it; the seeds around it still pass.
#[test]
fn every_canary_is_caught_and_reproducible() {
    let options = RunOptions {
        canary: true,
        ..RunOptions::default()
    };
    let canaries: Vec<u64> = (0..3000)
        .filter(|seed| mix(*seed).is_multiple_of(100))
        .take(10)
        .collect();
    assert_eq!(canaries.len(), 10, "about 1% of seeds carry a canary");
    let others: Vec<u64> = (0..40)
        .filter(|seed| !mix(*seed).is_multiple_of(100))
        .collect();
    let seeds: Vec<u64> = canaries.iter().chain(&others).copied().collect();
    let scenario = DurlogSim {
        options: options.clone(),
    };
    let (summary, _) = run_campaign(&scenario, &seeds, 2, &Progress::default(), false);
    // A canary needs an acknowledged event to disagree with; a run that is
    // refused as corrupt before its first acknowledgement has none.
    let planted: Vec<u64> = canaries
        .iter()
        .copied()
        .filter(|seed| run_seed(*seed, &options).canary_planted)
        .collect();
    assert!(
        planted.len() >= 8,
        "canaries planted: {planted:?} of {canaries:?}"
    );
    assert_eq!(summary.tally.canaries, planted.len() as u64);
    let mut failed: Vec<u64> = summary.violations.iter().map(|(seed, _)| *seed).collect();
    failed.sort_unstable();
    let mut want = planted.clone();
    want.sort_unstable();
    assert_eq!(failed, want, "exactly the seeds with a planted canary fail");
    for seed in planted.iter().take(2) {
        let output = sim()
            .args([
                "repro",
                "--seed",
                &seed.to_string(),
                "--canary",
                "--no-disk-ops",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains(&format!("VIOLATION seed {seed}")),
            "{stdout}"
        );
    }
    // The campaign's own report names the command and shrinks the run.
    let seed = planted[0];
    let output = sim()
        .args([
            "run",
            "--seeds",
            &format!("{seed}..{}", seed + 1),
            "--canary",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout.contains(&format!(
            "reproduce: durlog-sim repro --seed {seed} --canary"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("shrunk to"), "{stdout}");
    // And the shrunk command it prints fails the same way.
    let shrunk = stdout
        .lines()
        .find(|line| line.contains("shrunk to"))
        .unwrap();
    let command = shrunk.split(": durlog-sim ").nth(1).unwrap();
    let output = sim()
        .args(command.split_whitespace())
        .arg("--no-disk-ops")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// A reopen that reads back only what a power loss could have changed
/// (the default) reaches the same verdict, seed by seed, as one that reads
/// the whole log back at every reopen (`--full-checks`): no violation
/// where the engine is right, one in every seed where the canary made
/// the model disagree with the log. And it reads back less.
#[test]
fn sampled_read_backs_reach_the_full_verdicts() {
    let canaries = (0..3000)
        .filter(|seed| mix(*seed).is_multiple_of(100))
        .take(6);
    let seeds: Vec<u64> = canaries.chain(0..30).collect();
    let sampled = RunOptions {
        canary: true,
        ..RunOptions::default()
    };
    let full = RunOptions {
        full_checks: true,
        ..sampled.clone()
    };
    let (mut planted, mut full_reads, mut sampled_reads) = (0, 0, 0);
    for &seed in &seeds {
        let (one, all) = (run_seed(seed, &sampled), run_seed(seed, &full));
        assert_eq!(one.canary_planted, all.canary_planted, "seed {seed}");
        assert_eq!(
            one.violation.is_some(),
            all.violation.is_some(),
            "seed {seed}: sampled {:?}, full {:?}",
            one.violation,
            all.violation
        );
        assert_eq!(
            one.violation.is_some(),
            one.canary_planted,
            "seed {seed}: {:?}",
            one.violation
        );
        planted += u64::from(one.canary_planted);
        sampled_reads += one.counters.full_read_backs;
        full_reads += all.counters.full_read_backs;
    }
    assert!(planted >= 4, "canaries planted: {planted}");
    assert!(
        sampled_reads * 2 < full_reads,
        "read back whole: {sampled_reads} reopens sampled, {full_reads} with --full-checks"
    );
}

/// corpus/sim-seeds.txt: seeds that once found a bug, replayed forever.
/// Each line is `SEED [durlog-sim options]  # what it found`.
#[test]
fn regression_seeds_pass() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/sim-seeds.txt");
    let text = std::fs::read_to_string(path).expect("corpus/sim-seeds.txt");
    let mut replayed = 0;
    for line in text.lines() {
        let entry = line.split('#').next().unwrap().trim();
        if entry.is_empty() {
            continue;
        }
        let mut words = entry.split_whitespace();
        let seed = words.next().unwrap();
        let output = sim()
            .args(["repro", "--seed", seed, "--no-disk-ops"])
            .args(words)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "regression seed {line:?} fails again:\n{stdout}"
        );
        replayed += 1;
    }
    assert!(replayed > 0, "the corpus lists at least one seed");
}

/// Every planted-pitfall patch still applies to the engine as it is, so
/// `.ci/plant` measures the simulator against today's code (regenerate with
/// `python3 sim/pitfalls/generate.py` when one does not). The same for the
/// bugs planted in `PosixVfs` (`vfs/pitfalls/posix/`, regenerated by
/// `python3 vfs/pitfalls/posix/generate.py`), checked here rather than in
/// durlog-vfs because their plants run durlog-vfs's tests in a copy where
/// the patch is already applied.
#[test]
fn pitfall_patches_apply() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut patches: Vec<_> = [
        "sim/pitfalls",
        "sim/pitfalls/harmless",
        "sim/pitfalls/threads",
        "sim/pitfalls/recovery",
        "vfs/pitfalls/posix",
    ]
    .iter()
    .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap())
    .map(|entry| entry.unwrap().path())
    .filter(|path| path.extension().is_some_and(|ext| ext == "patch"))
    .collect();
    patches.sort();
    assert!(
        patches.len() >= 13,
        "one patch per pitfall of SPEC section 7: {patches:?}"
    );
    for patch in patches {
        let output = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["apply", "--check"])
            .arg(&patch)
            .output()
            .expect("git");
        assert!(
            output.status.success(),
            "{} no longer applies: {}",
            patch.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `durlog_sim::MARKS` lists exactly the coverage marks in the engine's
/// code, so that a mark added there is counted and its zero flagged.
#[test]
fn the_marks_listed_are_the_engines() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let mut rest = text.as_str();
                // rustfmt may put a long name on a line of its own.
                while let Some(at) = rest.find("mark!(") {
                    rest = rest[at + 6..].trim_start().strip_prefix('"').unwrap();
                    let end = rest.find('"').unwrap();
                    found.push(rest[..end].to_string());
                }
            }
        }
    }
    found.sort();
    let mut listed: Vec<String> = durlog_sim::MARKS
        .iter()
        .map(|(m, _)| m.to_string())
        .collect();
    listed.sort();
    assert_eq!(found, listed);
}

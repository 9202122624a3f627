//! `check`: a store's crash test as one call in a `#[test]`.
//!
//! ```text
//! check(open).seeds(0..2_000).faults(Faults::crash_only()).run();
//! ```
//!
//! [`Check::run`] runs the seeds regression files name first, then the
//! range; on a failure it shrinks the lowest failing seed, saves the seed
//! to the regression file, and panics with the violation, the shrunk
//! steps with their disk operations and faults, and the commands that
//! replay it. The environment changes a run without a change of code:
//!
//! | variable | what it does |
//! |---|---|
//! | `DURLOG_TESTBED_SEED=N` | runs seed N alone, its whole trace on stderr (`--nocapture` to see it pass) |
//! | `DURLOG_TESTBED_KEEP=3,7-9` | with the seed: only these steps (a shrunk run) |
//! | `DURLOG_TESTBED_FAULTS=crash,torn-write` | only these faults (a shrunk run's, or to try fewer) |
//! | `DURLOG_TESTBED_SEEDS=0..100000` | another range of seeds (CI runs more) |
//! | `DURLOG_TESTBED_STATE=ab:c3:-:1` | [`Check::exhaust`] replays that crash state alone, with its trace |
//!
//! The regression file of a check named `kv` (its test's name unless
//! [`Check::name`] says otherwise) is `testbed-regressions/kv.txt` in the
//! package's directory: one `seed N faults LIST` line per failure found,
//! proptest's `proptest-regressions/` convention. Check it in.

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

mod regressions;
mod vars;

use regressions::{parse_regressions, save_regression};
use vars::Vars;

use crate::campaign::{Progress, run_campaign};
use crate::explore::{ExhaustOptions, ExhaustProgress, PAGES_MAX, StateId, replay, run_exhaust};
use crate::faults::Faults;
use crate::fs::Fs;
use crate::options::FaultList;
use crate::scenario::{Counts, Scenario, run_caught};
use crate::shrink::{keep_ranges, parse_keep, shrink};
use crate::store::exhaust::StoreWorkloads;
use crate::store::{Model, Open, Store, StoreOptions, StoreScenario};

/// Lines of a shrunk trace a failure shows; the replay prints them all.
const TRACE_LINES: usize = 80;

/// A crash test of the store `open` opens: seeds `0..1000` with the faults
/// of [`Faults::crash_only`] unless told otherwise.
pub fn check<S, F>(open: F) -> Check<S>
where
    S: Store,
    F: Fn(Fs) -> io::Result<S> + Send + Sync + 'static,
{
    Check {
        open: Arc::new(open),
        seeds: 0..1000,
        faults: Faults::crash_only(),
        steps: None,
        name: None,
        marks: Vec::new(),
        jobs: None,
        regressions: Regressions::Beside,
        alphabet: None,
    }
}

/// Where a check keeps its regression file.
#[derive(Clone, Debug)]
enum Regressions {
    /// `testbed-regressions/` in the package's directory.
    Beside,
    In(PathBuf),
    Off,
}

/// A check being set up; [`Check::run`] or [`Check::exhaust`] runs it.
pub struct Check<S: Store> {
    open: Arc<Open<S>>,
    seeds: Range<u64>,
    faults: Faults,
    steps: Option<Range<u32>>,
    name: Option<String>,
    marks: Vec<&'static str>,
    jobs: Option<usize>,
    regressions: Regressions,
    alphabet: Option<Vec<<S::Model as Model>::Op>>,
}

/// What a passing check ran.
#[derive(Clone, Debug)]
pub struct Report {
    pub seeds: u64,
    pub counts: Counts,
    /// The seeds' trace digests folded in seed order: the same on every
    /// machine for the same check.
    pub digest: u64,
}

/// A failing check: [`Display`](fmt::Display) is the text `run` panics
/// with.
#[derive(Clone, Debug)]
pub struct CheckFailure {
    /// The failing seed (`None` for an exhaustive check, or for a mark
    /// never reached).
    pub seed: Option<u64>,
    /// The violation's message.
    pub message: String,
    /// Steps of the shrunk run, and of the seed's plan.
    pub shrunk_steps: Option<(usize, usize)>,
    /// The environment that replays the shrunk run (`VAR=value` words).
    pub replay_env: Vec<String>,
    text: String,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<S: Store + 'static> Check<S> {
    /// Seeds to run (`DURLOG_TESTBED_SEEDS` overrides it).
    pub fn seeds(mut self, seeds: Range<u64>) -> Check<S> {
        self.seeds = seeds;
        self
    }

    /// The faults to inject (`DURLOG_TESTBED_FAULTS` overrides the kinds).
    pub fn faults(mut self, faults: Faults) -> Check<S> {
        self.faults = faults;
        self
    }

    /// Workload steps per seed, drawn from `steps` (default 5..40).
    pub fn steps(mut self, steps: Range<u32>) -> Check<S> {
        self.steps = Some(steps);
        self
    }

    /// The check's name: its regression file's, and its replay lines'
    /// test filter. Default: the name of the test running it.
    pub fn name(mut self, name: &str) -> Check<S> {
        self.name = Some(name.to_string());
        self
    }

    /// Coverage marks ([`crate::mark!`] in the store) that the check must
    /// reach: one that no seed reaches fails it.
    pub fn marks(mut self, marks: &[&'static str]) -> Check<S> {
        self.marks = marks.to_vec();
        self
    }

    /// Threads to run seeds on (default: the number of cores).
    pub fn jobs(mut self, jobs: usize) -> Check<S> {
        self.jobs = Some(jobs.max(1));
        self
    }

    /// No regression file: neither read nor written.
    pub fn without_regressions(mut self) -> Check<S> {
        self.regressions = Regressions::Off;
        self
    }

    /// The regression file in `dir` instead of the package's
    /// `testbed-regressions/`.
    pub fn regressions_in(mut self, dir: impl Into<PathBuf>) -> Check<S> {
        self.regressions = Regressions::In(dir.into());
        self
    }

    /// The operations [`Check::exhaust`] builds its workloads of
    /// (default: two distinct operations the model draws); 1 to 26 of them
    /// ([`StoreScenario::with_alphabet`]).
    pub fn alphabet(mut self, ops: Vec<<S::Model as Model>::Op>) -> Check<S> {
        self.alphabet = Some(ops);
        self
    }

    /// Runs the check; panics with the failure's text if it fails, after
    /// saving the failing seed to the regression file.
    pub fn run(self) -> Report {
        let regressions = self.regression_file();
        let vars = Vars::env();
        match self.try_run_with(&vars) {
            Ok(report) => report,
            Err(failure) => {
                let faults = FaultList(self.scenario(&vars).faults_allowed().kinds().to_vec());
                let saved = match (&regressions, failure.seed) {
                    (Some(path), Some(seed)) => save_regression(path, seed, &faults, &failure),
                    (None, _) => "(no regression file: name the check with .name(...))".into(),
                    _ => String::new(),
                };
                panic!("{failure}{saved}");
            }
        }
    }

    /// Runs the check and returns what failed instead of panicking; writes
    /// no regression file (it still runs those saved before).
    pub fn try_run(&self) -> Result<Report, CheckFailure> {
        self.try_run_with(&Vars::env())
    }

    /// Runs what `failure` says replays it ([`CheckFailure::replay_env`]),
    /// as if those variables were set: what a user pasting the printed
    /// line runs.
    pub fn try_replay(&self, failure: &CheckFailure) -> Result<(), CheckFailure> {
        let vars = Vars::words(&failure.replay_env);
        if vars.get("DURLOG_TESTBED_STATE").is_some() {
            self.try_exhaust_with(0, &vars).map(drop)
        } else {
            self.try_run_with(&vars).map(drop)
        }
    }

    fn try_run_with(&self, vars: &Vars) -> Result<Report, CheckFailure> {
        let scenario = self.scenario(vars);
        if let Some(seed) = vars.u64("DURLOG_TESTBED_SEED") {
            return self.replay_seed(&scenario, seed, vars);
        }
        for (seed, faults) in self.saved_regressions() {
            let scenario = match faults {
                Some(faults) => scenario.with_options(StoreOptions {
                    faults: Some(faults),
                    ..scenario.options().clone()
                }),
                None => scenario.with_options(scenario.options().clone()),
            };
            let (outcome, _) = run_caught(&scenario, &scenario.draw(seed), None, false);
            if let Some(violation) = outcome.violation {
                return Err(self.failure(&scenario, seed, violation.step, &violation.message));
            }
        }
        let seeds: Vec<u64> = (vars.range("DURLOG_TESTBED_SEEDS"))
            .unwrap_or(self.seeds.clone())
            .collect();
        let jobs = self.jobs.unwrap_or_else(cores);
        let started = Instant::now();
        let (summary, _) = run_campaign(&scenario, &seeds, jobs, &Progress::default(), false);
        if let Some((seed, violation)) = summary.violations.first() {
            let mut failure = self.failure(&scenario, *seed, violation.step, &violation.message);
            if summary.violations.len() > 1 {
                let failing: Vec<String> = (summary.violations.iter().take(10))
                    .map(|(seed, _)| seed.to_string())
                    .collect();
                failure.text.push_str(&format!(
                    "\n{} of the {} seeds failed: {}{}",
                    summary.violations.len(),
                    seeds.len(),
                    failing.join(", "),
                    if summary.violations.len() > 10 {
                        ", ..."
                    } else {
                        ""
                    }
                ));
            }
            return Err(failure);
        }
        let missed: Vec<&str> = (self.marks.iter().copied())
            .filter(|mark| summary.marks.count(mark) == 0)
            .collect();
        if !missed.is_empty() {
            let message = format!(
                "durlog-testbed: {}: marks never reached in seeds {:?}: {}",
                self.display_name(),
                self.seeds,
                missed.join("; ")
            );
            return Err(plain_failure(message));
        }
        eprintln!(
            "durlog-testbed: {}: {} seeds passed in {:.2} s, digest {:016x}",
            self.display_name(),
            summary.seeds,
            started.elapsed().as_secs_f64(),
            summary.digest
        );
        Ok(Report {
            seeds: summary.seeds,
            counts: summary.tally,
            digest: summary.digest,
        })
    }

    /// Every crash state of every workload of 1 to `ops` operations of the
    /// alphabet ([`crate::explore`]): panics on the first failing state,
    /// with the variable that replays it.
    pub fn exhaust(self, ops: u32) -> crate::explore::ExhaustSummary<crate::store::Letters> {
        match self.try_exhaust(ops) {
            Ok(summary) => summary,
            Err(failure) => panic!("{failure}"),
        }
    }

    /// [`Check::exhaust`], returning the failure instead of panicking.
    pub fn try_exhaust(
        &self,
        ops: u32,
    ) -> Result<crate::explore::ExhaustSummary<crate::store::Letters>, CheckFailure> {
        self.try_exhaust_with(ops, &Vars::env())
    }

    fn try_exhaust_with(
        &self,
        ops: u32,
        vars: &Vars,
    ) -> Result<crate::explore::ExhaustSummary<crate::store::Letters>, CheckFailure> {
        let mut scenario = self.scenario(vars);
        if let Some(alphabet) = &self.alphabet {
            scenario = scenario.with_alphabet(alphabet.clone());
        }
        let workloads = scenario.workloads();
        if let Some(state) = vars.get("DURLOG_TESTBED_STATE") {
            return self
                .replay_state(&workloads, &state)
                .map(|()| Default::default());
        }
        let options = ExhaustOptions {
            ops,
            pages_max: PAGES_MAX,
            recovery_crashes: true,
            fail_fast: true,
            share: Default::default(),
        };
        let jobs = self.jobs.unwrap_or_else(cores);
        let summary = run_exhaust(&workloads, options, jobs, &ExhaustProgress::default());
        let Some((id, violation, at, before)) = summary.kept.first() else {
            eprintln!("durlog-testbed: {}: {summary}", self.display_name());
            return Ok(summary);
        };
        let (_, trace, _) = replay(&workloads, id, PAGES_MAX);
        let mut text = format!(
            "durlog-testbed: {} failed in crash state {id} {at}, after {before} states: {}\n{summary}\ntrace:\n",
            self.display_name(),
            violation.message
        );
        push_trace(&mut text, &trace);
        let env = vec![format!("DURLOG_TESTBED_STATE={id}")];
        text.push_str(&format!(
            "replay it (its whole trace):\n    {}",
            self.command_line(&env)
        ));
        Err(CheckFailure {
            seed: None,
            message: violation.message.clone(),
            shrunk_steps: None,
            replay_env: env,
            text,
        })
    }

    fn scenario(&self, vars: &Vars) -> StoreScenario<S> {
        let open = Arc::clone(&self.open);
        let mut scenario = StoreScenario::new(
            &self.display_name(),
            move |fs| open(fs),
            self.faults.clone(),
        );
        if let Some(steps) = &self.steps {
            scenario = scenario.with_steps(steps.clone());
        }
        let faults = vars.get("DURLOG_TESTBED_FAULTS").map(|text| {
            text.parse::<FaultList>()
                .unwrap_or_else(|error| panic!("DURLOG_TESTBED_FAULTS={text}: {error}"))
        });
        scenario.with_options(StoreOptions {
            faults,
            ..StoreOptions::default()
        })
    }

    /// The failure of `seed`, shrunk, with its replay lines.
    fn failure(
        &self,
        scenario: &StoreScenario<S>,
        seed: u64,
        step: usize,
        message: &str,
    ) -> CheckFailure {
        let steps = scenario.actions(&scenario.draw(seed));
        let shrunk = shrink(scenario, seed, step);
        let faults = FaultList(shrunk.faults.clone());
        let env = vec![
            format!("DURLOG_TESTBED_SEED={seed}"),
            format!("DURLOG_TESTBED_FAULTS={faults}"),
            format!("DURLOG_TESTBED_KEEP={}", keep_ranges(&shrunk.keep)),
        ];
        let mut text = format!(
            "durlog-testbed: {} failed: seed {seed}, step {step}: {message}\n",
            self.display_name()
        );
        match &shrunk.outcome.violation {
            Some(violation) => text.push_str(&format!(
                "shrunk to {} of {steps} steps, faults [{faults}]: {}\n",
                shrunk.kept(),
                violation.message
            )),
            None => text.push_str("(the shrunk run did not fail: replay the seed)\n"),
        }
        push_trace(&mut text, &shrunk.outcome.trace);
        text.push_str(&format!(
            "replay the shrunk run (its whole trace):\n    {}\nreplay the seed:\n    {}",
            self.command_line(&env),
            self.command_line(&env[..1]),
        ));
        CheckFailure {
            seed: Some(seed),
            message: message.to_string(),
            shrunk_steps: Some((shrunk.kept(), steps)),
            replay_env: env,
            text,
        }
    }

    fn replay_seed(
        &self,
        scenario: &StoreScenario<S>,
        seed: u64,
        vars: &Vars,
    ) -> Result<Report, CheckFailure> {
        let plan = scenario.draw(seed);
        let keep = vars.get("DURLOG_TESTBED_KEEP").map(|text| {
            parse_keep(&text, scenario.actions(&plan))
                .unwrap_or_else(|error| panic!("DURLOG_TESTBED_KEEP: {error}"))
        });
        let (outcome, _) = run_caught(scenario, &plan, keep.as_deref(), true);
        let trace = outcome.trace.join("\n");
        match outcome.violation {
            None => {
                eprintln!("durlog-testbed: {}: seed {seed}", self.display_name());
                eprintln!("{trace}\nok: seed {seed} passes");
                Ok(Report {
                    seeds: 1,
                    counts: outcome.tally,
                    digest: outcome.digest,
                })
            }
            Some(violation) => Err(plain_failure(format!(
                "durlog-testbed: {}: seed {seed} failed at step {}: {}\n{trace}",
                self.display_name(),
                violation.step,
                violation.message
            ))),
        }
    }

    fn replay_state(&self, workloads: &StoreWorkloads<S>, state: &str) -> Result<(), CheckFailure> {
        let id: StateId<crate::store::Letters> = state
            .parse()
            .unwrap_or_else(|error| panic!("DURLOG_TESTBED_STATE: {error}"));
        let (violation, trace, misfit) = replay(workloads, &id, PAGES_MAX);
        if misfit {
            eprintln!("warning: the state's choices do not fit this run (another build's?)");
        }
        match violation {
            None => {
                eprintln!("{}\nok: state {id} passes", trace.join("\n"));
                Ok(())
            }
            Some(violation) => Err(plain_failure(format!(
                "durlog-testbed: {}: state {id} failed: {}\n{}",
                self.display_name(),
                violation.message,
                trace.join("\n")
            ))),
        }
    }

    fn display_name(&self) -> String {
        self.name
            .clone()
            .or_else(test_name)
            .unwrap_or_else(|| "check".into())
    }

    /// `VARS cargo test -p PACKAGE NAME -- --exact`.
    fn command_line(&self, env: &[String]) -> String {
        let package = std::env::var("CARGO_PKG_NAME")
            .map(|name| format!(" -p {name}"))
            .unwrap_or_default();
        let filter = match self.name.clone().or_else(test_name) {
            Some(name) => format!(" {name} -- --exact"),
            None => String::new(),
        };
        format!("{} cargo test{package}{filter}", env.join(" "))
    }

    fn regression_file(&self) -> Option<PathBuf> {
        let name = self.name.clone().or_else(test_name)?;
        let file = format!("{}.txt", name.replace("::", "-"));
        match &self.regressions {
            Regressions::Off => None,
            Regressions::In(dir) => Some(dir.join(file)),
            Regressions::Beside => {
                let root = std::env::var_os("CARGO_MANIFEST_DIR");
                let root = root.map_or_else(PathBuf::new, PathBuf::from);
                Some(root.join("testbed-regressions").join(file))
            }
        }
    }

    fn saved_regressions(&self) -> Vec<(u64, Option<FaultList>)> {
        let Some(path) = self.regression_file() else {
            return Vec::new();
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => parse_regressions(&text)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("{}: {error}", path.display()),
        }
    }
}

/// The running test's name, as libtest names its thread (`None` on the
/// main thread: a doctest, a binary).
fn test_name() -> Option<String> {
    let thread = std::thread::current();
    let name = thread.name()?;
    (name != "main").then(|| name.to_string())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn plain_failure(text: String) -> CheckFailure {
    CheckFailure {
        seed: None,
        message: text.clone(),
        shrunk_steps: None,
        replay_env: Vec::new(),
        text,
    }
}

fn push_trace(text: &mut String, trace: &[String]) {
    for line in trace.iter().take(TRACE_LINES) {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    if trace.len() > TRACE_LINES {
        text.push_str(&format!(
            "    ... {} more lines: the replay prints them all\n",
            trace.len() - TRACE_LINES
        ));
    }
}

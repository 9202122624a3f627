//! How a plan's parts are drawn: the tuning, the workload's actions from a
//! weighted table of kinds, and the actions each feature inserts from a
//! sub-seed of its own (purges and truncations, the event store, second
//! openers, reads ahead, filtered reads), so that adding one leaves the
//! others' draws as they were.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use durlog_vfs::{FaultConfig, FaultKind};

use super::{
    Action, CONSUMERS, CrashSpec, EventSpec, ExpectedSpec, ExtrasSpec, Parts, QuotaChange,
    RunOptions, STEPS_MAX, TYPE_NAMES, TYPE_NAMES_SHARING_PREFIXES, weighted,
};

/// Purges and truncations among the actions of 3 seeds in 5, and a
/// retention policy in 1 in 4; drawn from the seed, not the plan's RNG, so
/// that the other actions of a seed stay what they were before.
pub(super) fn insert_changes(
    parts: Parts,
    actions: &mut Vec<Action>,
    segment_bytes: u64,
) -> Option<durlog::Retention> {
    let mut rng = parts.changes_rng();
    if rng.random_bool(0.6) {
        let count = actions.len() / rng.random_range(10..40);
        for _ in 0..count {
            let crash = if rng.random_bool(0.4) {
                CrashSpec::AfterOps(rng.random_range(1..=10))
            } else {
                CrashSpec::None
            };
            let action = if rng.random_bool(0.6) {
                Action::Purge {
                    keep_percent: [0, 20, 50, 80][weighted(&mut rng, &[1, 2, 3, 2])],
                    crash,
                }
            } else {
                Action::Truncate {
                    back: [0, 1, 3, 10, u32::MAX][weighted(&mut rng, &[1, 4, 3, 2, 1])],
                    crash,
                }
            };
            let at = rng.random_range(0..=actions.len());
            actions.insert(at, action);
        }
    }
    rng.random_bool(0.25).then(|| {
        durlog::Retention::default().with(|retention| {
            retention.max_bytes = rng
                .random_bool(0.7)
                .then(|| segment_bytes.min(1 << 16) * rng.random_range(2..6));
            retention.max_age = rng
                .random_bool(0.4)
                .then(|| crate::run::clock::span(rng.random_range(20..200)));
        })
    })
}

/// Stream metadata, deletions, consumer positions, idempotent retries and
/// subscriptions by event type among the actions of 1 seed in 2 (SPEC
/// section 14); drawn from a sub-seed of their own, so that the other
/// actions of a seed stay what they were before. Whether it did.
pub(super) fn insert_event_store(parts: Parts, actions: &mut Vec<Action>) -> bool {
    let mut rng = ChaCha8Rng::seed_from_u64(parts.named("event-store"));
    if !rng.random_bool(0.5) {
        return false;
    }
    let count = actions.len() / rng.random_range(8..30);
    for _ in 0..count {
        let crash = if rng.random_bool(0.3) {
            CrashSpec::AfterOps(rng.random_range(1..=5))
        } else {
            CrashSpec::None
        };
        let stream = rng.random_range(0..4);
        let small = |rng: &mut ChaCha8Rng| rng.random_bool(0.5).then(|| rng.random_range(1..6));
        let action = match weighted(&mut rng, &[3, 1, 4, 3, 1]) {
            0 => Action::SetMetadata {
                stream,
                max_count: small(&mut rng),
                truncate_back: small(&mut rng),
                max_age_ticks: rng.random_bool(0.3).then(|| rng.random_range(5..60)),
                crash,
            },
            1 => Action::Delete {
                stream,
                hard: rng.random_bool(0.3),
                crash,
            },
            2 => Action::RecordPosition {
                consumer: rng.random_range(0..CONSUMERS),
                back: [0, 1, 5, 30][weighted(&mut rng, &[3, 2, 2, 1])],
                crash,
            },
            3 => Action::Retry {
                altered: rng.random_bool(0.5),
            },
            _ => Action::SubscribeType {
                back: [0, 3, 20, u32::MAX][weighted(&mut rng, &[1, 1, 1, 1])],
                event_type: rng.random_range(0..3),
            },
        };
        let at = rng.random_range(0..=actions.len());
        actions.insert(at, action);
    }
    true
}

/// Second openers at drawn points of half the seeds (from a sub-seed of
/// their own: every other draw stays).
pub(super) fn insert_second_opens(parts: Parts, actions: &mut Vec<Action>) {
    let mut rng = ChaCha8Rng::seed_from_u64(parts.named("second-opener"));
    if !rng.random_bool(0.5) {
        return;
    }
    // One in 60 to 180 steps: each hashes every file twice, which at one
    // in 20 to 60 cost about 6% of a run.
    for _ in 0..actions.len() / rng.random_range(60..180) {
        let at = rng.random_range(0..=actions.len());
        actions.insert(at, Action::SecondOpen);
    }
}

/// In 1 seed of 2, before 1 truncation of 2, a subscriber that has read
/// ahead past the records the truncation removes (from a sub-seed of its
/// own: every other draw stays).
pub(super) fn insert_read_ahead(parts: Parts, actions: &mut Vec<Action>) {
    let mut rng = ChaCha8Rng::seed_from_u64(parts.named("read-ahead"));
    if !rng.random_bool(0.5) {
        return;
    }
    let mut at = 0;
    while at < actions.len() {
        if matches!(actions[at], Action::Truncate { .. }) && rng.random_bool(0.5) {
            actions.insert(at, Action::SubscribeAhead);
            at += 1;
        }
        at += 1;
    }
}

/// Reads of the whole log through filters, in 1 seed of 2, over event
/// types whose names share prefixes (from a sub-seed of their own: every
/// other draw stays). The type names the seed uses.
pub(super) fn insert_filtered_reads(parts: Parts, actions: &mut Vec<Action>) -> [&'static str; 3] {
    let mut rng = ChaCha8Rng::seed_from_u64(parts.named("filters"));
    if !rng.random_bool(0.5) {
        return TYPE_NAMES;
    }
    for _ in 0..actions.len() / rng.random_range(10..30) {
        let action = Action::ReadFiltered {
            stream: rng.random_bool(0.3).then(|| rng.random_range(0..4)),
            event_type: rng.random_range(0..3),
            type_prefix: rng.random_bool(0.5),
            applying_metadata: rng.random_bool(0.3),
        };
        let at = rng.random_range(0..=actions.len());
        actions.insert(at, action);
    }
    TYPE_NAMES_SHARING_PREFIXES
}

/// The engine's tuning, and `Plan::prepare_every`.
pub(super) fn draw_tuning(rng: &mut ChaCha8Rng, parts: Parts) -> (durlog::Tuning, u32) {
    let mut tuning = if rng.random_bool(0.3) {
        durlog::Tuning::default().with(|tuning| {
            tuning.preallocate_after_bytes = u64::MAX;
        })
    } else {
        durlog::Tuning::default().with(|tuning| {
            tuning.preallocate_after_bytes = [0, 100, 1000][weighted(rng, &[2, 1, 1])];
            tuning.preallocate_chunk_bytes = rng.random_range(1..=8192);
            tuning.preallocate_group_bytes_max = [u64::MAX, 512][weighted(rng, &[3, 1])];
            // Nothing runs while a simulated leader yields: one yield
            // exercises the path without slowing the run.
            tuning.gather_yields = rng.random_range(0..=1);
        })
    };
    // Drawn from the seed, not the plan's RNG, so that the plans of
    // earlier seeds (and the seeds that find each pitfall) stay as
    // they were before segments were prepared.
    let next_draw = parts.next_segment();
    tuning.next_segment = if next_draw % 10 < 3 {
        durlog::NextSegment::CreateAtRoll
    } else {
        durlog::NextSegment::OnCall
    };
    let prepare_every = [1, 2, 5][((next_draw >> 8) % 3) as usize];
    // Half the seeds write index files at the same points, and half of
    // those open trusting them.
    tuning.index_files = match (next_draw >> 16) % 2 {
        0 => durlog::IndexFiles::OnCall,
        _ => durlog::IndexFiles::Off,
    };
    tuning.open_trusts_index_files =
        tuning.index_files == durlog::IndexFiles::OnCall && (next_draw >> 17).is_multiple_of(2);
    // The group window shrinks as segments do, so that recovery's rule
    // for a record beyond it decides on logs of a few KiB; half the seeds
    // keep the default. Recovery is told the same window.
    tuning.group_bytes_max = match parts.group_window() % 8 {
        0 => 128,
        1 => 512,
        2 => 2048,
        3 => 8192,
        _ => durlog::GROUP_BYTES_MAX,
    };
    (tuning, prepare_every)
}

/// The workload's mix and the actions drawn from it: how many, and which.
pub(super) fn draw_actions(
    rng: &mut ChaCha8Rng,
    options: &RunOptions,
    drawn: &FaultConfig,
    streams: u32,
    clients: u32,
    segment_bytes: u64,
) -> (u32, Vec<Action>) {
    let skewed = rng.random_bool(0.7);
    let popularity: Vec<u32> = (0..streams)
        .map(|i| if skewed { 120 / (i + 1) } else { 10 })
        .collect();
    // Swarm the workload mix too: some seeds crash often, some rarely.
    let crash_rate = [2u32, 5, 15][weighted(rng, &[4, 4, 2])];
    let mid_op_crash = [0.02, 0.1, 0.3][weighted(rng, &[3, 4, 3])];
    let big_events = rng.random_bool(0.2);
    let steps = options
        .steps
        .unwrap_or_else(|| rng.random_range(STEPS_MAX / 2..=STEPS_MAX));
    let mut draw = ActionDraw {
        rng,
        clients,
        popularity,
        segment_bytes,
        big_events,
        mid_op_crash,
        flip_at_rest: drawn.weight(FaultKind::BitFlipAtRest),
    };
    let table = [
        (Kind::Submit, 45),
        (Kind::Commit, 35),
        (Kind::Read, 12),
        (Kind::Crash, crash_rate),
        (Kind::Reopen, 3),
        (Kind::Subscribe, 2),
        (Kind::Poll, 7),
    ];
    let actions = (0..steps).map(|_| draw.action(&table)).collect();
    (steps, actions)
}

/// The kinds of action a workload draws, each with its weight in the
/// seed's table. The table's order and weights are part of every plan: a
/// seed keeps its plan only while both stay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Submit,
    Commit,
    Read,
    Crash,
    Reopen,
    Subscribe,
    Poll,
}

/// Picks an entry of `table` with probability proportional to its weight.
fn pick<T: Copy>(rng: &mut ChaCha8Rng, table: &[(T, u32)]) -> T {
    let weights: Vec<u32> = table.iter().map(|&(_, weight)| weight).collect();
    table[weighted(rng, &weights)].0
}

struct ActionDraw<'a> {
    rng: &'a mut ChaCha8Rng,
    clients: u32,
    popularity: Vec<u32>,
    segment_bytes: u64,
    big_events: bool,
    mid_op_crash: f64,
    flip_at_rest: f64,
}

impl ActionDraw<'_> {
    fn action(&mut self, table: &[(Kind, u32)]) -> Action {
        match pick(self.rng, table) {
            Kind::Submit => self.submit(),
            Kind::Commit => Action::Commit {
                crash: self.crash_spec(true),
            },
            Kind::Read => Action::Read {
                stream: self.stream(),
                from: self.rng.random_range(0..12),
                limit: [0, 1, 3, u32::MAX][weighted(self.rng, &[1, 3, 3, 6])],
            },
            Kind::Crash => Action::Crash {
                recovery: self.recovery_crash(),
                bit_flip: self.rng.random_bool(self.flip_at_rest),
            },
            Kind::Reopen => Action::Reopen {
                quota: match weighted(self.rng, &[5, 4, 1]) {
                    0 => QuotaChange::Keep,
                    1 => QuotaChange::Raise(self.rng.random_range(64..8192)),
                    _ => QuotaChange::Remove,
                },
                recovery: self.recovery_crash(),
            },
            Kind::Subscribe => Action::Subscribe {
                back: [0, 1, 3, 20, u32::MAX][weighted(self.rng, &[2, 2, 2, 2, 2])],
                stream: self.rng.random_bool(0.3).then(|| self.stream()),
            },
            Kind::Poll => Action::Poll {
                subscriber: self.rng.random_range(0..8),
                max: [1, 2, 5, u32::MAX][weighted(self.rng, &[2, 2, 2, 4])],
            },
        }
    }

    fn stream(&mut self) -> u32 {
        weighted(self.rng, &self.popularity) as u32
    }

    fn submit(&mut self) -> Action {
        let expected = match weighted(self.rng, &[40, 12, 28, 10, 10]) {
            0 => ExpectedSpec::Right,
            1 => {
                let delta: i8 = self.rng.random_range(1..4);
                ExpectedSpec::Wrong(if self.rng.random_bool(0.5) {
                    delta
                } else {
                    -delta
                })
            }
            2 => ExpectedSpec::Any,
            3 => ExpectedSpec::NoStream,
            _ => ExpectedSpec::StreamExists,
        };
        let count = [1, 2, 3, 5][weighted(self.rng, &[70, 15, 10, 5])];
        let events = (0..count)
            .map(|_| EventSpec {
                event_type: self.rng.random_range(0..3),
                len: self.event_len(),
                fill: self.rng.random_range(1..=255),
                extras: ExtrasSpec::default(),
            })
            .collect();
        Action::Submit {
            client: self.rng.random_range(0..self.clients),
            stream: self.stream(),
            expected,
            events,
        }
    }

    fn event_len(&mut self) -> u32 {
        let segment = self.segment_bytes.min(1 << 16) as u32;
        match weighted(
            self.rng,
            &[15, 50, 25, 8, if self.big_events { 4 } else { 0 }],
        ) {
            0 => 0,
            1 => self.rng.random_range(1..32),
            2 => self.rng.random_range(32..256),
            3 => self.rng.random_range(256..2048),
            // Beyond a whole segment.
            _ => self.rng.random_range(segment..=segment * 2),
        }
    }

    fn crash_spec(&mut self, failpoint_allowed: bool) -> CrashSpec {
        if !self.rng.random_bool(self.mid_op_crash) {
            return CrashSpec::None;
        }
        if failpoint_allowed && self.rng.random_bool(0.25) {
            return CrashSpec::Failpoint;
        }
        CrashSpec::AfterOps(self.rng.random_range(1..=5))
    }

    fn recovery_crash(&mut self) -> CrashSpec {
        if self.rng.random_bool(0.15) {
            CrashSpec::AfterOps(self.rng.random_range(1..=4))
        } else {
            CrashSpec::None
        }
    }
}

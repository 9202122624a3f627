//! The `sim_ops` target: a workload chosen by the fuzzer instead of a seed,
//! run by the simulator (`durlog_sim::run_plan`) and judged by its oracle.
//!
//! The input is a fault set, a segment size, a quota and up to
//! `ACTIONS_MAX` operations, each bounded (events per append, data sizes,
//! crash points), converted into a `durlog_sim::Plan`. Any violation the
//! oracle reports, and any panic in the engine or the simulator, is a
//! finding; the violation's message and the run's trace are printed.

use arbitrary::Arbitrary;
use durlog::{NextSegment, Tuning};
use durlog_sim::plan::{Action, CrashSpec, EventSpec, ExpectedSpec, QuotaChange};
use durlog_sim::{Plan, run_plan};
use durlog_vfs::{FaultConfig, FaultKind};

/// Actions in one plan, at most: keeps an execution to a few milliseconds.
pub const ACTIONS_MAX: usize = 64;
/// Events in one append, at most.
pub const EVENTS_MAX: usize = 5;
/// Streams the appends and reads pick from.
pub const STREAMS: u32 = 8;
/// Simulated clients, at most (each has at most one append in flight).
pub const CLIENTS_MAX: u32 = 6;
/// A power loss during a commit or a recovery strikes during one of its
/// first this many disk operations.
pub const CRASH_OPS_MAX: u64 = 8;

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub struct SimOpsInput {
    /// Seed of the simulated disk's own draws (which pages survive, ...).
    pub vfs_seed: u16,
    /// Each fault on at a weight from a spread that suits it; a kind listed
    /// twice takes the later weight.
    pub faults: Vec<FaultChoice>,
    /// `segment_bytes`: 64 + this % 8129, so segments roll often.
    pub segment_bytes: u16,
    /// The initial quota: none, or 256 + this % 16129 bytes.
    pub quota: Option<u16>,
    /// Clients: 1 + this % `CLIENTS_MAX`.
    pub clients: u8,
    /// Preallocation: off, or after 0, 100 or 1000 record bytes (by the
    /// first % 3) in chunks of 1 + the second % 8192 bytes.
    pub preallocation: Option<(u8, u16)>,
    pub ops: Vec<Op>,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultChoice {
    pub kind: Fault,
    pub weight: u8,
}

/// `durlog_vfs::FaultKind`, one for one.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    LostUnsyncedPages,
    TornWrite,
    LostDirEntry,
    UnsyncedSizeChange,
    BitFlipAtRest,
    BitFlipOnRead,
    FailedFsync,
    ShortWrite,
    NoSpace,
    MisdirectedWrite,
    Crash,
}

#[derive(Arbitrary, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A client queues an append.
    Submit {
        client: u8,
        stream: u8,
        expected: ExpectedOp,
        events: Vec<EventOp>,
    },
    /// The next group commit, maybe with a power loss in it.
    Commit { crash: CrashOp },
    /// A submit and a commit: the common case, in one op.
    Append {
        client: u8,
        stream: u8,
        expected: ExpectedOp,
        events: Vec<EventOp>,
        crash: CrashOp,
    },
    Read {
        stream: u8,
        from: u8,
        limit: LimitOp,
    },
    /// Power loss, maybe a bit flipped at rest (when that fault is on),
    /// then reopen, maybe with a power loss during recovery.
    PowerLoss {
        recovery: Option<u8>,
        bit_flip: bool,
    },
    /// The process restarts, maybe with a new quota.
    Restart {
        quota: QuotaOp,
        recovery: Option<u8>,
    },
    /// `purge_before` keeping about (this % 101)% of the records kept.
    Purge { keep_percent: u8, crash: CrashOp },
    /// `truncate_after` the seq this many records before the last.
    Truncate { back: u8, crash: CrashOp },
    /// A change to the tables beside the records (SPEC section 14), maybe
    /// with a power loss in it.
    Table {
        stream: u8,
        change: TableOp,
        crash: CrashOp,
    },
    /// The appends in doubt retried idempotently, or the last one sent
    /// again, maybe altered.
    Retry { altered: bool },
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableOp {
    Metadata {
        max_count: Option<u8>,
        truncate_back: Option<u8>,
        max_age_ticks: Option<u8>,
    },
    Delete {
        hard: bool,
    },
    /// Consumer `consumer` records the seq `back` records before the last.
    Position {
        consumer: u8,
        back: u8,
    },
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedOp {
    Right,
    /// Off by this much (0 counts as 1).
    Wrong(i8),
    Any,
    NoStream,
    StreamExists,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashOp {
    None,
    /// During disk operation 1 + this % `CRASH_OPS_MAX`.
    AfterOps(u8),
    /// At the failpoint between write and sync.
    Failpoint,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitOp {
    Zero,
    One,
    Three,
    All,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaOp {
    Keep,
    /// Raise by 64 + this % 8192 bytes.
    Raise(u16),
    Remove,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventOp {
    /// One of three types.
    pub event_type: u8,
    pub len: LenOp,
    /// Data pattern (0 counts as 1, so data is never all zeros).
    pub fill: u8,
}

#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LenOp {
    Empty,
    /// 1..=32 bytes.
    Small(u8),
    /// 32..=255 bytes.
    Medium(u8),
    /// 256..=2047 bytes.
    Large(u16),
    /// One to two whole segments.
    BeyondSegment(u8),
}

impl Fault {
    fn kind(self) -> FaultKind {
        match self {
            Fault::LostUnsyncedPages => FaultKind::LostUnsyncedPages,
            Fault::TornWrite => FaultKind::TornWrite,
            Fault::LostDirEntry => FaultKind::LostDirEntry,
            Fault::UnsyncedSizeChange => FaultKind::UnsyncedSizeChange,
            Fault::BitFlipAtRest => FaultKind::BitFlipAtRest,
            Fault::BitFlipOnRead => FaultKind::BitFlipOnRead,
            Fault::FailedFsync => FaultKind::FailedFsync,
            Fault::ShortWrite => FaultKind::ShortWrite,
            Fault::NoSpace => FaultKind::NoSpace,
            Fault::MisdirectedWrite => FaultKind::MisdirectedWrite,
            Fault::Crash => FaultKind::Crash,
        }
    }

    /// The weights this kind may take: a crash outcome anywhere from rare
    /// to certain; a per-operation fault from rare to frequent (frequent
    /// enough to meet in 64 actions).
    fn weights(self) -> &'static [f64] {
        const CRASH_OUTCOME: &[f64] = &[0.05, 0.25, 0.5, 0.75, 0.95, 1.0];
        const PER_OPERATION: &[f64] = &[0.001, 0.01, 0.05, 0.2];
        const RARE: &[f64] = &[0.001, 0.01, 0.1];
        match self {
            Fault::LostUnsyncedPages
            | Fault::TornWrite
            | Fault::LostDirEntry
            | Fault::UnsyncedSizeChange
            | Fault::BitFlipAtRest => CRASH_OUTCOME,
            Fault::FailedFsync | Fault::ShortWrite | Fault::NoSpace | Fault::Crash => PER_OPERATION,
            Fault::BitFlipOnRead | Fault::MisdirectedWrite => RARE,
        }
    }
}

impl ExpectedOp {
    fn spec(self) -> ExpectedSpec {
        match self {
            ExpectedOp::Right => ExpectedSpec::Right,
            ExpectedOp::Wrong(0) => ExpectedSpec::Wrong(1),
            ExpectedOp::Wrong(delta) => ExpectedSpec::Wrong(delta),
            ExpectedOp::Any => ExpectedSpec::Any,
            ExpectedOp::NoStream => ExpectedSpec::NoStream,
            ExpectedOp::StreamExists => ExpectedSpec::StreamExists,
        }
    }
}

/// The plan's action for a change to the tables; a failpoint (which
/// only group commits pass) is no power loss here.
fn table_action(stream: u32, change: TableOp, crash: CrashOp) -> Action {
    let crash = match crash {
        CrashOp::Failpoint => CrashSpec::None,
        crash => crash.spec(),
    };
    match change {
        TableOp::Metadata {
            max_count,
            truncate_back,
            max_age_ticks,
        } => Action::SetMetadata {
            stream,
            max_count: max_count.map(|count| 1 + u64::from(count) % 6),
            truncate_back: truncate_back.map(|back| 1 + u64::from(back) % 6),
            max_age_ticks: max_age_ticks.map(|ticks| 5 + u64::from(ticks) % 60),
            crash,
        },
        TableOp::Delete { hard } => Action::Delete {
            stream,
            hard,
            crash,
        },
        TableOp::Position { consumer, back } => Action::RecordPosition {
            consumer: u32::from(consumer) % durlog_sim::plan::CONSUMERS,
            back: u32::from(back % 32),
            crash,
        },
    }
}

impl CrashOp {
    fn spec(self) -> CrashSpec {
        match self {
            CrashOp::None => CrashSpec::None,
            CrashOp::AfterOps(n) => CrashSpec::AfterOps(1 + u64::from(n) % CRASH_OPS_MAX),
            CrashOp::Failpoint => CrashSpec::Failpoint,
        }
    }
}

fn recovery_spec(recovery: Option<u8>) -> CrashSpec {
    recovery.map_or(CrashSpec::None, |n| {
        CrashSpec::AfterOps(1 + u64::from(n) % CRASH_OPS_MAX)
    })
}

impl SimOpsInput {
    /// The plan the simulator runs.
    pub fn plan(&self) -> Plan {
        let mut faults = FaultConfig::none();
        for choice in &self.faults {
            let weights = choice.kind.weights();
            faults.set(
                choice.kind.kind(),
                weights[usize::from(choice.weight) % weights.len()],
            );
        }
        let segment_bytes = 64 + u64::from(self.segment_bytes) % 8129;
        let clients = 1 + u32::from(self.clients) % CLIENTS_MAX;
        let flips_allowed = faults.is_enabled(FaultKind::BitFlipAtRest);
        let mut actions = Vec::new();
        for op in &self.ops {
            let submit =
                |client: u8, stream: u8, expected: ExpectedOp, events: &[EventOp]| Action::Submit {
                    client: u32::from(client) % clients,
                    stream: u32::from(stream) % STREAMS,
                    expected: expected.spec(),
                    events: event_specs(events, segment_bytes),
                };
            let next: Vec<Action> = match op {
                Op::Submit {
                    client,
                    stream,
                    expected,
                    events,
                } => vec![submit(*client, *stream, *expected, events)],
                Op::Commit { crash } => vec![Action::Commit {
                    crash: crash.spec(),
                }],
                Op::Append {
                    client,
                    stream,
                    expected,
                    events,
                    crash,
                } => vec![
                    submit(*client, *stream, *expected, events),
                    Action::Commit {
                        crash: crash.spec(),
                    },
                ],
                Op::Read {
                    stream,
                    from,
                    limit,
                } => vec![Action::Read {
                    stream: u32::from(*stream) % STREAMS,
                    from: u64::from(*from % 16),
                    limit: match limit {
                        LimitOp::Zero => 0,
                        LimitOp::One => 1,
                        LimitOp::Three => 3,
                        LimitOp::All => u32::MAX,
                    },
                }],
                Op::PowerLoss { recovery, bit_flip } => vec![Action::Crash {
                    recovery: recovery_spec(*recovery),
                    bit_flip: *bit_flip && flips_allowed,
                }],
                Op::Purge {
                    keep_percent,
                    crash,
                } => vec![Action::Purge {
                    keep_percent: keep_percent % 101,
                    crash: crash.spec(),
                }],
                Op::Truncate { back, crash } => vec![Action::Truncate {
                    back: u32::from(*back),
                    crash: crash.spec(),
                }],
                Op::Table {
                    stream,
                    change,
                    crash,
                } => vec![table_action(u32::from(*stream) % STREAMS, *change, *crash)],
                Op::Retry { altered } => vec![Action::Retry { altered: *altered }],
                Op::Restart { quota, recovery } => vec![Action::Reopen {
                    quota: match quota {
                        QuotaOp::Keep => QuotaChange::Keep,
                        QuotaOp::Raise(bytes) => QuotaChange::Raise(64 + u64::from(*bytes) % 8192),
                        QuotaOp::Remove => QuotaChange::Remove,
                    },
                    recovery: recovery_spec(*recovery),
                }],
            };
            if actions.len() + next.len() > ACTIONS_MAX {
                break;
            }
            actions.extend(next);
        }
        let next_segment = if self.vfs_seed.is_multiple_of(3) {
            NextSegment::CreateAtRoll
        } else {
            NextSegment::OnCall
        };
        Plan {
            seed: u64::from(self.vfs_seed),
            vfs_seed: u64::from(self.vfs_seed),
            consumer_disk_seed: u64::from(self.vfs_seed),
            faults,
            segment_bytes,
            max_bytes: self.quota.map_or(0, |quota| 256 + u64::from(quota) % 16129),
            streams: STREAMS,
            clients,
            tuning: match self.preallocation {
                None => Tuning::default().with(|tuning| {
                    tuning.preallocate_after_bytes = u64::MAX;
                    tuning.next_segment = next_segment;
                }),
                Some((after, chunk)) => Tuning::default().with(|tuning| {
                    tuning.preallocate_after_bytes = [0, 100, 1000][usize::from(after % 3)];
                    tuning.preallocate_chunk_bytes = 1 + u64::from(chunk) % 8192;
                    tuning.next_segment = next_segment;
                }),
            },
            // From the disk's seed, so that the committed corpus keeps its
            // meaning: a third of the inputs create segments at the roll.
            prepare_every: 1 + u32::from(self.vfs_seed) / 3 % 3,
            actions,
            // Likewise: a retention by size in a quarter of the inputs.
            retention: self.vfs_seed.is_multiple_of(4).then(|| {
                durlog::Retention::default().with(|retention| {
                    retention.max_bytes =
                        Some(segment_bytes * (2 + u64::from(self.vfs_seed / 4 % 4)));
                })
            }),
            canary_step: None,
            // Every reopen read back every way: a fuzzed run is short.
            full_reads_every: 1,
            full_reads_first: 0,
            retry_after_reopen: self.vfs_seed.is_multiple_of(2),
            // Subscribers read `$all` as history, and types are named as
            // they were (`type-0`..), so the committed corpus keeps its
            // meaning.
            applying_metadata: 0,
            type_names: durlog_sim::plan::TYPE_NAMES,
        }
    }
}

fn event_specs(events: &[EventOp], segment_bytes: u64) -> Vec<EventSpec> {
    let default = [EventOp {
        event_type: 0,
        len: LenOp::Small(0),
        fill: 1,
    }];
    let events = match events {
        [] => &default[..],
        events => &events[..events.len().min(EVENTS_MAX)],
    };
    events
        .iter()
        .map(|event| EventSpec {
            event_type: event.event_type % 3,
            len: match event.len {
                LenOp::Empty => 0,
                LenOp::Small(n) => 1 + u32::from(n) % 32,
                LenOp::Medium(n) => 32 + u32::from(n) % 224,
                LenOp::Large(n) => 256 + u32::from(n) % 1792,
                LenOp::BeyondSegment(n) => {
                    let segment = segment_bytes as u32;
                    segment + segment * u32::from(n) / 255
                }
            },
            fill: event.fill.max(1),
            extras: Default::default(),
        })
        .collect()
}

pub fn check(input: &SimOpsInput) {
    let plan = input.plan();
    let result = run_plan(&plan, None, false);
    if let Some(violation) = result.violation {
        // Run again with the trace on: same plan, same outcome.
        let traced = run_plan(&plan, None, true);
        panic!(
            "sim_ops: the oracle reports a violation at step {}: {}\nplan: {plan:#?}\ntrace:\n{}",
            violation.step,
            violation.message,
            traced.trace.join("\n")
        );
    }
}

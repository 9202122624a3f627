//! What one seed does: the fault configuration and the workload, drawn from
//! the seed before anything runs.
//!
//! Everything random about a run is decided here, from one `ChaCha8Rng`
//! seeded with the seed, except the disk's own fault draws, which come from
//! `SimVfs`'s RNG seeded with a sub-seed drawn here. The actions are a plain
//! list, so a failing run can be shrunk by running a subsequence of them.

mod display;
mod draw;
mod extras;
mod parts;

use draw::{
    draw_actions, draw_tuning, insert_changes, insert_event_store, insert_filtered_reads,
    insert_read_ahead, insert_second_opens,
};
use durlog_testbed::options::FaultList;
use durlog_vfs::{FaultConfig, FaultKind};
pub use parts::Parts;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The most actions a default run takes.
pub const STEPS_MAX: u32 = 400;

/// How to run seeds, beyond the seed itself: the command line's options,
/// the repro lines' flags and the shard reports' options, in one type
/// (`durlog_testbed::options`).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunOptions {
    /// Only these faults may be enabled: a comma list of kinds
    /// (lost-unsynced-pages, torn-write, lost-dir-entry, unsynced-size-change,
    /// bit-flip-at-rest, bit-flip-on-read, failed-fsync, short-write,
    /// no-space, misdirected-write, crash, read-error, duplicated-write), or
    /// `none`. Default: every kind, each seed drawing its own subset.
    #[arg(long)]
    pub faults: Option<FaultList>,
    /// Workload steps per seed (default: drawn per seed, up to 400).
    #[arg(long)]
    pub steps: Option<u32>,
    /// Plant a deterministic oracle failure in about 1% of seeds, to prove
    /// failures are reported and reproducible.
    #[arg(long)]
    pub canary: bool,
    /// Read everything back through the engine every way at every reopen:
    /// every stream, and the whole log with the metadata applied. Default:
    /// at one reopen in 4 (in turn, from a seeded start), after damage or
    /// an excused loss, and at the last; the others read the whole log
    /// back as history and the rest only for the records since the reopen
    /// before.
    #[arg(long)]
    pub full_checks: bool,
}

/// Reopens per full read-back of the log, without `--full-checks`.
pub const FULL_READS_EVERY: u32 = 4;

/// One step of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A client queues an append (if it has none in flight).
    Submit {
        client: u32,
        stream: u32,
        expected: ExpectedSpec,
        events: Vec<EventSpec>,
    },
    /// The next group commit, maybe with a power loss during its n-th
    /// counted disk operation, or at the failpoint between write and sync.
    Commit { crash: CrashSpec },
    /// A read of a stream, checked against the model.
    Read { stream: u32, from: u64, limit: u32 },
    /// Power loss between operations, then reopen.
    Crash { recovery: CrashSpec, bit_flip: bool },
    /// The process restarts (no power loss), maybe with a new quota.
    Reopen {
        quota: QuotaChange,
        recovery: CrashSpec,
    },
    /// A subscriber starts `back` records before the end of the log (0:
    /// live only), to all streams or to those of one stream's name.
    Subscribe { back: u32, stream: Option<u32> },
    /// Subscriber number `subscriber` (modulo how many there are) takes
    /// up to `max` records without waiting; a slow one takes few.
    Poll { subscriber: u32, max: u32 },
    /// `purge_before` a seq that keeps about `keep_percent` of the
    /// records kept so far, maybe with a power loss during it.
    Purge { keep_percent: u8, crash: CrashSpec },
    /// `truncate_after` the seq `back` records before the last (past the
    /// first seq kept, a refusal), maybe with a power loss during it.
    Truncate { back: u32, crash: CrashSpec },
    /// `set_stream_metadata` of a stream, maybe with a power loss during it.
    SetMetadata {
        stream: u32,
        max_count: Option<u64>,
        /// Versions below this many before the stream's end hidden.
        truncate_back: Option<u64>,
        /// A maximum age of this many ticks of the run's clock.
        max_age_ticks: Option<u64>,
        crash: CrashSpec,
    },
    /// `delete_stream`, soft or hard, maybe with a power loss during it.
    Delete {
        stream: u32,
        hard: bool,
        crash: CrashSpec,
    },
    /// A consumer records the seq `back` records before the last as
    /// handled, maybe with a power loss during it; then resumes from its
    /// recorded position.
    RecordPosition {
        consumer: u32,
        back: u32,
        crash: CrashSpec,
    },
    /// The appends left in doubt by the last power loss, retried with
    /// `append_idempotent` at the version their clients expected; if none
    /// are, the last acknowledged append sent again (a client that lost
    /// its acknowledgement), or, `altered`, with other data at the same
    /// versions (a second writer that lost the race and takes its own
    /// version conflict for a lost acknowledgement).
    Retry { altered: bool },
    /// A subscriber to the events of one type, from `back` records before
    /// the end.
    SubscribeType { back: u32, event_type: u8 },
    /// A second `Log::open` of the directory while the writer holds it,
    /// with whatever it has in flight: refused with `Locked`, and no byte
    /// of any file changed, in the cache or on the platter.
    SecondOpen,
    /// A subscriber to every stream starts 30 records before the end and
    /// takes one: it holds the records after it read ahead, for the
    /// truncation that follows to take away.
    SubscribeAhead,
    /// `read_all_filtered` from the first seq kept: the records of one
    /// stream's prefix (or all), the events of one type exactly or of a
    /// type prefix, history or with the metadata applied.
    ReadFiltered {
        stream: Option<u32>,
        event_type: u8,
        type_prefix: bool,
        applying_metadata: bool,
    },
}

/// Whether and where an operation is interrupted by a power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashSpec {
    None,
    /// During the n-th (1-based) counted disk operation.
    AfterOps(u64),
    /// At the failpoint between an append's write and its sync.
    Failpoint,
}

/// The expected version an append states, resolved against the model when
/// the action runs, so that it keeps its meaning after shrinking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedSpec {
    /// Exactly the version the client last saw acknowledged.
    Right,
    /// That version plus this (non-zero) difference, clamped at 0.
    Wrong(i8),
    Any,
    NoStream,
    StreamExists,
}

/// One event to append: its type and a data length; the bytes follow from
/// `fill` so they are never all zeros (a torn write must not look valid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub event_type: u8,
    pub len: u32,
    pub fill: u8,
    pub extras: ExtrasSpec,
}

/// An event's id, metadata and content type, if any (`extras.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtrasSpec {
    /// The number its 16-byte id is made of (`None`: no id).
    pub id: Option<u32>,
    /// Bytes of metadata, made of `fill` (0: none).
    pub metadata_len: u8,
    /// Which of `extras::CONTENT_TYPES` (`None`: none).
    pub content_type: Option<u8>,
}

impl EventSpec {
    pub fn data(&self) -> Vec<u8> {
        (0..self.len)
            .map(|i| self.fill.wrapping_add((i as u8).wrapping_mul(31)))
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaChange {
    Keep,
    /// Raise the quota by this many bytes (a quota of 0 stays 0).
    Raise(u64),
    Remove,
}

/// Everything a seed's run does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    /// Seed of the simulated disk's own RNG.
    pub vfs_seed: u64,
    /// Seed of the disk where followers of the files keep their positions
    /// (a consumer's own disk, on the same machine: it loses power with
    /// the log's).
    pub consumer_disk_seed: u64,
    pub faults: FaultConfig,
    pub segment_bytes: u64,
    /// Initial quota (0 = none).
    pub max_bytes: u64,
    pub streams: u32,
    pub clients: u32,
    /// Preallocation settings: often on with tiny chunks, so that faults
    /// land in preallocated zero tails.
    pub tuning: durlog::Tuning,
    /// With `NextSegment::OnCall`, every this many commits prepare the
    /// next segment first (when the log wants one), inside the commit's
    /// crash window; in between, rolls find it wanted but not prepared.
    pub prepare_every: u32,
    pub actions: Vec<Action>,
    /// What the log keeps, set at every open (`None`: everything).
    pub retention: Option<durlog::Retention>,
    /// Canary runs corrupt the model before this step.
    pub canary_step: Option<usize>,
    /// The oracle reads the whole log back through the engine at one
    /// reopen in this many (1: at each), from reopen `full_reads_first`
    /// (counting the first open as 0); `RunOptions::full_checks`.
    pub full_reads_every: u32,
    pub full_reads_first: u32,
    /// The clients of appends left in doubt retry them idempotently as
    /// soon as the log is reopened (with the event-store actions).
    pub retry_after_reopen: bool,
    /// Bit `n % 64` set: the run's n-th subscriber applies the streams'
    /// metadata (`Filter::applying_metadata`); the others read `$all` as
    /// history. 0 in half the seeds.
    pub applying_metadata: u64,
    /// The name of each event type (`EventSpec::event_type`): in the
    /// seeds that read through filters, names of which one is a prefix of
    /// the others, so that an exact filter that matched by prefix, or a
    /// prefix filter that matched exactly, is caught.
    pub type_names: [&'static str; 3],
}

/// Event type names of which none is a prefix of another.
pub const TYPE_NAMES: [&str; 3] = ["type-0", "type-1", "type-2"];

/// Event type names of which the first is a prefix of the others.
pub const TYPE_NAMES_SHARING_PREFIXES: [&str; 3] = ["type-1", "type-10", "type-1-x"];

impl Plan {
    /// The name of event type `event_type`.
    pub fn type_name(&self, event_type: u8) -> &'static str {
        self.type_names[usize::from(event_type) % self.type_names.len()]
    }
}

/// Picks an index with probability proportional to its weight.
pub(crate) fn weighted(rng: &mut ChaCha8Rng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut pick = rng.random_range(0..total);
    for (index, &weight) in weights.iter().enumerate() {
        if pick < weight {
            return index;
        }
        pick -= weight;
    }
    unreachable!("pick < total")
}

impl Plan {
    pub fn draw(seed: u64, options: &RunOptions) -> Plan {
        let parts = Parts::new(seed);
        let mut rng = parts.plan_rng();
        let vfs_seed = rng.next_u64();
        // The workload is drawn from the unfiltered configuration, and
        // `--faults` applied after: a plan is the same whichever faults a
        // repro or a shrink switches off, so its steps keep their numbers.
        let mut drawn = FaultConfig::swarm(&mut rng);
        // Read errors came after the other kinds: drawn from a stream of
        // their own, so that every other draw of a seed stays as it was.
        let mut read_errors = ChaCha8Rng::seed_from_u64(parts.named("read-error"));
        let read_error = FaultConfig::swarm_opt_in(&mut read_errors).weight(FaultKind::ReadError);
        drawn.set(FaultKind::ReadError, read_error);
        // So did duplicated writes, from a stream of their own again.
        let mut duplicates = ChaCha8Rng::seed_from_u64(parts.named("duplicated-write"));
        let duplicated =
            FaultConfig::swarm_opt_in(&mut duplicates).weight(FaultKind::DuplicatedWrite);
        drawn.set(FaultKind::DuplicatedWrite, duplicated);
        let mut faults = drawn.clone();
        if let Some(FaultList(allowed)) = &options.faults {
            for kind in FaultKind::ALL {
                if !allowed.contains(kind) {
                    faults.set(*kind, 0.0);
                }
            }
        }
        let segment_bytes = match weighted(&mut rng, &[30, 40, 20, 10]) {
            0 => rng.random_range(64..512),
            1 => rng.random_range(512..4096),
            2 => rng.random_range(4096..65536),
            _ => 1 << 20,
        };
        let max_bytes = if rng.random_bool(0.4) {
            rng.random_range(256..16384)
        } else {
            0
        };
        let (mut tuning, prepare_every) = draw_tuning(&mut rng, parts);
        // Reads of the whole log in runs of a few bytes, so that each one
        // crosses runs and segments: from a sub-seed of its own, so that
        // every other draw stays.
        let mut runs = ChaCha8Rng::seed_from_u64(parts.named("read-runs"));
        if runs.random_bool(0.5) {
            tuning.read_run_bytes_max = [1, 256, 4096][runs.random_range(0..3)];
        }
        let streams = rng.random_range(1..=8);
        let clients = if rng.random_bool(0.4) {
            1
        } else {
            rng.random_range(2..=6)
        };
        let (steps, mut actions) =
            draw_actions(&mut rng, options, &drawn, streams, clients, segment_bytes);
        let retention = insert_changes(parts, &mut actions, segment_bytes);
        let retry_after_reopen = insert_event_store(parts, &mut actions);
        insert_second_opens(parts, &mut actions);
        insert_read_ahead(parts, &mut actions);
        let type_names = insert_filtered_reads(parts, &mut actions);
        extras::insert(parts, &mut actions);
        // From a sub-seed of its own: every other draw stays.
        let mut applying = ChaCha8Rng::seed_from_u64(parts.named("applying-metadata"));
        let applying_metadata = match applying.random_bool(0.5) {
            true => applying.next_u64(),
            false => 0,
        };
        let canary_step = parts.canary(steps).filter(|_| options.canary);
        let (full_reads_every, full_reads_first) = match options.full_checks {
            true => (1, 0),
            false => (
                FULL_READS_EVERY,
                (parts.named("full-reads") % u64::from(FULL_READS_EVERY)) as u32,
            ),
        };
        Plan {
            seed,
            vfs_seed,
            consumer_disk_seed: parts.named("consumer-disk"),
            faults,
            segment_bytes,
            max_bytes,
            streams,
            clients,
            tuning,
            prepare_every,
            actions,
            retention,
            canary_step,
            full_reads_every,
            full_reads_first,
            retry_after_reopen,
            applying_metadata,
            type_names,
        }
    }
}

/// How many consumers a plan names (`c0`, `c1`, ...).
pub const CONSUMERS: u32 = 3;

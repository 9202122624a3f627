//! What `exhaust` runs: the alphabet of operations, the fixed setting
//! they run in (tiny segments, a small quota), the plan a workload
//! becomes, where a fault strikes, and the one-string name of a state
//! that `exhaust --replay` runs again.
//!
//! The sizes are chosen so that short workloads reach every branch of an
//! append: an append of 1500 record bytes fits; one of 5000 rolls the
//! 6144-byte segment after anything but an empty one; a quota of 8000
//! bytes is met exactly by a small append and the quota append (6500
//! bytes, a record larger than a segment, so it only ever goes into an
//! empty one) and passed by the quota append after anything bigger;
//! every append spans several 512-byte sectors, where a torn write can
//! cut it.

use std::fmt;
use std::str::FromStr;

use durlog::{IndexFiles, NextSegment, Tuning};
use durlog_vfs::FaultConfig;

use crate::plan::{Action, CrashSpec, EventSpec, ExpectedSpec, Plan, QuotaChange};

/// The segment limit of every workload.
pub const SEGMENT_BYTES: u64 = 6144;
/// The quota of every workload: a small append and the quota append fit
/// it exactly.
pub const QUOTA_BYTES: u64 = 8000;
/// Data bytes of each kind of append (a record is 52 bytes more).
const FITS_DATA_BYTES: u32 = 1448;
const ROLLS_DATA_BYTES: u32 = 4948;
const CONFLICT_DATA_BYTES: u32 = 10;
const QUOTA_DATA_BYTES: u32 = 6448;

/// One operation of the alphabet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// An append that fits the active segment (1500 record bytes).
    Append,
    /// An append that rolls the segment unless the log is empty (5000).
    Roll,
    /// An append with a stale expected version: a conflict.
    Conflict,
    /// An append that meets the quota exactly after one `Append`, and
    /// passes it after anything bigger (6500 record bytes).
    Quota,
    /// A read of the stream's whole history.
    Read,
    /// A purge of every sealed segment.
    Purge,
    /// A truncation of the last record.
    Truncate,
    /// The process closes the log and opens it again (no power loss).
    Reopen,
}

impl Op {
    /// The alphabet, in the order workloads are enumerated.
    pub const ALL: [Op; 8] = [
        Op::Append,
        Op::Roll,
        Op::Conflict,
        Op::Quota,
        Op::Read,
        Op::Purge,
        Op::Truncate,
        Op::Reopen,
    ];

    /// The letter a workload is spelt with.
    pub fn letter(self) -> char {
        match self {
            Op::Append => 'a',
            Op::Roll => 'l',
            Op::Conflict => 'c',
            Op::Quota => 'q',
            Op::Read => 'r',
            Op::Purge => 'p',
            Op::Truncate => 't',
            Op::Reopen => 'o',
        }
    }

    pub fn from_letter(letter: char) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.letter() == letter)
    }

    /// The plan's actions for this operation, the `position`-th of its
    /// workload (which sets the bytes of its data, so no two appends of a
    /// workload write the same bytes).
    fn actions(self, position: usize) -> Vec<Action> {
        let append = |expected, len| {
            let fill = 1 + position as u8;
            let events = vec![EventSpec {
                event_type: 0,
                len,
                fill,
                extras: Default::default(),
            }];
            vec![
                Action::Submit {
                    client: 0,
                    stream: 0,
                    expected,
                    events,
                },
                Action::Commit {
                    crash: CrashSpec::None,
                },
            ]
        };
        match self {
            Op::Append => append(ExpectedSpec::Right, FITS_DATA_BYTES),
            Op::Roll => append(ExpectedSpec::Right, ROLLS_DATA_BYTES),
            // One below the version: a stale writer (or, on a new stream,
            // one that expects an event it never had).
            Op::Conflict => append(ExpectedSpec::Wrong(-1), CONFLICT_DATA_BYTES),
            Op::Quota => append(ExpectedSpec::Right, QUOTA_DATA_BYTES),
            Op::Read => vec![Action::Read {
                stream: 0,
                from: 1,
                limit: u32::MAX,
            }],
            Op::Purge => vec![Action::Purge {
                keep_percent: 0,
                crash: CrashSpec::None,
            }],
            Op::Truncate => vec![Action::Truncate {
                back: 1,
                crash: CrashSpec::None,
            }],
            Op::Reopen => vec![Action::Reopen {
                quota: QuotaChange::Keep,
                recovery: CrashSpec::None,
            }],
        }
    }
}

/// How the engine makes its next segment (prepared ahead and renamed at
/// the roll, or created at the roll) and whether it preallocates zeros
/// ahead of its records: the ways each roll and each tail can be on disk.
/// The settings that preallocate also write index files (before every
/// commit, inside its crash window, for the segments rolls sealed), so
/// that each roll style meets them and purges and truncations remove
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    /// `P`: the next segment prepared ahead (zeros, synced) before every
    /// commit once the active one is half full, renamed at the roll; a
    /// page of zeros preallocated after every group; index files.
    PreparedPreallocated,
    /// `R`: prepared and renamed; no preallocation.
    PreparedExact,
    /// `Z`: created at the roll; zeros preallocated; index files.
    CreatedPreallocated,
    /// `C`: created at the roll; no preallocation, so every file ends at
    /// its last record.
    CreatedExact,
}

impl Setting {
    pub const ALL: [Setting; 4] = [
        Setting::PreparedPreallocated,
        Setting::PreparedExact,
        Setting::CreatedPreallocated,
        Setting::CreatedExact,
    ];

    pub fn letter(self) -> char {
        match self {
            Setting::PreparedPreallocated => 'P',
            Setting::PreparedExact => 'R',
            Setting::CreatedPreallocated => 'Z',
            Setting::CreatedExact => 'C',
        }
    }

    fn tuning(self) -> Tuning {
        let next_segment = match self {
            Setting::PreparedPreallocated | Setting::PreparedExact => NextSegment::OnCall,
            Setting::CreatedPreallocated | Setting::CreatedExact => NextSegment::CreateAtRoll,
        };
        let preallocate_after_bytes = match self {
            Setting::PreparedPreallocated | Setting::CreatedPreallocated => 0,
            Setting::PreparedExact | Setting::CreatedExact => u64::MAX,
        };
        let index_files = match self {
            Setting::PreparedPreallocated | Setting::CreatedPreallocated => IndexFiles::OnCall,
            Setting::PreparedExact | Setting::CreatedExact => IndexFiles::Off,
        };
        Tuning::default().with(|tuning| {
            tuning.index_files = index_files;
            tuning.preallocate_after_bytes = preallocate_after_bytes;
            tuning.preallocate_chunk_bytes = 4096;
            tuning.preallocate_group_bytes_max = u64::MAX;
            tuning.gather_yields = 0;
            tuning.next_segment = next_segment;
            // Small, so recovery's rule for a valid record beyond the
            // group window decides on logs this small.
            tuning.group_bytes_max = 512;
        })
    }
}

/// A workload: a setting and operations run in order, spelt by their
/// letters (`Palq`: prepared segments, append, roll, quota).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Workload {
    pub setting: Setting,
    pub ops: Vec<Op>,
}

impl Workload {
    /// Every workload of 1 to `ops_max` operations: shorter ones first,
    /// each length by setting, then in alphabet order.
    pub fn all(ops_max: u32) -> Vec<Workload> {
        let mut all = Vec::new();
        let mut level: Vec<Vec<Op>> = vec![Vec::new()];
        for _ in 0..ops_max {
            level = level
                .iter()
                .flat_map(|ops| {
                    Op::ALL.into_iter().map(|op| {
                        let mut ops = ops.clone();
                        ops.push(op);
                        ops
                    })
                })
                .collect();
            for setting in Setting::ALL {
                all.extend(level.iter().map(|ops| Workload {
                    setting,
                    ops: ops.clone(),
                }));
            }
        }
        all
    }

    /// The plan `run` executes for this workload: one stream, one client,
    /// no fault of its own (the crash script brings them), the small
    /// sizes above and the setting's tuning. With `canary`, the model is
    /// made to disagree with the log at the first action after something
    /// was acknowledged, to show that failures are reported.
    pub fn plan(&self, canary: bool) -> Plan {
        let actions: Vec<Action> = self
            .ops
            .iter()
            .enumerate()
            .flat_map(|(position, op)| op.actions(position))
            .collect();
        Plan {
            seed: 0,
            vfs_seed: 0,
            consumer_disk_seed: 0,
            faults: FaultConfig::none(),
            segment_bytes: SEGMENT_BYTES,
            max_bytes: QUOTA_BYTES,
            streams: 1,
            clients: 1,
            tuning: self.setting.tuning(),
            prepare_every: 1,
            retention: None,
            canary_step: canary.then_some(0),
            // Every crash state is checked in full: the explorer's
            // states are few and each is the point.
            full_reads_every: 1,
            full_reads_first: 0,
            retry_after_reopen: false,
            applying_metadata: 0,
            type_names: crate::plan::TYPE_NAMES,
            actions,
        }
    }

    /// The operation that plan action `step` belongs to (the final checks
    /// are one past the last).
    pub fn op_at_step(&self, step: usize) -> Option<(usize, Op)> {
        let mut first = 0;
        for (position, op) in self.ops.iter().enumerate() {
            let actions = op.actions(position).len();
            if step < first + actions {
                return Some((position, *op));
            }
            first += actions;
        }
        None
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.setting.letter())?;
        self.ops
            .iter()
            .try_for_each(|op| write!(f, "{}", op.letter()))
    }
}

impl FromStr for Workload {
    type Err = String;

    /// A setting's capital letter, then at least one operation's letter.
    fn from_str(text: &str) -> Result<Workload, String> {
        let mut letters = text.chars();
        let setting = letters
            .next()
            .and_then(|letter| Setting::ALL.into_iter().find(|s| s.letter() == letter));
        let ops: Option<Vec<Op>> = letters.map(Op::from_letter).collect();
        match (setting, ops) {
            (Some(setting), Some(ops)) if !ops.is_empty() => Ok(Workload { setting, ops }),
            _ => Err(format!(
                "{text:?} is no workload: a setting (P, R, Z or C) then letters of alcqrpto"
            )),
        }
    }
}

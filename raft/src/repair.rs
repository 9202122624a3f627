//! Protocol-aware repair: a log whose acknowledged entries are damaged
//! opens without them, and the node takes no part in elections until the
//! leader has sent them again (Alagappan et al., "Protocol-Aware Recovery
//! for Consensus-Based Storage", FAST '18: CTRL's recovery, on openraft).
//!
//! # What happens
//!
//! [`LogStore::open_for_repair`](crate::LogStore::open_for_repair) opens
//! the log; when durlog refuses it with `Error::Corrupt` naming a segment
//! (acknowledged bytes damaged: a sealed segment, a bit flipped at rest
//! with a valid record after it, a misplaced or misdirected write):
//!
//! 1. **Reach.** It reads the damaged segment and every later one and
//!    finds how far the log reached: the entry of the highest valid record
//!    in them (a record's CRC covers its seq), or, if no valid record
//!    stands at or after the damage, the index the damaged record had,
//!    with the term of the saved vote (no entry a node accepted has a term
//!    above its vote's). Bytes after the damage that no valid record covers
//!    may have held records (a misdirected write can erase the last ones
//!    whole): each 44 bytes, durlog's smallest record, adds an index, with
//!    the vote's term. The reach is an upper bound of the last entry the
//!    node ever acknowledged, as a `(term, index)` pair: at or past, in
//!    term and in index, the last entry the log's files held before the
//!    damage ([`last_log_id`] reads it; durlog-raft-sim holds each repair
//!    to that after damaging a disk).
//! 2. **Durable first.** The reach goes into `raft.meta` (the larger of it
//!    and any reach a repair that a crash interrupted left there) before
//!    any file is touched.
//! 3. **Aside, never deleted.** The damaged segment is copied whole into
//!    `quarantine/<n>/` of the store's directory (the first free `n`) and
//!    cut at the damage; every later segment is renamed there. Both
//!    directories are synced. Nothing removes a quarantine: the operator
//!    inspects it (`durlog verify`, `durlog dump` on a copy) and removes it.
//!    A `tracing` warning names the file, the offset, the reason, the reach
//!    and the quarantine.
//! 4. The log opens again (another damaged segment further on repeats
//!    this), keeping every entry before the damage.
//!
//! Damage anywhere else stays a refusal: durlog's bookkeeping files
//! (`durlog.state`, its tables), `raft.meta` (below), and a directory
//! whose segments are refused more than 1024 times in one open.
//!
//! The node then runs with its [`RepairGate`] closed: it must grant no
//! vote and stand for no election. Entries arrive by ordinary replication
//! (or a snapshot); once its last log id is at least the reach, the store
//! clears the reach in `raft.meta` (durably) and only then opens the gate.
//!
//! # Where the hook is
//!
//! openraft 0.9 has no way to keep a node out of elections. The gate is
//! enforced where vote requests travel: the application's `RaftNetwork`
//! sends no vote request from a node whose gate is closed, and its RPC
//! server answers none addressed to one (`Raft::vote` is never called
//! while the gate is closed). So that the node does not run up its term in
//! elections nobody hears (its higher term would then depose every leader
//! that replicates to it, again and again), the application also turns its
//! election timer off while the gate is closed
//! (`Raft::runtime_config().elect(false)`, back on when it opens).
//! durlog-raft-sim does exactly that. That is why repair needs the explicit
//! [`LogStore::open_for_repair`](crate::LogStore::open_for_repair):
//! `open`/`open_with` still refuse damage, so an application that has not
//! wired the gate gets the refusal, never a node that votes with a short
//! log. With the gate wired, repair is automatic: the damaged bytes are
//! kept, the operator is told, and waiting for an operator would only keep
//! a replica down that the cluster can repair by itself.
//!
//! A repairing store also reports its vote as not committed
//! (`read_vote`), whatever `with_leader_restore` says: a node that led
//! before its disk was damaged must not resume leadership without an
//! election, since a leader with a short log would overwrite its
//! followers' entries after its end. And the cluster must let a follower's
//! log go back: openraft's `loosen-follower-log-revert` feature, which this
//! crate turns on (without it the leader's replication of the follower
//! keeps its old matching index and panics in a debug build).
//!
//! # Why it is safe, and why the simpler recoveries are not
//!
//! Raft's leader completeness rests on every voter keeping what it
//! acknowledged: an entry committed on a quorum Q is on every later
//! leader, because that leader's election quorum Q' meets Q in a voter
//! that holds the entry and grants only to a candidate at least as
//! up to date. A repaired node's log may lack entries it acknowledged.
//!
//! - **Truncate at the damage and rejoin** (what `durlog` would do if it
//!   took damage for a torn tail): with 3 nodes, entry e is committed on A
//!   and B; B's copy is damaged and cut off; A is partitioned away; C,
//!   which never had e, asks B for its vote: B's log is no longer ahead of
//!   C's, so B grants, C leads and overwrites e on B. Committed data lost
//!   (the paper's finding; the plant `08-truncate-and-rejoin`).
//! - **Delete the damaged segments and rejoin**: the same, with more lost
//!   (plant `09-delete-and-rejoin`); rebuilding the whole log from peers
//!   fails the same way while the node votes during the rebuild.
//! - **Here**: a repairing node is in no election quorum. Any Q' is made of
//!   nodes that hold everything they acknowledged (never damaged, or
//!   repaired: their last log id is at least their reach, so they grant
//!   only to candidates at least as up to date as their log was before the
//!   damage, and the entries they got back came from a leader, so by log
//!   matching they agree with it). So Q' meets Q in a node as strong as
//!   Raft assumes, and leader completeness holds. The reach may overstate
//!   the log (a torn, unacknowledged record counts): that costs waiting
//!   longer, never safety. With damage on at most f of 2f+1 voters a
//!   quorum of undamaged voters remains, so the cluster elects and
//!   repairs; with more, it may stop (liveness lost, safety kept), until
//!   an operator restores a replica.
//!
//! # A damaged `raft.meta` stays a refusal
//!
//! The vote is the one thing peers cannot give back: which candidate this
//! node voted for in its last term is known only to it (and to the
//! candidate, which may be down). Any rule that guesses (take the highest
//! term a peer reports, and vote in no term up to it) needs the peers'
//! answers from a quorum, itself an election round; the safe operator path
//! is to remove the node from the membership and add it back as a new
//! node (a learner first) with an empty store.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use durlog::vfs::{OpenMode, Vfs, read_exact_at};
use durlog::{HEADER_SIZE, Log, Options, Tuning, decode_batch, parse_record};
use openraft::{LogId, RaftLogId, RaftTypeConfig};

pub use crate::meta::Reach;
use crate::meta::{META_FILE_NAME, MetaBody, MetaFile, decode as decode_meta};
use crate::reader::read_entries;
use crate::{Error, LOG_DIR_NAME};

/// The directory, inside the store's, that damaged segments are moved to.
pub const QUARANTINE_DIR_NAME: &str = "quarantine";

/// A log damaged in more places than this is refused: each round moves
/// aside at least one segment, so this bounds a repair, not a log.
const REPAIR_ROUNDS_MAX: usize = 1024;

/// Whether the node may take part in elections: closed while a repair is
/// under way. The application's network consults it (see the module doc).
#[derive(Debug, Default)]
pub struct RepairGate {
    repairing: AtomicBool,
}

impl RepairGate {
    pub(crate) fn new(repairing: bool) -> RepairGate {
        RepairGate {
            repairing: AtomicBool::new(repairing),
        }
    }

    /// True once the node may grant votes and stand for election again.
    pub fn allows_elections(&self) -> bool {
        !self.repairing.load(Ordering::SeqCst)
    }

    pub(crate) fn open(&self) {
        self.repairing.store(false, Ordering::SeqCst);
    }
}

/// One damaged segment moved aside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The damaged segment.
    pub file: PathBuf,
    /// Where the damage starts in it (the file was cut there).
    pub offset: u64,
    /// durlog's reason.
    pub reason: String,
    /// Where its bytes and every later segment went.
    pub dir: PathBuf,
    /// The reach found from them.
    pub reach: Reach,
}

/// What a store opened for repair found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The segments moved aside by this open, in order.
    pub quarantined: Vec<Quarantined>,
    /// The reach the node waits for (`None`: no repair under way).
    pub reach: Option<Reach>,
    /// True if `raft.meta` held a reach already: a repair that a crash
    /// interrupted goes on.
    pub resumed: bool,
}

/// Opens the log in `dir`, moving damaged segments aside (see the module
/// doc) and saving the reach in `meta` before anything is moved.
pub(crate) fn open_log<C: RaftTypeConfig>(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    meta: &mut MetaFile<C::NodeId>,
    options: &Options,
    tuning: Tuning,
    report: &mut RepairReport,
) -> Result<Log, Error> {
    let log_dir = dir.join(LOG_DIR_NAME);
    for _ in 0..REPAIR_ROUNDS_MAX {
        match Log::open_tuned(Arc::clone(vfs), &log_dir, options.clone(), tuning) {
            Ok(log) => return Ok(log),
            Err(durlog::Error::Corrupt {
                file,
                offset,
                reason,
            }) if segment_seq(&file).is_some() && file.parent() == Some(log_dir.as_path()) => {
                let moved = quarantine::<C>(vfs, dir, meta, &file, offset, reason)?;
                tracing::warn!(
                    "durlog-raft: {} damaged at offset {} ({}); it and every later segment \
                     moved to {}; this node takes no part in elections until its log reaches \
                     {} again",
                    moved.file.display(),
                    moved.offset,
                    moved.reason,
                    moved.dir.display(),
                    moved.reach
                );
                report.quarantined.push(moved);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::Inconsistent(format!(
        "{}: still damaged after {REPAIR_ROUNDS_MAX} repair rounds",
        log_dir.display()
    )))
}

/// The seq a segment's file name gives, if it is a segment's name.
fn segment_seq(path: &Path) -> Option<u64> {
    let digits = path.file_name()?.to_str()?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Moves the damaged segment `file` (cut at `offset`) and every later one
/// aside, after saving the reach they show.
fn quarantine<C: RaftTypeConfig>(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    meta: &mut MetaFile<C::NodeId>,
    file: &Path,
    offset: u64,
    reason: String,
) -> Result<Quarantined, Error> {
    let log_dir = dir.join(LOG_DIR_NAME);
    let damaged_seq = segment_seq(file).expect("a segment's name");
    let mut victims = Vec::new();
    for entry in vfs.list_dir(&log_dir)? {
        let path = log_dir.join(&entry.name);
        if let Some(seq) = segment_seq(&path).filter(|&seq| seq >= damaged_seq && !entry.is_dir) {
            victims.push((seq, path));
        }
    }
    victims.sort();
    let mut contents = Vec::with_capacity(victims.len());
    for (seq, path) in &victims {
        contents.push((*seq, read_file(vfs.as_ref(), path)?));
    }
    let reach = reach_of::<C>(meta.body(), &contents, offset);
    let mut body = meta.body().clone();
    body.repair = body.repair.max(Some(reach));
    meta.save(body)?;
    let target = free_quarantine_dir(vfs.as_ref(), dir)?;
    vfs.create_dir_all(&target)?;
    for ((seq, path), (_, bytes)) in victims.iter().zip(&contents) {
        let name = path.file_name().expect("a segment's name");
        if *seq == damaged_seq && offset > 0 {
            // The bytes before the damage stay; all of them go aside too.
            let copy = vfs.open(&target.join(name), OpenMode::CreateNew)?;
            copy.write_at(bytes, 0)?;
            copy.sync_data()?;
            vfs.sync_dir(&target)?;
            let original = vfs.open(path, OpenMode::ReadWrite)?;
            original.set_len(offset)?;
            original.sync_data()?;
        } else {
            vfs.rename(path, &target.join(name))?;
        }
    }
    vfs.sync_dir(&target)?;
    vfs.sync_dir(&log_dir)?;
    Ok(Quarantined {
        file: file.to_owned(),
        offset,
        reason,
        dir: target,
        reach,
    })
}

fn read_file(vfs: &dyn Vfs, path: &Path) -> io::Result<Vec<u8>> {
    let file = vfs.open(path, OpenMode::ReadOnly)?;
    let mut bytes = vec![0; file.len()? as usize];
    read_exact_at(file.as_ref(), &mut bytes, 0)?;
    Ok(bytes)
}

/// `dir/quarantine/<n>` for the first `n` not taken.
fn free_quarantine_dir(vfs: &dyn Vfs, dir: &Path) -> io::Result<PathBuf> {
    let quarantine = dir.join(QUARANTINE_DIR_NAME);
    vfs.create_dir_all(&quarantine)?;
    let taken: Vec<String> = vfs
        .list_dir(&quarantine)?
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    let free = (1u64..)
        .find(|n| !taken.contains(&format!("{n:06}")))
        .expect("a free number");
    Ok(quarantine.join(format!("{free:06}")))
}

/// The smallest record durlog writes (FORMAT.md, "misplaced record"):
/// bytes no valid record covers may have held this many per record.
pub const SMALLEST_RECORD_BYTES: u64 = 44;

/// How far the log reached, from the damaged segment (`segments[0]`,
/// damaged at `offset`) and every later one: see the module doc. Bytes
/// after the damage that no valid record covers (but for zeros at a
/// file's end) may have held records, and so may bytes that hold a valid
/// copy of an earlier record: each [`SMALLEST_RECORD_BYTES`] counts as one
/// more index, with the vote's term.
fn reach_of<C: RaftTypeConfig>(
    body: &MetaBody<C::NodeId>,
    segments: &[(u64, Vec<u8>)],
    offset: u64,
) -> Reach {
    // The seq the damaged record had: the one after the last valid record
    // before the damage.
    let mut expected = segments.first().map_or(0, |(seq, _)| *seq);
    let mut highest: Option<(u64, Vec<u8>)> = None;
    let mut uncovered = 0u64;
    for (position, (name_seq, bytes)) in segments.iter().enumerate() {
        expected = expected.max(*name_seq);
        let end = bytes.len() - bytes.iter().rev().take_while(|&&byte| byte == 0).count();
        let mut at = 0usize;
        while at < end {
            let record = (bytes.len() - at >= HEADER_SIZE)
                .then(|| parse_record(&bytes[at..]).ok())
                .flatten();
            let Some(record) = record else {
                // Resynchronize past the damage: a later record may stand
                // anywhere (a misdirected write, a flipped length).
                uncovered += u64::from(position > 0 || at as u64 >= offset);
                at += 1;
                continue;
            };
            let before_damage = position == 0 && (at as u64) < offset;
            if before_damage {
                expected = expected.max(record.seq + 1);
            } else if record.seq < expected {
                // A copy of an earlier record (a misdirected or stale
                // write): it stands where later records may have been.
                uncovered += record.len as u64;
            }
            if highest.as_ref().is_none_or(|(seq, _)| record.seq > *seq) {
                highest = Some((record.seq, record.payload.to_vec()));
            }
            at += record.len;
        }
    }
    let vote_term = body.vote.as_ref().map_or(0, |vote| vote.leader_id().term);
    let extra = uncovered.div_ceil(SMALLEST_RECORD_BYTES);
    let highest_seq = highest.as_ref().map_or(0, |(seq, _)| *seq);
    let found = highest
        .filter(|(seq, _)| *seq >= expected)
        .and_then(|(_, payload)| entry_log_id::<C>(&payload));
    match found {
        Some(log_id) if extra == 0 => Reach::of(&log_id),
        _ => Reach {
            term: vote_term.max(found.map_or(0, |id| id.leader_id.term)),
            index: body
                .anchor
                .index_of(expected.max(highest_seq) + extra)
                .unwrap_or(0),
        },
    }
}

/// The id of the entry a record's payload holds, if it decodes.
fn entry_log_id<C: RaftTypeConfig>(payload: &[u8]) -> Option<LogId<C::NodeId>> {
    let batch = decode_batch(payload).ok()?;
    let event = batch.events.first()?;
    let entry: C::Entry = postcard::from_bytes(&event.data).ok()?;
    Some(entry.get_log_id().clone())
}

/// The id of the last entry the log of the store in `dir` holds, read from
/// its files as they stand (`raft.meta` decoded, the log through durlog's
/// read-only open: nothing on disk changes, nothing is synced, a torn tail
/// is passed over as recovery would): the entry a repair's reach must
/// stand at or past if these bytes are damaged next. `None` if the log
/// holds no entry past the last purged one. A checker's tool: the store
/// never needs it.
pub fn last_log_id<C: RaftTypeConfig>(
    vfs: impl Vfs + 'static,
    dir: &Path,
) -> Result<Option<LogId<C::NodeId>>, Error> {
    let meta_path = dir.join(META_FILE_NAME);
    let body: MetaBody<C::NodeId> = match read_file(&vfs, &meta_path) {
        Ok(bytes) => decode_meta(&bytes).map_err(|reason| Error::Meta {
            path: meta_path,
            reason,
        })?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => MetaBody::default(),
        Err(error) => return Err(error.into()),
    };
    let log = Log::open_read_only(vfs, dir.join(LOG_DIR_NAME))?;
    // A record before the anchor, or at or below the last purged index,
    // holds no entry in Raft's eyes.
    let Some(index) = body.anchor.index_of(log.last_seq()) else {
        return Ok(None);
    };
    if body
        .last_purged
        .as_ref()
        .is_some_and(|purged| purged.index >= index)
    {
        return Ok(None);
    }
    let entries = read_entries::<C>(&log, body.anchor, index, 1)?;
    Ok(entries.last().map(|entry| entry.get_log_id().clone()))
}

#[cfg(test)]
mod tests {
    use super::{Reach, segment_seq};
    use openraft::{CommittedLeaderId, LogId};
    use std::path::Path;

    #[test]
    fn reaches_compare_as_raft_compares_logs() {
        let reach = Reach { term: 3, index: 10 };
        let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1u64), index);
        assert!(reach.is_covered_by(Some(&id(3, 10))));
        assert!(
            reach.is_covered_by(Some(&id(4, 2))),
            "a later term is ahead"
        );
        assert!(!reach.is_covered_by(Some(&id(3, 9))));
        assert!(!reach.is_covered_by(Some(&id(2, 50))));
        assert!(!reach.is_covered_by::<u64>(None));
    }

    /// The reach stands at or past the last entry the node held, whatever
    /// a fault left from the damage on: garbage of every length from the
    /// start of any record (cutting records short, or running past the
    /// end), with or without valid records after it and zeros at the end.
    /// A reach below it would let the node vote with a log that lost
    /// entries it may have acknowledged.
    #[test]
    fn the_reach_covers_every_entry_the_damage_may_have_destroyed() {
        use crate::events::TypeConfig;
        use crate::mapping::Anchor;
        use crate::meta::MetaBody;
        use openraft::{Entry, EntryPayload, Vote};
        use rand::{Rng, RngExt, SeedableRng};

        for seed in 0..2000u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let held = rng.random_range(1..=10u64);
            let mut term = 1;
            let mut bytes = Vec::new();
            let mut starts = Vec::new();
            for index in 1..=held {
                term += u64::from(rng.random_bool(0.3));
                // Entries of every size: blank ones, the smallest, and
                // requests from a few bytes to a few hundred.
                let payload = match rng.random_range(0..3) {
                    0 => EntryPayload::Blank,
                    _ => EntryPayload::Normal(crate::events::EventRequest {
                        stream: "s".into(),
                        event_type: "t".into(),
                        data: vec![7; rng.random_range(0..300)],
                        expected_version: None,
                    }),
                };
                let entry = Entry::<TypeConfig> {
                    log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
                    payload,
                };
                let event = crate::codec::encode::<TypeConfig>(&entry).unwrap();
                let payload = durlog::encode_batch(crate::STREAM, index, &[event]);
                starts.push(bytes.len());
                durlog::append_record(&mut bytes, index, &payload);
            }
            let damaged = rng.random_range(0..starts.len());
            let from = starts[damaged];
            let len = rng.random_range(1..=bytes.len() - from + 64);
            let mut garbage = vec![0u8; len];
            rng.fill_bytes(&mut garbage);
            // A zero at the garbage's end would read as preallocation.
            *garbage.last_mut().unwrap() |= 1;
            if damaged > 0 && rng.random_bool(0.5) {
                // A valid copy of an earlier record at the damage (a stale
                // or misdirected write), garbage after it.
                let copied = rng.random_range(0..damaged);
                let record = bytes[starts[copied]..starts[copied + 1]].to_vec();
                garbage.splice(..record.len().min(len), record);
                garbage.truncate(len.max(starts[copied + 1] - starts[copied]));
            }
            let len = garbage.len();
            let end = (from + len).max(bytes.len());
            bytes.resize(end, 0);
            bytes[from..from + len].copy_from_slice(&garbage);
            bytes.resize(end + rng.random_range(0..100), 0);
            let body = MetaBody::<u64> {
                vote: Some(Vote::new_committed(term, 1)),
                anchor: Anchor { seq: 1, index: 1 },
                ..MetaBody::default()
            };
            let reach = super::reach_of::<TypeConfig>(&body, &[(1, bytes)], from as u64);
            assert!(
                (reach.term, reach.index) >= (term, held),
                "seed {seed}: {held} entries held (last term {term}), damage at {from} for {len} bytes: reach {reach:?}"
            );
        }
    }

    #[test]
    fn only_segment_names_have_a_seq() {
        assert_eq!(
            segment_seq(Path::new("/x/log/00000000000000000042.log")),
            Some(42)
        );
        assert_eq!(segment_seq(Path::new("/x/log/durlog.state")), None);
        assert_eq!(
            segment_seq(Path::new("/x/log/0000000000000000004x.log")),
            None
        );
    }
}

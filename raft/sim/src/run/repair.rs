//! Damage at rest and the repairs that follow (durlog_raft::repair): the
//! harness damages a stopped node's segments (a bit flipped in a sealed or
//! the last segment, a misdirected write), the node's store opens for
//! repair, and this watches it until it votes again.
//!
//! The durability check after a restart takes the store's word for what a
//! repair lost (the entries from the first index its log no longer holds)
//! only under one condition, a property of its own: every entry the node
//! claimed durable there is within the reach the store waits for. The
//! other checkers (committed entries, state machines, clients, liveness)
//! are unchanged: a repair that lets the node vote too early loses
//! committed entries there.
//!
//! The reach itself is held to the log's files: just before the harness
//! damages a disk, durlog-raft reads the last entry its log holds (from a
//! copy of the files, so that the run's disk and digest stay as they
//! were), and the repair of the node's next start must reach at or past
//! it in term and in index, and no further than the bytes it moved aside
//! can explain. Claims alone miss a reach that stops short of entries
//! written but not yet acknowledged, or one whose term is too low to keep
//! the node out of elections.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use durlog::vfs::{FaultConfig, OpenMode, SimVfs, Vfs};
use durlog_raft::repair::{Quarantined, Reach, RepairReport, SMALLEST_RECORD_BYTES};
use openraft::LogId;

use super::Cluster;
use super::parts::{Held, Watch};
use crate::check::Violation;
use crate::config::{STORE_DIR, SimConfig};
use crate::excuse::Injected;

impl Cluster<'_> {
    /// After node `id` started: what its open repaired. Drops the claims a
    /// repair lost (checking the reach covers them) and starts the watch.
    pub(super) fn repaired_start(
        &mut self,
        id: u64,
        claims: &mut BTreeMap<u64, LogId<u64>>,
        held: Option<Held>,
    ) -> Result<(), Violation> {
        if self.repairs.restarted(id) {
            self.tally.bump("repairs-interrupted-by-crash");
        }
        let report = self.nodes[&id].repair.clone();
        if report.quarantined.is_empty() && report.reach.is_none() {
            return Ok(());
        }
        if let Some(held) = held {
            self.check_reach(id, &report, held)?;
        }
        let node = &self.nodes[&id];
        for moved in &report.quarantined {
            self.trace.note(
                id,
                format_args!(
                    "repair: {} damaged at {} ({}), moved to {}; reach {}",
                    moved.file.display(),
                    moved.offset,
                    moved.reason,
                    moved.dir.display(),
                    moved.reach
                ),
            );
        }
        let probe = node.probe.lock();
        let after_purged = probe.last_purged.map_or(0, |purged| purged.index + 1);
        let lost_from = probe
            .log
            .keys()
            .next_back()
            .map_or(after_purged, |index| index + 1);
        drop(probe);
        // What the repair moved aside is lost to the node; whether that
        // is safe is for the checkers of committed entries to say, and,
        // when the store waits for a reach, for this property.
        let lost = claims.split_off(&lost_from);
        let reach = report.reach.unwrap_or(Reach { term: 0, index: 0 });
        // Once a node's amnesia excused the run (act.rs), its claims may
        // hold entries an earlier restart already lost.
        if let Some((index, log_id)) = lost.iter().find(|(_, id)| Reach::of(*id) > reach)
            && report.reach.is_some()
            && !self.faults.is_excused()
        {
            return Err(format!(
                "repair: node {id} claimed {log_id} durable at index {index}, but its repair \
                 waits only for {reach} before it votes again"
            ));
        }
        let repairing = node.is_repairing();
        if !report.quarantined.is_empty() {
            self.tally.bump("nodes-repaired");
            // Damage the disk's own faults left (a misdirected write while
            // writing) counts against the f budget as the harness's does.
            self.faults.damage(id);
        }
        if report.resumed {
            self.tally.bump("repairs-resumed");
        }
        self.tally.add("entries-lost-to-damage", lost.len() as u64);
        if repairing {
            let since_ns = self.exec.now_ns();
            let lost = lost.len() as u64;
            self.repairs.watch(
                id,
                Watch {
                    since_ns,
                    lost,
                    lost_from,
                    reach,
                },
            );
        } else {
            self.tally.bump("repairs-done-at-open");
        }
        Ok(())
    }

    /// Holds the reach of the first start after damage at rest to the
    /// last entry the log held before it (`held`): at or past it in Raft's
    /// order and in index (the reach's promise, durlog_raft::repair), and
    /// past it by no more than one index (the damaged record's) and one
    /// more per smallest record the bytes moved aside could have held.
    fn check_reach(&mut self, id: u64, report: &RepairReport, held: Held) -> Result<(), Violation> {
        let Some(reach) = report.quarantined.iter().map(|moved| moved.reach).max() else {
            return Ok(());
        };
        let held = match held {
            Ok(Some(held)) => held,
            Ok(None) => {
                self.tally.bump("repairs-reach-unchecked-empty-log");
                return Ok(());
            }
            Err(_) => {
                self.tally.bump("repairs-reach-unchecked-log-unreadable");
                return Ok(());
            }
        };
        if Reach::of(&held) > reach || held.index > reach.index {
            return Err(format!(
                "repair: node {id}'s reach {reach} stops short of its log: its files held \
                 {held} (index {}) just before the harness damaged them",
                held.index
            ));
        }
        for moved in &report.quarantined {
            let bytes = moved_bytes(&self.nodes[&id].vfs, moved);
            let most = held.index + 1 + bytes.div_ceil(SMALLEST_RECORD_BYTES);
            if moved.reach.index > most {
                return Err(format!(
                    "repair: node {id}'s reach {} counts past its log: its files held {held} \
                     (index {}) and {bytes} bytes from the damage on were moved aside, \
                     which reach index {most} at most",
                    moved.reach, held.index
                ));
            }
        }
        self.tally.bump("repairs-reach-checked");
        self.tally
            .add("repairs-reach-entries-past-held", reach.index - held.index);
        Ok(())
    }

    /// Ends the watch of every node whose repair finished: counted, with
    /// its cost (simulated time from the restart to voting again).
    pub(super) fn track_repairs(&mut self) {
        let done: Vec<u64> = self
            .repairs
            .watched()
            .filter(|id| self.nodes[id].is_up() && !self.nodes[id].is_repairing())
            .collect();
        let now_ns = self.exec.now_ns();
        for id in done {
            let watch = self.repairs.finished(id);
            if let Some(raft) = self.nodes[&id].raft() {
                raft.runtime_config().elect(true);
            }
            let took_ms = watch.took_ms(now_ns);
            self.tally.bump("repairs-completed");
            self.tally.add("entries-refetched", watch.refetched());
            self.tally.add("repair-ms", took_ms);
            let bucket = watch.bucket();
            self.tally.bump(&format!("repair-cost-lost-{bucket}-count"));
            self.tally
                .add(&format!("repair-cost-lost-{bucket}-ms"), took_ms);
            self.trace.note(
                id,
                format_args!(
                    "repaired in {took_ms} ms ({} entries lost, reach {})",
                    watch.lost, watch.reach
                ),
            );
        }
    }

    /// At the end of a run: repairs still under way.
    pub(super) fn count_unfinished_repairs(&mut self) {
        let unfinished = self.repairs.unfinished();
        self.tally.add("repairs-unfinished", unfinished);
    }

    /// Damages stopped node `id`'s disk at rest as `aim` says: a bit of any
    /// durable file (0), of a sealed segment (1), of the last one (2), or a
    /// misdirected write over a segment (3). `None` if nothing to damage.
    pub(super) fn damage_at_rest(&mut self, id: u64, aim: u64) -> Option<String> {
        self.faults.damage(id);
        self.repairs.hold(id, held_by(&self.nodes[&id].vfs));
        let node = self.nodes.get_mut(&id).expect("node");
        let segments = segments_of(&node.vfs);
        let pick = aim >> 2;
        let (sealed, last) = match segments.split_last() {
            Some((last, sealed)) => (sealed.to_vec(), Some(last.clone())),
            None => (Vec::new(), None),
        };
        let path = match aim % 4 {
            1 if !sealed.is_empty() => sealed[(pick % sealed.len() as u64) as usize].clone(),
            1..=3 if last.is_some() => {
                if aim % 4 == 3 && !sealed.is_empty() && pick & 1 == 0 {
                    sealed[((pick >> 1) % sealed.len() as u64) as usize].clone()
                } else {
                    last.clone().expect("a last segment")
                }
            }
            _ => return node.vfs.flip_random_bit_at_rest().map(|d| format!("{d:?}")),
        };
        let bytes = node.vfs.durable_contents(&path).unwrap_or_default();
        if bytes.is_empty() {
            return None;
        }
        if aim % 4 == 3 {
            let what = misdirect(&node.vfs, &path, &bytes, pick)?;
            node.injected.push(Injected {
                path: path.clone(),
                text: what.clone(),
            });
            return Some(what);
        }
        let bit = (pick >> 8) % (bytes.len() as u64 * 8);
        node.vfs.flip_bit_at_rest(&path, bit).ok()?;
        Some(format!("bit {bit} of {} flipped at rest", path.display()))
    }
}

/// The last entry the node's log holds, read by durlog-raft from a copy
/// of its files on a disk of their own: reads of the node's disk would be
/// traced and could draw its faults, and the check must change nothing the
/// run does.
fn held_by(vfs: &SimVfs) -> Held {
    let store = Path::new(STORE_DIR);
    let log_dir = store.join(durlog_raft::LOG_DIR_NAME);
    let meta = store.join(durlog_raft::meta::META_FILE_NAME);
    let files: Vec<PathBuf> = vfs
        .files()
        .into_iter()
        .filter(|path| path.starts_with(&log_dir) || *path == meta)
        .collect();
    if !files.iter().any(|path| path.starts_with(&log_dir)) {
        return Ok(None);
    }
    let copy = SimVfs::new(0);
    copy.set_trace_recording(false);
    for path in &files {
        vfs.with_file_contents(path, |bytes| copy.put_durable_file(path, bytes));
    }
    durlog_raft::repair::last_log_id::<SimConfig>(copy, Path::new(STORE_DIR))
        .map_err(|error| error.to_string())
}

/// The bytes a repair moved aside from the damage on: what its reach
/// counted.
fn moved_bytes(vfs: &SimVfs, moved: &Quarantined) -> u64 {
    let total: u64 = vfs
        .files()
        .into_iter()
        .filter(|path| path.parent() == Some(moved.dir.as_path()))
        .filter_map(|path| vfs.with_file_contents(&path, |bytes| bytes.len() as u64))
        .sum();
    total.saturating_sub(moved.offset)
}

/// The node's segment files, in order.
fn segments_of(vfs: &durlog::vfs::SimVfs) -> Vec<PathBuf> {
    let dir = Path::new(STORE_DIR).join(durlog_raft::LOG_DIR_NAME);
    let mut segments: Vec<PathBuf> = vfs
        .files()
        .into_iter()
        .filter(|path| path.parent() == Some(dir.as_path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.len() == 24 && name.ends_with(".log"))
        })
        .collect();
    segments.sort();
    segments
}

/// A write of some of the file's own bytes landed at the wrong offset in
/// it, and was synced: what a misdirected write leaves at rest.
fn misdirect(vfs: &durlog::vfs::SimVfs, path: &Path, bytes: &[u8], pick: u64) -> Option<String> {
    let len = bytes.len() as u64;
    let span = (64 + (pick >> 4) % 448).min(len);
    let from = (pick >> 12) % (len - span + 1);
    let to = (pick >> 28) % (len - span + 1);
    if from == to {
        return None;
    }
    let chunk = &bytes[from as usize..(from + span) as usize];
    // The harness's own write: the disk's faults must not touch it.
    let faults = vfs.faults();
    vfs.set_faults(FaultConfig::none());
    let written = vfs.open(path, OpenMode::ReadWrite).and_then(|file| {
        file.write_at(chunk, to)?;
        file.sync_data()
    });
    vfs.set_faults(faults);
    written.ok()?;
    Some(format!(
        "misdirected write: {span} bytes of {} from offset {from} written at {to}",
        path.display()
    ))
}

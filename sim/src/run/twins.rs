//! Followers in another process: beside one subscriber in four that reads
//! `$all` as history, a `durlog::Follower` on the same simulated disk,
//! sharing no memory with the log, from the same seq. It polls the files
//! when its subscriber is polled, between steps (no group is then in
//! flight, so the files hold only what was acknowledged, or what recovery
//! kept); the oracle checks each record it hands over as it checks a
//! subscriber's (`Oracle::check_delivery`). It lives through a restart of
//! the writer's process, dies with a power loss and starts again after
//! the reopen where it was (or at the end of the log, if recovery lost
//! what it had read: an excused loss).
//!
//! What it may answer: `Purged` only when its next record was purged (it
//! starts again at the first seq kept); the refusal of a truncation that
//! cut records it read only when one did (it starts again after the last
//! seq kept); any other error only for a fault the disk injected.
//! Where the run's disk neither fails nor flips reads and damages nothing
//! at rest, a poll that finds nothing has read every acknowledged record.

use std::path::{Path, PathBuf};

use durlog::vfs::{FaultKind, Vfs};
use durlog::{Commit, Error, Follower, PositionFile};
use durlog_vfs::SimVfs;

use super::World;
use super::oracle::excuse::{Evidence, explains_io_error};
use super::oracle::{Check, SubFilter};

/// The most twins a run keeps: a new one replaces the oldest.
const TWINS_MAX: usize = 3;

/// The faults that may keep a poll from reading all that is there with
/// no error: a read that fails or flips, damage at rest or a write that
/// lands elsewhere.
const HIDING_FAULTS: [FaultKind; 5] = [
    FaultKind::ReadError,
    FaultKind::BitFlipOnRead,
    FaultKind::BitFlipAtRest,
    FaultKind::MisdirectedWrite,
    FaultKind::DuplicatedWrite,
];

/// Where the twins keep their positions, on the consumer's disk.
const POSITIONS_DIR: &str = "/consumers";

/// One follower in another process.
pub(crate) struct Twin {
    /// `None` between a power loss and the reopen that starts it again.
    follower: Option<Follower<SimVfs>>,
    /// The seq it must consider next.
    next: u64,
    /// Where it started, for a start again with no position recorded.
    from: u64,
    filter: SubFilter,
    /// The last seq a truncation kept, after this twin read records it
    /// cut: its next poll may refuse.
    cut: Option<u64>,
    /// Its position file on the consumer's disk (`None` between a power
    /// loss and the reopen, or if it could not be opened), and its path.
    position: Option<PositionFile>,
    path: PathBuf,
    /// The position last recorded with `Ok`, and those tried since.
    acked: Option<u64>,
    tried: Vec<u64>,
}

#[derive(Default)]
pub(crate) struct Twins {
    list: Vec<Twin>,
    /// Twins started in the run: each names its position file.
    started: u32,
    /// The consumer's disk, made at the first twin: it faults as the
    /// log's does, and loses power with it.
    disk: Option<SimVfs>,
}

fn follower(vfs: &SimVfs, dir: &Path, filter: &SubFilter, from: u64) -> Follower<SimVfs> {
    Follower::new(vfs.clone(), dir, from).with_filter(filter.engine_filter())
}

impl Twins {
    /// A truncation kept seqs up to `seq`: a twin that read past it
    /// (records it handed over or passed over) may refuse at its next poll.
    pub(crate) fn truncated(&mut self, seq: u64) {
        for twin in &mut self.list {
            let read = twin.follower.as_ref().map_or(twin.next, Follower::next_seq);
            if read > seq + 1 {
                twin.cut = Some(twin.cut.map_or(seq, |cut| cut.min(seq)));
            }
        }
    }

    /// A power loss: the followers' processes die with the machine, and
    /// the consumer's disk loses what it had not synced.
    pub(crate) fn power_lost(&mut self) {
        for twin in &mut self.list {
            (twin.follower, twin.position) = (None, None);
        }
        if let Some(disk) = &self.disk {
            disk.crash();
        }
    }

    /// The log reopened with seqs up to `end - 1`: each twin that died
    /// starts again where it was, or at `end`; one that lived through a
    /// restart and read past `end` saw records cut (a truncation in doubt,
    /// or an unacknowledged tail recovery did not keep).
    ///
    /// A twin that died starts again after the position its file holds:
    /// the one it last recorded with `Ok`, or one it tried since, unless
    /// a fault damaged the file at rest.
    pub(crate) fn resume(&mut self, vfs: &SimVfs, dir: &Path, end: u64) -> Result<(), String> {
        let disk = self.disk.clone();
        for twin in &mut self.list {
            if let Some(follower) = &twin.follower
                && follower.next_seq() > end
            {
                twin.cut = Some(twin.cut.map_or(end - 1, |cut| cut.min(end - 1)));
            }
            if twin.follower.is_some() {
                continue;
            }
            let start = match &disk {
                Some(disk) => twin.reopen_position(disk)?,
                None => twin.next,
            };
            twin.next = start.min(end);
            twin.cut = None;
            twin.follower = Some(follower(vfs, dir, &twin.filter, twin.next));
        }
        Ok(())
    }

    /// No twin has been started in the run.
    pub(crate) fn is_idle(&self) -> bool {
        self.list.is_empty() && self.disk.is_none()
    }

    pub(crate) fn clear(&mut self) {
        self.list.clear();
    }
}

impl Twin {
    /// After a power loss: its position file opened again, checked
    /// against what was recorded; where the twin starts again.
    fn reopen_position(&mut self, disk: &SimVfs) -> Result<u64, String> {
        let mark = disk.fault_log_len();
        let Some(file) = open_position(disk, &self.path) else {
            return Ok(self.next);
        };
        // Damage at rest, or a slot's read flipped twice (it reads a slot
        // that fails its check again, once).
        let flips = (disk.fault_log_since(mark).iter())
            .filter(|fault| fault.kind == FaultKind::BitFlipOnRead && fault.path == self.path)
            .count();
        let damaged = flips >= 2 || disk.damage().iter().any(|damage| damage.path == self.path);
        let file = match file {
            Ok(file) => file,
            // Refused as damage, and the disk damaged it: start over.
            Err(Error::Corrupt { .. }) if damaged => {
                let _ = disk.remove_file(&self.path);
                (self.acked, self.tried) = (None, Vec::new());
                return Ok(self.from);
            }
            Err(error) => {
                return Err(format!(
                    "a follower's position file {} was refused with no damage to it: {error}",
                    self.path.display()
                ));
            }
        };
        let now = file.position();
        let kept = now == self.acked || now.is_some_and(|seq| self.tried.contains(&seq));
        if !kept && !damaged {
            return Err(format!(
                "a follower's position file {} holds {now:?} after a power loss; it \
                 acknowledged {:?} and tried {:?} since",
                self.path.display(),
                self.acked,
                self.tried
            ));
        }
        // A read that damage or flips made return an older position may
        // read the newer one next time: both stay possible.
        let tried = match kept {
            true => Vec::new(),
            false => self.acked.into_iter().chain(self.tried.drain(..)).collect(),
        };
        (self.acked, self.tried) = (now, tried);
        self.position = Some(file);
        Ok(now.map_or(self.from, |seq| seq + 1))
    }

    /// Records the last seq read, if the twin read any since `before`: an
    /// error only for a fault the consumer's disk injected.
    fn record(&mut self, disk: &SimVfs, before: u64) -> Result<bool, String> {
        let read = self.follower.as_ref().map_or(before, Follower::next_seq);
        let Some(file) = self.position.as_mut().filter(|_| read > before) else {
            return Ok(false);
        };
        let mark = disk.fault_log_len();
        match file.record(read - 1) {
            Ok(()) => (self.acked, self.tried) = (Some(read - 1), Vec::new()),
            Err(Error::Io(_)) if explains_io_error(&disk.fault_log_since(mark)) => {
                self.tried.push(read - 1);
            }
            Err(error) => return Err(format!("recording a follower's position: {error}")),
        }
        Ok(true)
    }
}

/// The position file at `path`, opened on the consumer's disk, a few
/// times if faults fail it (`None` if they always did).
fn open_position(disk: &SimVfs, path: &Path) -> Option<Result<PositionFile, Error>> {
    for _ in 0..4 {
        match PositionFile::open(disk, path) {
            Err(Error::Io(_)) => disk.reboot(),
            opened => return Some(opened),
        }
    }
    None
}

impl World<'_> {
    /// A twin of a subscriber of `filter` from `from`, if the subscriber
    /// reads history and is one of every four (the first, fifth, ...): a
    /// twin's polls cost about a third of its subscriber's.
    pub(super) fn start_twin(&mut self, filter: &SubFilter, from: u64) {
        if filter.applying_metadata || self.subscribers % 4 != 1 {
            return;
        }
        note!(
            self,
            "      a follower of the files from seq {from} (twin {})",
            self.node.twins.list.len().min(TWINS_MAX - 1)
        );
        let disk = twins_disk(&mut self.node.twins, self.plan);
        let path = Path::new(POSITIONS_DIR).join(format!("twin-{}", self.node.twins.started));
        self.node.twins.started += 1;
        let position = disk
            .and_then(|disk| open_position(&disk, &path))
            .and_then(Result::ok);
        let acked = position.as_ref().and_then(PositionFile::position);
        let twins = &mut self.node.twins.list;
        if twins.len() == TWINS_MAX {
            twins.remove(0);
        }
        twins.push(Twin {
            follower: Some(follower(&self.node.vfs, &self.node.dir, filter, from)),
            next: from.max(1),
            from: from.max(1),
            filter: filter.clone(),
            cut: None,
            position,
            path,
            acked,
            tried: Vec::new(),
        });
    }

    /// Twin `index` (modulo how many there are) polls once.
    pub(super) fn poll_twin(&mut self, index: usize) -> Check {
        let count = self.node.twins.list.len();
        if count == 0 || self.log().is_poisoned() {
            return Ok(());
        }
        let index = index % count;
        let mark = self.node.vfs.fault_log_len();
        let twin = &mut self.node.twins.list[index];
        let Some(follower) = twin.follower.as_mut() else {
            return Ok(());
        };
        let before = follower.next_seq();
        let polled = follower.poll();
        note!(self, "      twin {index} polled: {}", describe(&polled));
        match polled {
            Ok(commits) => {
                self.check_twin_commits(index, &commits, before, mark)?;
                let Some(disk) = self.node.twins.disk.clone() else {
                    return Ok(());
                };
                if self.node.twins.list[index].record(&disk, before)? {
                    self.result.counters.file_positions += 1;
                }
                Ok(())
            }
            Err(error) => self.twin_error(index, error, mark),
        }
    }

    /// The records twin `index` handed over, from `before` on: each the
    /// acknowledged one; and if it read none (records the filter passes
    /// over count), it has read every acknowledged record.
    fn check_twin_commits(
        &mut self,
        index: usize,
        commits: &[Commit],
        before: u64,
        mark: usize,
    ) -> Check {
        let twin = &mut self.node.twins.list[index];
        for commit in commits {
            self.oracle
                .check_delivery(&mut twin.next, &twin.filter, commit)
                .map_err(|error| format!("a follower of the files: {error}"))?;
        }
        // Records the filter passes over count as read: its own seq says.
        let at = twin.follower.as_ref().map_or(0, Follower::next_seq);
        self.result.counters.file_deliveries += commits.len() as u64;
        let faults = self.node.vfs.fault_log_since(mark);
        super::excuse::no_read_error_swallowed(|| format!("follower {index}'s poll"), &faults)?;
        let end = self.oracle.model().last_seq() + 1;
        let quiet = HIDING_FAULTS
            .iter()
            .all(|&kind| !self.plan.faults.is_enabled(kind));
        if at == before && quiet && at < end {
            return Err(format!(
                "a follower of the files at seq {at} read nothing, yet the log has \
                 acknowledged seqs up to {}",
                end - 1
            ));
        }
        Ok(())
    }

    /// A twin's error: `Purged` when its next record was purged, the
    /// refusal of a cut when a truncation cut what it read, any other by a
    /// fault that explains it. After any, it starts again.
    fn twin_error(&mut self, index: usize, error: Error, mark: usize) -> Check {
        let first = self.oracle.model().first_seq();
        let twin = &mut self.node.twins.list[index];
        let restart_at = match &error {
            Error::Purged { first_seq } if *first_seq == first && twin.next < first => first,
            Error::Corrupt { reason, .. }
                if reason.contains("truncated the log") && twin.cut.is_some() =>
            {
                twin.cut.take().expect("checked") + 1
            }
            Error::Purged { .. } => {
                return Err(format!(
                    "a follower of the files at seq {} got {error}; the log keeps seqs from \
                     {first}",
                    twin.next
                ));
            }
            _ => {
                let faults = self.node.vfs.fault_log_since(mark);
                let evidence = Evidence::new(&self.node.vfs, &self.node.dir);
                self.oracle
                    .excuse_read_error(&error, &evidence, &faults)
                    .map_err(|why| format!("a follower of the files: {why}"))?;
                twin.next
            }
        };
        self.result.counters.file_follower_restarts += 1;
        let twin = &mut self.node.twins.list[index];
        twin.next = restart_at;
        twin.follower = Some(follower(
            &self.node.vfs,
            &self.node.dir,
            &twin.filter,
            restart_at,
        ));
        Ok(())
    }
}

/// The consumer's disk, made at the first twin with its directory made
/// durable (`None` if faults kept it from that: no positions this run).
fn twins_disk(twins: &mut Twins, plan: &crate::plan::Plan) -> Option<SimVfs> {
    if twins.disk.is_none() && twins.started == 0 {
        let disk = SimVfs::with_faults(plan.consumer_disk_seed, plan.faults.clone());
        let made = disk.create_dir_all(Path::new(POSITIONS_DIR)).is_ok()
            && (0..4).any(|_| disk.sync_dir(Path::new("/")).is_ok());
        twins.disk = made.then_some(disk);
    }
    twins.disk.clone()
}

fn describe(polled: &Result<Vec<Commit>, Error>) -> String {
    match polled {
        Ok(commits) => match (commits.first(), commits.last()) {
            (Some(first), Some(last)) => format!("seqs {}..={}", first.seq, last.seq),
            _ => "nothing new".to_owned(),
        },
        Err(error) => format!("{error}"),
    }
}

//! [`Follower`]: the records a writer in another process appends, read
//! from the segment files themselves, for processes that share no memory
//! with the writer (`durlog tail --follow`, a projection beside the
//! command side).
//!
//! A `Log`'s own subscriptions learn of each acknowledged group from its
//! feed; a follower has only the files. It keeps where its next record
//! starts and, at each [`Follower::poll`], reads what follows there:
//! every record that is whole and valid, as recovery reads it (CRC, seq,
//! batch, and its stream's versions continued), is handed over; the
//! first that is not (a write in the making, the zero tail) ends the
//! poll. When nothing follows and a segment named for the next seq has
//! appeared, the writer rolled, and the follower goes on there; if a
//! later segment has appeared instead, the bytes where it stands are
//! damage, and it says so, naming the file and offset.
//!
//! A record is handed over once it is whole in its file, which is a moment
//! before its writer's `fdatasync` returns. A power loss in that moment
//! takes it back with the writer's unacknowledged records (both processes
//! die in it, and a follower that stored what it handed over elsewhere
//! must check that store against the log when it starts again); a write
//! or sync that fails in that moment is cut back by the writer, which the
//! follower's next poll notices as a cut (below).
//!
//! What the writer does to the records the follower read is noticed at
//! the next poll, from the last one it read and the versions of the
//! streams it read: a purge that removed records it had not read yet is
//! `Error::Purged` (one that removed only segments it had read to the end
//! goes unnoticed, rightly: it had read them); a truncation
//! (`Log::truncate_after`) that cut the last record it read, or after
//! which the records go on from another version of a stream than the one
//! it read, is an `Error::Corrupt` naming the record, answered to every
//! later poll: the follower cannot tell how far back the cut went. A
//! consensus log, the one user of truncation, follows its own log through
//! its state machine instead.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{OpenMode, Vfs, VfsFile, read_exact_at};

use crate::error::Error;
use crate::format::file_names::{parse_segment_name, segment_name, segment_path};
use crate::format::record::{HEADER_SIZE, Header, parse_record};
use crate::format::tables::{STREAMS_FILE_NAME, StreamEntry, decode_streams};

use super::commit::Commit;
use super::filter::{Filter, Keep};
use super::settings::{Clock, system_now};
use super::streams::Shown;

/// Bytes a poll reads at a time, unless one record needs more.
const POLL_BYTES: u64 = 256 << 10;

/// Bytes a poll reads at a time at least (more once records fill them).
const CHUNK_MIN: u64 = 4 << 10;

/// Turns of a poll's loop, at most: reads, rolls and places found again.
const POLL_TURNS_MAX: usize = 256;

/// Where the follower reads: the segment holding its next record and where
/// that record starts (or will).
#[derive(Clone, Copy, Debug)]
struct Place {
    segment_first_seq: u64,
    offset: u64,
}

/// The last record the follower read (handed over or passed over): its
/// segment, where it starts, and its header, read again at each poll to
/// see that the writer did not cut it.
#[derive(Clone, Copy, Debug)]
struct Last {
    segment_first_seq: u64,
    start: u64,
    header: [u8; HEADER_SIZE],
}

/// The records appended to the log in a directory from a seq on, read
/// from its files as they appear (see the module doc): for a process that
/// shares no memory with the writer.
///
/// ```
/// use durlog::vfs::SimVfs;
/// use durlog::{Event, Expected, Follower, Log, Options};
///
/// let vfs = SimVfs::new(7);
/// let log = Log::open_with_vfs(vfs.clone(), "/log", Options::default())?;
/// // Elsewhere: another process, with a PosixVfs on the same directory.
/// let mut follower = Follower::new(vfs.clone(), "/log", 1);
/// assert!(follower.poll()?.is_empty());
/// log.append("order-42", Expected::NoStream, &[Event::new("created", b"{}".to_vec())])?;
/// let commits = follower.poll()?;
/// assert_eq!((commits[0].seq, commits[0].stream.as_str()), (1, "order-42"));
/// assert_eq!(follower.next_seq(), 2);
/// # Ok::<(), durlog::Error>(())
/// ```
pub struct Follower<V: Vfs> {
    vfs: V,
    dir: PathBuf,
    filter: Filter,
    next_seq: u64,
    place: Option<Place>,
    last: Option<Last>,
    /// The newest version of each stream it has read a record of: the
    /// next record of a stream continues it (or is not the log's).
    versions: BTreeMap<String, u64>,
    /// It read from seq 1, so a stream it has not seen starts at version
    /// 1 (were seq 1 purged, it would have answered `Purged`).
    knows_all: bool,
    /// The clock metadata's maximum age is read against.
    clock: Option<Clock>,
    /// Set once the records it handed over were replaced: every later
    /// poll answers it again.
    replaced: Option<(PathBuf, u64, String)>,
    buf: Vec<u8>,
    /// Bytes the next read asks for.
    chunk: u64,
}

impl<V: Vfs> Follower<V> {
    /// A follower of the log in `dir` whose first record is the one with
    /// seq `from_seq` (0 counts as 1). It reads nothing until `poll`.
    pub fn new(vfs: V, dir: impl AsRef<Path>, from_seq: u64) -> Follower<V> {
        Follower {
            vfs,
            dir: dir.as_ref().to_path_buf(),
            filter: Filter::all(),
            next_seq: from_seq.max(1),
            place: None,
            last: None,
            versions: BTreeMap::new(),
            knows_all: from_seq <= 1,
            clock: None,
            replaced: None,
            buf: Vec::new(),
            chunk: CHUNK_MIN,
        }
    }

    /// Only the records and events `filter` keeps, as `Log::read_all_filtered`
    /// keeps them; with `Filter::applying_metadata`, each stream's metadata
    /// and deletion as the writer last recorded them, read again at every
    /// poll that found records.
    pub fn with_filter(mut self, filter: Filter) -> Follower<V> {
        self.filter = filter;
        self
    }

    /// The clock a stream's maximum age is read against (the host's, in
    /// unix nanoseconds, unless told otherwise).
    pub fn with_clock(mut self, clock: Clock) -> Follower<V> {
        self.clock = Some(clock);
        self
    }

    /// The seq of the next record it reads (those passed over by the
    /// filter count as read).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The records that are whole in the files now, from `next_seq` on, in
    /// seq order (at most about 256 KiB of them, across segments); none if
    /// nothing new is. A record the filter keeps nothing of is passed
    /// over. Metadata, where the filter applies it, is applied as of the
    /// last record the poll read.
    pub fn poll(&mut self) -> Result<Vec<Commit>, Error> {
        if let Some((file, offset, reason)) = &self.replaced {
            return Err(corrupt(file, *offset, reason.clone()));
        }
        // Every record is decoded whole, also those the filter passes
        // over: each continues its stream's versions, or it is not the
        // log's (as recovery reads it); the filter applies after.
        let read_all = Filter::all();
        let keep = Keep::unshown(&read_all);
        let mut commits = Vec::new();
        let mut budget = POLL_BYTES;
        // The segment file open in this poll, and whether the last record
        // read was found as it was: once a poll, and after a loss.
        let mut open: Option<(u64, Box<dyn VfsFile>)> = None;
        let mut checked = false;
        // Bounded all the same: each turn reads records, moves to the next
        // segment, or finds its place again after a purge.
        for _ in 0..POLL_TURNS_MAX {
            if self.place.is_none() {
                self.place = self.locate()?;
            }
            let Some(place) = self.place else { break };
            if open.as_ref().map(|(first, _)| *first) != Some(place.segment_first_seq) {
                open = (self.open_segment(place.segment_first_seq)?)
                    .map(|file| (place.segment_first_seq, file));
            }
            let intact = match &open {
                Some((_, file)) => checked || self.last_intact(Some(file.as_ref()), place)?,
                None => false,
            };
            let file = match &open {
                Some((_, file)) if intact => file,
                // What this poll read goes out first; the next finds out.
                _ if !commits.is_empty() => break,
                _ => {
                    (open, checked) = (None, false);
                    self.lost()?;
                    continue;
                }
            };
            checked = true;
            let used = self.read_from(file.as_ref(), place, budget, &keep, &mut commits)?;
            if used > 0 {
                budget = budget.saturating_sub(used);
                if budget == 0 {
                    break;
                }
                continue;
            }
            // Nothing new here: the writer may have rolled.
            let Some(next) = self.open_segment(self.next_seq)? else {
                // Zeros or nothing at its place: a write in the making.
                // Other bytes are damage if the log goes on past them.
                if crate::format::all_zeros(&self.buf) {
                    break;
                }
                let Some(later) = self.later_segment(&commits)? else {
                    break;
                };
                // A read the disk got wrong is no damage: once more.
                if self.read_from(file.as_ref(), place, budget, &keep, &mut commits)? > 0 {
                    continue;
                }
                return Err(self.skipped(place, later));
            };
            self.place = Some(Place {
                segment_first_seq: self.next_seq,
                offset: 0,
            });
            open = Some((self.next_seq, next));
        }
        self.kept(commits)
    }

    /// Reads the records at `place` into `commits`, about `budget` bytes
    /// of them (one whole record if it is longer); the bytes it used.
    fn read_from(
        &mut self,
        file: &dyn VfsFile,
        mut place: Place,
        budget: u64,
        keep: &Keep<'_>,
        commits: &mut Vec<Commit>,
    ) -> Result<u64, Error> {
        let remaining = file.len()?.saturating_sub(place.offset);
        let mut want = remaining.min(budget).min(self.chunk);
        self.buf.resize(want as usize, 0);
        read_exact_at(file, &mut self.buf, place.offset)?;
        // A record longer than the budget is read whole, once it is there.
        if let Some(len) = Header::peek(&self.buf).map(Header::record_len)
            && len > want
            && len <= remaining
        {
            want = len;
            self.buf.resize(want as usize, 0);
            read_exact_at(file, &mut self.buf, place.offset)?;
        }
        let mut at = 0;
        while let Ok(record) = parse_record(&self.buf[at..]) {
            let Ok(Some(commit)) = keep.commit(&record, self.next_seq) else {
                break;
            };
            // Versions past u64::MAX are no stream's: not the log's record.
            let count = commit.events.len() as u64;
            let Some(last_version) = commit.first_version.checked_add(count - 1) else {
                break;
            };
            // Nor are seqs past u64::MAX: no record can follow this one.
            let Some(next_seq) = self.next_seq.checked_add(1) else {
                break;
            };
            let expected = match self.versions.get(&commit.stream) {
                Some(&version) => version.checked_add(1),
                None => self.knows_all.then_some(1),
            };
            let continues = match self.versions.contains_key(&commit.stream) || self.knows_all {
                true => expected == Some(commit.first_version),
                false => true,
            };
            if !continues && at == 0 && commits.is_empty() {
                // Whole, its CRC and seq right, yet not where the stream
                // was: what the follower read is not the log's any more
                // (a truncation it could not see, its segment purged since).
                let reason = format!(
                    "the record with seq {} continues stream {:?} at version {}, where this \
                     follower read it up to {:?}: the writer truncated the log (Log::truncate_after) \
                     and appended again under records it read; follow again from a seq known to \
                     be kept",
                    self.next_seq,
                    commit.stream,
                    commit.first_version,
                    self.versions.get(&commit.stream)
                );
                let file = segment_path(&self.dir, place.segment_first_seq);
                self.replaced = Some((file.clone(), place.offset, reason.clone()));
                return Err(corrupt(&file, place.offset, reason));
            }
            if !continues {
                break;
            }
            let header: [u8; HEADER_SIZE] = self.buf[at..at + HEADER_SIZE]
                .try_into()
                .expect("a parsed record has its header");
            debug_assert_eq!(Header::from_bytes(&header).seq, self.next_seq);
            self.last = Some(Last {
                segment_first_seq: place.segment_first_seq,
                start: place.offset + at as u64,
                header,
            });
            self.versions.insert(commit.stream.clone(), last_version);
            commits.push(commit);
            at += record.len;
            self.next_seq = next_seq;
        }
        // Sized for the next read: what this one used, with room to grow;
        // an idle poll reads a few KiB of the writer's zero tail, not all.
        self.chunk = (2 * at as u64).clamp(CHUNK_MIN, POLL_BYTES);
        place.offset += at as u64;
        self.place = Some(place);
        Ok(at as u64)
    }

    /// The first seq of a segment after `next_seq`, if this poll read
    /// nothing and there is one: then the bytes at the follower's place
    /// are damage, not a write in the making (a writer starts a segment
    /// only after the records before it are durable).
    fn later_segment(&self, commits: &[Commit]) -> Result<Option<u64>, Error> {
        if !commits.is_empty() {
            return Ok(None);
        }
        let firsts = self.segment_firsts()?;
        Ok(firsts.into_iter().find(|&first| first > self.next_seq))
    }

    /// The error for a record at `place` that is not whole and valid while
    /// the log goes on in the segment starting at `later`.
    fn skipped(&self, place: Place, later: u64) -> Error {
        corrupt(
            &segment_path(&self.dir, place.segment_first_seq),
            place.offset,
            format!(
                "the record with seq {} is not whole and valid here, yet the log goes on \
                 in segment {}",
                self.next_seq,
                segment_name(later)
            ),
        )
    }

    /// Whether the last record read is still where it was, as it was:
    /// `file` is `place`'s segment (`None` if it is gone), which holds it
    /// unless the follower has just moved on to a new segment.
    fn last_intact(&self, file: Option<&dyn VfsFile>, place: Place) -> Result<bool, Error> {
        let Some(last) = self.last else {
            return Ok(true);
        };
        let other;
        let file = match file {
            Some(file) if last.segment_first_seq == place.segment_first_seq => file,
            _ => match self.open_segment(last.segment_first_seq)? {
                Some(file) => {
                    other = file;
                    other.as_ref()
                }
                None => return Ok(false),
            },
        };
        let mut now = [0; HEADER_SIZE];
        match file.read_at(&mut now, last.start)? {
            HEADER_SIZE => Ok(now == last.header),
            _ => Ok(false),
        }
    }

    /// The segment it reads, or the last record it read, is gone or
    /// changed: a purge that removed a segment it had read to the end goes
    /// on in the next; any other change of what it read is a truncation
    /// by the writer, and the follower cannot tell how far back it cut.
    /// Leaves `place` where the next record is (or `None`), or fails.
    fn lost(&mut self) -> Result<(), Error> {
        self.place = None;
        let last = self.last;
        let place = Place {
            segment_first_seq: last.map_or(0, |last| last.segment_first_seq),
            offset: 0,
        };
        if self.last_intact(None, place)? {
            // The record before next_seq is still there: only the
            // segment it was to come in is not there yet.
            self.place = self.locate()?;
            return Ok(());
        }
        let last = last.expect("last_intact holds with no last record");
        let located = self.locate()?;
        // A purge removes the oldest segments first: one that took the
        // segment of the last record read took every one before it. A
        // segment left before next_seq says a truncation removed it (and
        // the writer appended again, up to a segment named next_seq).
        let gone = self.open_segment(last.segment_first_seq)?.is_none()
            && self
                .segment_firsts()?
                .iter()
                .all(|&first| first >= self.next_seq);
        if gone && located.is_some_and(|place| place.segment_first_seq == self.next_seq) {
            // Nothing left to vouch for: its next record starts a segment.
            durlog_vfs::mark!("follower: a segment it had read was purged");
            (self.place, self.last) = (located, None);
            return Ok(());
        }
        let file = segment_path(&self.dir, last.segment_first_seq);
        let reason = format!(
            "the record with seq {} that this follower read is no longer there as it was: \
             the writer truncated the log (Log::truncate_after), and the follower cannot tell \
             how far back; follow again from a seq known to be kept",
            self.next_seq - 1
        );
        durlog_vfs::mark!("follower: a record it read was cut");
        self.replaced = Some((file.clone(), last.start, reason.clone()));
        Err(corrupt(&file, last.start, reason))
    }

    /// Where `next_seq` starts: in the segment with the highest first seq
    /// at or below it, after the records before it. `None` while no
    /// segment holds the records before it (an empty log, or one that has
    /// not reached it yet); `Purged` if every segment starts after it.
    ///
    /// A follower that has read nothing yet takes the record before
    /// `next_seq` as its last one read: a cut under its start is a cut
    /// under it all the same.
    fn locate(&mut self) -> Result<Option<Place>, Error> {
        let firsts = self.segment_firsts()?;
        let Some(&first) = firsts.iter().rev().find(|&&first| first <= self.next_seq) else {
            return match firsts.first() {
                Some(&first_seq) => Err(Error::Purged { first_seq }),
                None => Ok(None),
            };
        };
        let (seq, place, last) = self.scan(first, self.next_seq)?;
        if seq != self.next_seq {
            return Ok(None);
        }
        if self.last.is_none() {
            self.last = last;
        }
        Ok(Some(place))
    }

    /// Walks the records of the segment starting at `first` up to the one
    /// with seq `until`, or to the first that is not whole and valid with
    /// the next seq: the seq it stopped at, the place there, and the last
    /// record it passed. Each is checked (CRC) as it is walked: a length
    /// a read flipped would place the follower where no record starts.
    fn scan(&self, first: u64, until: u64) -> Result<(u64, Place, Option<Last>), Error> {
        let mut place = Place {
            segment_first_seq: first,
            offset: 0,
        };
        let (mut seq, mut last) = (first, None);
        let Some(file) = self.open_segment(first)? else {
            return Ok((seq, place, last));
        };
        let len = file.len()?;
        let mut buf = Vec::new();
        while seq < until && place.offset < len {
            let remaining = len - place.offset;
            let mut want = remaining.min(POLL_BYTES);
            buf.resize(want as usize, 0);
            read_exact_at(file.as_ref(), &mut buf, place.offset)?;
            if let Some(record_len) = Header::peek(&buf).map(Header::record_len)
                && record_len > want
                && record_len <= remaining
            {
                want = record_len;
                buf.resize(want as usize, 0);
                read_exact_at(file.as_ref(), &mut buf, place.offset)?;
            }
            let mut at = 0;
            while seq < until {
                let Ok(record) = parse_record(&buf[at..]) else {
                    break;
                };
                if record.seq != seq {
                    break;
                }
                last = Some(Last {
                    segment_first_seq: first,
                    start: place.offset + at as u64,
                    header: buf[at..at + HEADER_SIZE]
                        .try_into()
                        .expect("a parsed record has its header"),
                });
                at += record.len;
                seq += 1;
            }
            if at == 0 {
                break;
            }
            place.offset += at as u64;
        }
        Ok((seq, place, last))
    }

    /// The first seqs of the directory's segments, in order.
    fn segment_firsts(&self) -> Result<Vec<u64>, Error> {
        let mut firsts: Vec<u64> = self
            .vfs
            .list_dir(&self.dir)?
            .into_iter()
            .filter_map(|entry| parse_segment_name(&entry.name))
            .collect();
        firsts.sort_unstable();
        Ok(firsts)
    }

    /// The segment starting at `first`, if there is one.
    fn open_segment(&self, first: u64) -> Result<Option<Box<dyn VfsFile>>, Error> {
        let path = segment_path(&self.dir, first);
        match self.vfs.open(&path, OpenMode::ReadOnly) {
            Ok(file) => Ok(Some(file)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// `commits` (every record read) as the filter keeps them, with each
    /// stream's metadata and deletion applied, if it applies them, as the
    /// table in the directory holds them now and with the stream's
    /// version as of the last record read.
    fn kept(&self, mut commits: Vec<Commit>) -> Result<Vec<Commit>, Error> {
        let filter = &self.filter;
        let table = match filter.applies_metadata() && !commits.is_empty() {
            true => self.stream_table()?,
            false => BTreeMap::new(),
        };
        let now = self.clock.as_ref().map_or_else(system_now, |now| now());
        commits.retain_mut(|commit| {
            if !filter.keeps_stream(&commit.stream) {
                return false;
            }
            let shown = match table.get(&commit.stream) {
                Some(entry) => Shown::of(entry, self.versions[&commit.stream], || now),
                None => Shown::ALL,
            };
            commit.events.retain(|event| {
                filter.keeps_type(&event.event_type) && shown.shows(event.version, event.at)
            });
            !commit.events.is_empty()
        });
        Ok(commits)
    }

    /// The table of stream metadata and deletions (empty if the log has
    /// none). The writer replaces it whole by a rename, so a read sees one
    /// table or the next; a damaged one is refused, named, as `Log::open`
    /// refuses it.
    fn stream_table(&self) -> Result<BTreeMap<String, StreamEntry>, Error> {
        let path = self.dir.join(STREAMS_FILE_NAME);
        let file = match self.vfs.open(&path, OpenMode::ReadOnly) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(error) => return Err(error.into()),
        };
        let mut bytes = vec![0; file.len()? as usize];
        read_exact_at(file.as_ref(), &mut bytes, 0)?;
        decode_streams(&bytes).map_err(|error| {
            corrupt(
                &path,
                0,
                format!("the table of stream metadata is damaged ({error})"),
            )
        })
    }
}

fn corrupt(file: &Path, offset: u64, reason: String) -> Error {
    Error::Corrupt {
        file: file.to_path_buf(),
        offset,
        reason,
    }
}

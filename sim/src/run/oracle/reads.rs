//! What readers see, as the oracle judges it: a stream read, the whole
//! log read (`read_all`, a consumer resuming, a reopen's full read), a
//! subscriber's deliveries; each against the model's acknowledged records
//! as the model's tables show them (metadata, deletions), with the
//! excuses of `excuse.rs` for a read that met damage.

use crate::run::clock::{Clock, time_at};
use std::collections::BTreeMap;

use durlog::{Commit, CommitRef, Error, Event, EventRef, Log};
use durlog_vfs::FaultEvent;

use crate::model::{Extras, ModelEvent};

use super::all::{Reader, check_shown};
use super::excuse::{self, Evidence};
use super::{Check, Oracle, SubFilter};

impl Oracle {
    /// Checks a read of `stream` from `from`, at most `limit` events;
    /// `faults` are those the disk injected during it, `clock` the ticks of
    /// the run's clock before and after it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_read(
        &mut self,
        stream: &str,
        from: u64,
        limit: usize,
        got: Result<Vec<Event>, Error>,
        evidence: &Evidence<'_>,
        faults: &[FaultEvent],
        clock: (i64, i64),
    ) -> Check {
        let first_kept = self.model.purged_events(stream) + 1;
        let from = from.max(1).max(self.model.shown_from(stream));
        let purged = limit > 0 && from < first_kept && from <= self.model.version(stream);
        match got {
            Err(Error::Purged { first_seq }) if purged && first_seq == self.model.first_seq() => {
                Ok(())
            }
            _ if purged => Err(format!(
                "read {stream} from {from}: events before version {first_kept} were purged, yet it returned {got:?}"
            )),
            Ok(events) => {
                excuse::no_read_error_swallowed(|| format!("read {stream} from {from}"), faults)?;
                self.check_events(stream, from, limit, &events, clock)
            }
            Err(error) => self.excuse_read_error(&error, evidence, faults),
        }
    }

    /// `events`, read from `stream` from version `from` (past what its
    /// metadata hides), at most `limit`: the model's kept events from
    /// there, exactly. A maximum age hides the oldest: those stamped
    /// before the clock's first possible reading during the read, less the
    /// age, must be hidden, those at or after its last possible reading,
    /// less the age, shown (`clock`: ticks before and after the read).
    fn check_events(
        &self,
        stream: &str,
        from: u64,
        limit: usize,
        events: &[Event],
        clock: (i64, i64),
    ) -> Check {
        let first_kept = self.model.purged_events(stream) + 1;
        let kept = self.model.events(stream);
        let at_from = from.saturating_sub(first_kept).min(kept.len() as u64) as usize;
        let (lowest, highest) = match self.model.tables.entry(stream).max_age {
            None => (at_from, at_from),
            Some(age) => {
                let age = age as i64;
                let first = |now: i64| {
                    at_from + kept[at_from..].partition_point(|event| event.at < now - age)
                };
                (first(time_at(clock.0 + 1)), first(time_at(clock.1)))
            }
        };
        let start = match events.first() {
            None if limit == 0 || highest == kept.len() => return Ok(()),
            None => {
                return Err(format!(
                    "read {stream} from {from} limit {limit}: nothing, the model shows {} events",
                    kept.len() - highest
                ));
            }
            Some(event) => event.version.saturating_sub(first_kept) as usize,
        };
        if start < lowest || start > highest {
            return Err(format!(
                "read {stream} from {from} limit {limit}: starts at version {}, the model shows from {} to {}",
                start as u64 + first_kept,
                lowest as u64 + first_kept,
                highest as u64 + first_kept
            ));
        }
        let want = &kept[start..(start + limit.min(kept.len() - start))];
        if events.len() != want.len() {
            return Err(format!(
                "read {stream} from {from} limit {limit}: {} events, the model has {}",
                events.len(),
                want.len()
            ));
        }
        for (i, (event, model)) in events.iter().zip(want).enumerate() {
            check_event(
                stream,
                &event.as_ref(),
                model,
                first_kept + (start + i) as u64,
            )?;
        }
        Ok(())
    }

    /// A subscriber whose next seq is `next` (and which takes what
    /// `filter` keeps) was handed `commit`: the next acknowledged record
    /// with events it keeps, exactly those events as acknowledged, none
    /// skipped, none repeated, none not yet acknowledged. `$all` is
    /// history: metadata and deletions change nothing, unless the filter
    /// applies them. Then a stream that has had metadata or a deletion in
    /// this run may show fewer of its events than the filter keeps (its
    /// rules changed while the subscription read ahead, and a maximum age
    /// depends on the clock): those delivered must be acknowledged ones it
    /// keeps, and such a record may be passed over.
    pub(crate) fn check_delivery(
        &self,
        next: &mut u64,
        filter: &SubFilter,
        commit: &Commit,
    ) -> Check {
        let seq = commit.seq;
        if seq < *next {
            return Err(format!(
                "a subscriber was handed seq {seq} again (it had gone on to {next})"
            ));
        }
        let acked = self.model.last_seq();
        let view = match filter.applying_metadata {
            true => View::AppliedWhileReading,
            false => View::History,
        };
        for skipped in *next..seq {
            let Some((stream, first_version, events)) = self.model.record(skipped) else {
                break;
            };
            let kept = self.kept_events(stream, first_version, events, filter, view);
            if kept.strict && kept.any() {
                return Err(format!(
                    "a subscriber to {filter:?} skipped seq {skipped} of stream {stream} and was handed seq {seq}"
                ));
            }
        }
        let Some((stream, first_version, events)) = self.model.record(seq) else {
            return Err(format!(
                "a subscriber was handed seq {seq}, which is not acknowledged (the last acknowledged is {acked})"
            ));
        };
        let kept = self.kept_events(stream, first_version, events, filter, view);
        let lent: Vec<EventRef<'_>> = commit.events.iter().map(Event::as_ref).collect();
        let handed = CommitRef {
            seq,
            stream: &commit.stream,
            first_version: commit.first_version,
            events: &lent,
        };
        check_shown(&handed, &kept)
            .map_err(|error| format!("a subscriber to {filter:?} was handed: {error}"))?;
        let floor = filter.floor(stream);
        if let Some(version) = lent.iter().map(|event| event.version).find(|&v| v < floor) {
            return Err(format!(
                "a subscriber to {filter:?} was handed seq {seq} with version {version}, below the lowest first version its stream's rules showed since it started ({floor})"
            ));
        }
        *next = seq + 1;
        Ok(())
    }

    /// The events of a record (`events`, from `first_version`) of `stream`
    /// that `filter` keeps as `view` reads them, with whether that is
    /// exact (see [`View`]). A view, not a copy: the oracle asks this of
    /// every record at every reopen.
    pub(super) fn kept_events<'m>(
        &self,
        stream: &'m str,
        first_version: u64,
        events: &'m [ModelEvent],
        filter: &'m SubFilter,
        view: View,
    ) -> Kept<'m> {
        let tables = &self.model.tables;
        let ruled = || tables.ever.contains(stream);
        let (from, strict) = match view {
            View::History => (1, true),
            View::AppliedNow => (
                self.model.shown_from(stream),
                !ruled() || tables.entry(stream).max_age.is_none(),
            ),
            View::AppliedWhileReading => (1, !ruled()),
        };
        Kept {
            stream,
            first_version,
            events,
            from,
            keeps_stream: filter.keeps_stream(stream),
            filter,
            strict,
        }
    }

    /// For each stream whose rules hide its first versions now, the first
    /// version they show: the lowest over the tables the disk may hold
    /// (changes in doubt undone, which a reopen may find), since the log
    /// may be showing any of them.
    pub(crate) fn shown_floors(&self) -> BTreeMap<String, u64> {
        let candidates = self.table_candidates();
        let mut floors = BTreeMap::new();
        for stream in &self.model.tables.ever {
            let version = self.model.version(stream);
            let floor = candidates
                .iter()
                .map(|tables| tables.shown_from(stream, version))
                .min()
                .unwrap_or(1);
            if floor > 1 {
                floors.insert(stream.clone(), floor);
            }
        }
        floors
    }

    /// Every stream reads back exactly as acknowledged, as its metadata
    /// and deletion show it; `streams()` lists those not deleted.
    pub(crate) fn check_log(&mut self, log: &Log, evidence: &Evidence<'_>, clock: &Clock) -> Check {
        self.check_bounds(log)?;
        let names = self.model.all_stream_names();
        let backward = names.get(self.log_checks % names.len().max(1)).cloned();
        self.log_checks += 1;
        for name in names {
            // From version 1 (a purge answers Purged, unless the
            // stream's metadata hides what it removed), then everything
            // kept.
            let first_kept = self.model.purged_events(&name) + 1;
            for (from, limit) in [(1, 1), (first_kept, usize::MAX)] {
                self.read_and_check(log, &name, from, limit, evidence, clock)?;
            }
            if backward.as_ref() == Some(&name) {
                self.check_backward(log, &name, evidence, clock)?;
            }
        }
        Ok(())
    }

    /// After a reopen that does not read everything back every way: the
    /// bounds and versions that `check_bounds` checks, every event read
    /// back in the whole log read as history (SPEC section 6: after every
    /// reopen every acknowledged event reads back exactly), and the records
    /// since the last reopen read back the other ways too: each of their
    /// streams from its first event among them (through the index that
    /// Open rebuilt), and the log from the first of them with the
    /// metadata applied.
    pub(super) fn check_read_back(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        clock: &Clock,
    ) -> Check {
        self.check_bounds(log)?;
        let from = (self.model.read_back_through() + 1).max(self.model.first_seq());
        let mut firsts: BTreeMap<String, u64> = BTreeMap::new();
        for seq in from..=self.model.last_seq() {
            if let Some((stream, first_version, _)) = self.model.record(seq)
                && !firsts.contains_key(stream)
            {
                firsts.insert(stream.to_owned(), first_version);
            }
        }
        for (name, first_version) in firsts {
            self.read_and_check(log, &name, first_version, usize::MAX, evidence, clock)?;
        }
        self.check_history_and_applied(log, evidence, from, Reader::Lending)
    }

    /// `stream` read from `from`, at most `limit` events, and checked.
    fn read_and_check(
        &mut self,
        log: &Log,
        stream: &str,
        from: u64,
        limit: usize,
        evidence: &Evidence<'_>,
        clock: &Clock,
    ) -> Check {
        let (mark, before) = (evidence.vfs.fault_log_len(), clock.ticks());
        let got = log.read(stream, from, limit);
        let ticks = (before, clock.ticks());
        let faults = evidence.vfs.fault_log_since(mark);
        self.check_read(stream, from, limit, got, evidence, &faults, ticks)
    }

    /// The log's seqs and size, its streams (`streams()` lists those not
    /// deleted) and every stream's version are the model's.
    fn check_bounds(&self, log: &Log) -> Check {
        let names = log.streams("");
        if names != self.model.stream_names() {
            return Err(format!(
                "streams {names:?}, the model has {:?}",
                self.model.stream_names()
            ));
        }
        if log.last_seq() != self.model.last_seq()
            || log.size() != self.model.size()
            || log.first_seq() != self.model.first_seq()
        {
            return Err(format!(
                "log at seqs {}..={} size {}, the model at {}..={} size {}",
                log.first_seq(),
                log.last_seq(),
                log.size(),
                self.model.first_seq(),
                self.model.last_seq(),
                self.model.size()
            ));
        }
        for name in self.model.all_stream_names() {
            if log.version(&name) != self.model.version(&name) {
                return Err(format!(
                    "{name} at version {}, the model at {}",
                    log.version(&name),
                    self.model.version(&name)
                ));
            }
        }
        Ok(())
    }

    /// `stream` read backward whole, from its newest event: what a read
    /// forward from its first kept event shows, newest first (a purge
    /// leaves out what it removed); `Purged` if a purge removed its newest
    /// event, the first one asked for, and its rules do not hide it.
    fn check_backward(
        &mut self,
        log: &Log,
        stream: &str,
        evidence: &Evidence<'_>,
        clock: &Clock,
    ) -> Check {
        let (mark, before) = (evidence.vfs.fault_log_len(), clock.ticks());
        let got = log.read_backward(stream, u64::MAX, usize::MAX);
        let ticks = (before, clock.ticks());
        let faults = evidence.vfs.fault_log_since(mark);
        let version = self.model.version(stream);
        let purged = version > 0
            && self.model.events(stream).is_empty()
            && version >= self.model.shown_from(stream);
        let mut events = match got {
            Err(Error::Purged { first_seq }) if purged && first_seq == self.model.first_seq() => {
                return Ok(());
            }
            _ if purged => {
                return Err(format!(
                    "read {stream} backward: its newest event (version {version}) was purged, yet it returned {got:?}"
                ));
            }
            Ok(events) => events,
            Err(error) => return self.excuse_read_error(&error, evidence, &faults),
        };
        excuse::no_read_error_swallowed(|| format!("read {stream} backward"), &faults)?;
        if !events.is_sorted_by(|newer, older| newer.version > older.version) {
            return Err(format!(
                "read {stream} backward: versions {:?}, not newest first",
                events.iter().map(|event| event.version).collect::<Vec<_>>()
            ));
        }
        events.reverse();
        let from = (self.model.purged_events(stream) + 1).max(self.model.shown_from(stream));
        self.check_events(stream, from, usize::MAX, &events, ticks)
            .map_err(|error| format!("backward: {error}"))
    }
}

/// How a reader of the whole log treats the streams' metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum View {
    /// `$all` as history: every acknowledged event the filter keeps,
    /// exactly.
    History,
    /// Metadata applied by one read, as the model's tables are now:
    /// exact for a stream never ruled in the run or without a maximum age
    /// (which the clock decides), else a bound.
    AppliedNow,
    /// Metadata applied by a subscription, which reads ahead under the
    /// rules of its read: exact only for a stream never ruled in the run.
    AppliedWhileReading,
}

/// The events of one record that a reader keeps (`Oracle::kept_events`).
pub(super) struct Kept<'m> {
    pub(super) stream: &'m str,
    pub(super) first_version: u64,
    pub(super) events: &'m [ModelEvent],
    /// The first version the stream's metadata shows (1: all).
    from: u64,
    keeps_stream: bool,
    filter: &'m SubFilter,
    /// The kept events are exactly what a reader must get, not a bound.
    pub(super) strict: bool,
}

impl Kept<'_> {
    pub(super) fn keeps(&self, version: u64) -> bool {
        let index = version.wrapping_sub(self.first_version);
        self.keeps_stream
            && version >= self.from
            && (self.events.get(index as usize))
                .is_some_and(|event| self.filter.keeps_type(&event.event_type))
    }

    pub(super) fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        (self.first_version..)
            .take(self.events.len())
            .filter(|&version| self.keeps(version))
    }

    pub(super) fn any(&self) -> bool {
        self.versions().next().is_some()
    }
}

pub(super) fn check_event(
    stream: &str,
    event: &EventRef<'_>,
    model: &ModelEvent,
    version: u64,
) -> Check {
    let extras = &model.extras;
    if event.id() != extras.id
        || event.metadata() != extras.metadata
        || event.content_type() != extras.content_type.as_deref()
    {
        return Err(format!(
            "{stream} version {version}: read with {:?}, acknowledged with {extras:?}",
            Extras::of(event)
        ));
    }
    if event.stream != stream
        || event.version != version
        || event.event_type != model.event_type
        || event.data != model.data
        || event.at != model.at
    {
        return Err(format!(
            "{stream} version {version}: read {{stream {:?}, version {}, type {:?}, {} data bytes, at {}}}, acknowledged {{type {:?}, {} data bytes, at {}}}",
            event.stream,
            event.version,
            event.event_type,
            event.data.len(),
            event.at,
            model.event_type,
            model.data.len(),
            model.at
        ));
    }
    Ok(())
}

//! What readers see, as the oracle judges it: a stream read, the whole
//! log read (`read_all`, a consumer resuming, a reopen's full read), a
//! subscriber's deliveries; each against the model's acknowledged records
//! as the model's tables show them (metadata, deletions), with the
//! excuses of `excuse.rs` for a read that met damage.

use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::SeqCst;

use durlog::{Commit, Error, Event, Log};
use durlog_vfs::FaultEvent;

use crate::model::ModelEvent;

use super::excuse::{self, Evidence};
use super::follow::SubFilter;
use super::oracle::{Check, Oracle};

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
                (
                    first(super::clock_at(clock.0 + 1)),
                    first(super::clock_at(clock.1)),
                )
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
            check_event(stream, event, model, first_kept + (start + i) as u64)?;
        }
        Ok(())
    }

    /// A subscriber whose next seq is `next` (and which takes what
    /// `filter` keeps) was handed `commit`: the next acknowledged record
    /// with events it keeps, exactly those events as acknowledged, none
    /// skipped, none repeated, none not yet acknowledged. A stream that
    /// has had metadata or a deletion in this run may show fewer of its
    /// events than the filter keeps (its rules changed while the
    /// subscription read, and a maximum age depends on the clock): those
    /// delivered must be acknowledged ones it keeps, and such a record may
    /// be passed over.
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
        for skipped in *next..seq {
            let Some((stream, first_version, events)) = self.model.record(skipped) else {
                break;
            };
            let kept = self.kept_events(stream, first_version, events, filter, false);
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
        let kept = self.kept_events(stream, first_version, events, filter, false);
        let delivered = || commit.events.iter().map(|event| event.version);
        if commit.stream != stream
            || commit.first_version != first_version
            || commit.events.is_empty()
            || (kept.strict && !delivered().eq(kept.versions()))
            || !delivered().all(|version| kept.keeps(version))
            || !delivered().is_sorted()
        {
            return Err(format!(
                "a subscriber to {filter:?} was handed seq {seq} as {} from version {} with versions {:?}; acknowledged: {stream} from {first_version}, kept {:?}",
                commit.stream,
                commit.first_version,
                delivered().collect::<Vec<_>>(),
                kept.versions().collect::<Vec<_>>()
            ));
        }
        for event in &commit.events {
            let model = &events[(event.version - first_version) as usize];
            check_event(stream, event, model, event.version)?;
        }
        *next = seq + 1;
        Ok(())
    }

    /// The events of a record (`events`, from `first_version`) of `stream`
    /// that `filter` keeps and, if `shown`, that the stream's metadata
    /// shows now (a maximum age aside), with whether that is exact: no
    /// metadata or deletion has touched the stream in this run, or
    /// `shown` and it has no maximum age. A view, not a copy: the oracle
    /// asks this of every record at every reopen.
    fn kept_events<'m>(
        &self,
        stream: &'m str,
        first_version: u64,
        events: &'m [ModelEvent],
        filter: &'m SubFilter,
        shown: bool,
    ) -> Kept<'m> {
        let tables = &self.model.tables;
        let ruled = tables.ever.contains(stream);
        let from = if shown {
            self.model.shown_from(stream)
        } else {
            1
        };
        Kept {
            first_version,
            events,
            from,
            keeps_stream: filter.keeps_stream(stream),
            filter,
            strict: !ruled || (shown && tables.entry(stream).max_age.is_none()),
        }
    }

    /// The whole log, read in seq order, is the model's records, each
    /// with the events its stream's metadata shows.
    pub(super) fn check_read_all(&mut self, log: &Log, evidence: &Evidence<'_>) -> Check {
        let first = self.model.first_seq();
        if first > 1
            && !matches!(log.read_all(first - 1, 1), Err(Error::Purged { first_seq }) if first_seq == first)
        {
            return Err(format!(
                "read_all from {} (purged) did not answer Purged",
                first - 1
            ));
        }
        let mark = evidence.vfs.fault_log_len();
        let all = SubFilter::default();
        match log.read_all(first, usize::MAX) {
            Ok(commits) => {
                let faults = evidence.vfs.fault_log_since(mark);
                excuse::no_read_error_swallowed(|| format!("read_all from {first}"), &faults)?;
                let mut next = first;
                for commit in &commits {
                    self.check_delivery(&mut next, &all, commit)
                        .map_err(|error| format!("read_all: {error}"))?;
                    self.check_shown(commit)?;
                }
                // Past the last one returned, nothing shown was left out.
                for seq in next..=self.model.last_seq() {
                    let Some((stream, first_version, events)) = self.model.record(seq) else {
                        continue;
                    };
                    let kept = self.kept_events(stream, first_version, events, &all, true);
                    if kept.strict && kept.any() {
                        return Err(format!("read_all left out seq {seq} of {stream}"));
                    }
                }
                Ok(())
            }
            Err(error) => {
                let faults = evidence.vfs.fault_log_since(mark);
                self.excuse_read_error(&error, evidence, &faults)
            }
        }
    }

    /// A record `read_all` returned holds, with the model's tables as they
    /// are, exactly the events its stream shows (a maximum age aside).
    fn check_shown(&self, commit: &Commit) -> Check {
        let Some((stream, first_version, events)) = self.model.record(commit.seq) else {
            return Ok(());
        };
        let all = SubFilter::default();
        let kept = self.kept_events(stream, first_version, events, &all, true);
        let delivered = || commit.events.iter().map(|event| event.version);
        if (kept.strict && !delivered().eq(kept.versions()))
            || !delivered().all(|version| kept.keeps(version))
        {
            return Err(format!(
                "read_all returned seq {} of {stream} with versions {:?}; its metadata shows {:?}",
                commit.seq,
                delivered().collect::<Vec<_>>(),
                kept.versions().collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// Every stream reads back exactly as acknowledged, as its metadata
    /// and deletion show it; `streams()` lists those not deleted.
    pub(crate) fn check_log(
        &mut self,
        log: &Log,
        evidence: &Evidence<'_>,
        clock: &AtomicI64,
    ) -> Check {
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
            // From version 1 (a purge answers Purged, unless the
            // stream's metadata hides what it removed), then everything
            // kept.
            let first_kept = self.model.purged_events(&name) + 1;
            for (from, limit) in [(1, 1), (first_kept, usize::MAX)] {
                let (mark, before) = (evidence.vfs.fault_log_len(), clock.load(SeqCst));
                let got = log.read(&name, from, limit);
                let ticks = (before, clock.load(SeqCst));
                let faults = evidence.vfs.fault_log_since(mark);
                self.check_read(&name, from, limit, got, evidence, &faults, ticks)?;
            }
        }
        Ok(())
    }
}

/// The events of one record that a reader keeps (`Oracle::kept_events`).
struct Kept<'m> {
    first_version: u64,
    events: &'m [ModelEvent],
    /// The first version the stream's metadata shows (1: all).
    from: u64,
    keeps_stream: bool,
    filter: &'m SubFilter,
    /// The kept events are exactly what a reader must get, not a bound.
    strict: bool,
}

impl Kept<'_> {
    fn keeps(&self, version: u64) -> bool {
        let index = version.wrapping_sub(self.first_version);
        self.keeps_stream
            && version >= self.from
            && (self.events.get(index as usize))
                .is_some_and(|event| self.filter.keeps_type(&event.event_type))
    }

    fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        (self.first_version..)
            .take(self.events.len())
            .filter(|&version| self.keeps(version))
    }

    fn any(&self) -> bool {
        self.versions().next().is_some()
    }
}

fn check_event(stream: &str, event: &Event, model: &ModelEvent, version: u64) -> Check {
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

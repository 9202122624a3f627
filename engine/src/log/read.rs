//! The read side: a stream's events through the index, each record read
//! from its segment file and checked (CRC, stream, versions) before any of
//! it is returned. Reads take the shared lock only to copy locations.

use crate::error::Error;
use crate::format::{Event, EventRef, parse_record, visit_batch_where};
use crate::index::{Entry, Location, StreamIndex, locations};
use crate::segment::read_record_bytes;

use std::cell::Cell;

use super::group::Published;
use super::index_cache::Sealed;
use super::streams::Shown;
use super::{Log, lock};

/// A record to read: where it is, its segment's first seq (its name), and
/// the end of that segment's acknowledged records, which bounds it.
struct Place {
    location: Location,
    first_seq: u64,
    segment_len: u64,
}

/// What a read looks at: a record, or a stream's records in a sealed
/// segment, found through its index (`Log::segment_index`) once the
/// shared lock is let go.
enum Look {
    Record(Place),
    Part(Sealed),
}

impl Look {
    fn of(state: &Published, entry: Entry) -> Look {
        let id = match entry {
            Entry::Record(location) => location.segment,
            Entry::Part(part) => part.segment,
        };
        let segment = state.segment(id);
        match entry {
            Entry::Record(location) => Look::Record(Place {
                location,
                first_seq: segment.first_seq,
                segment_len: segment.len,
            }),
            Entry::Part(_) => Look::Part(Sealed {
                id,
                first_seq: segment.first_seq,
                len: segment.len,
            }),
        }
    }
}

/// Which of a stream's records in a part a read wants.
#[derive(Clone, Copy)]
enum Wanted {
    /// From the one holding this version on, oldest first.
    From(u64),
    /// Those holding versions from the first up to the second, newest
    /// first.
    Down(u64, u64),
}

impl Log {
    /// At most `limit` acknowledged events of `stream` with version >=
    /// `max(from, 1)` that the stream's metadata and deletion show, in
    /// order. Every record read is checked (CRC, stream, versions); damage
    /// is an error, never wrong data.
    pub fn read(&self, stream: &str, from: u64, limit: usize) -> Result<Vec<Event>, Error> {
        self.read_forward(stream, from, limit, true)
    }

    /// [`Log::read`], honouring the stream's metadata and deletion if
    /// `honour` (else every stored event: for checking a retry's events).
    pub(super) fn read_forward(
        &self,
        stream: &str,
        from: u64,
        limit: usize,
        honour: bool,
    ) -> Result<Vec<Event>, Error> {
        let shown = Cell::new(Shown::ALL);
        self.read_places(
            stream,
            limit,
            &mut |state| {
                let Some(index) = state.index.streams.get(stream) else {
                    return Ok(Vec::new());
                };
                if honour {
                    shown.set(state.shown(stream, || self.settings.now()));
                }
                let from = from.max(shown.get().from_version);
                if limit == 0 || from > index.version {
                    return Ok(Vec::new());
                }
                check_kept(state, index, from)?;
                let start = index.entry_holding(from);
                // Each entry holds at least one event; a maximum age may
                // hide any number of them, so then every entry after.
                let end = match shown.get().not_before {
                    None => start.saturating_add(limit),
                    Some(_) => usize::MAX,
                };
                Ok((start..end.min(index.entries()))
                    .map(|at| Look::of(state, index.entry(at)))
                    .collect())
            },
            &|| Wanted::From(from.max(shown.get().from_version)),
            &mut |events, batch| {
                let from = from.max(shown.get().from_version);
                let wanted = batch.iter().filter(|event| {
                    event.version >= from && shown.get().shows(event.version, event.at)
                });
                events.extend(wanted.take(limit - events.len()).map(EventRef::to_event));
            },
        )
    }

    /// Events of `stream` with version <= `from`, newest first, at most
    /// `limit`; a `from` at or past the stream's version (`u64::MAX`)
    /// starts at its last event. Checked as [`Log::read`] checks. Where a
    /// purge removed the stream's older events, it returns those kept.
    pub fn read_backward(
        &self,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, Error> {
        // Set under the lock, used as the records come in.
        let (top, shown) = (Cell::new(0), Cell::new(Shown::ALL));
        self.read_places(
            stream,
            limit,
            &mut |state| {
                let Some(index) = state.index.streams.get(stream) else {
                    return Ok(Vec::new());
                };
                shown.set(state.shown(stream, || self.settings.now()));
                top.set(from.min(index.version));
                if limit == 0 || top.get() < shown.get().from_version {
                    return Ok(Vec::new());
                }
                check_kept(state, index, top.get())?;
                let end = index.entry_holding(top.get()) + 1;
                // Each entry holds at least one event; none before the
                // first version shown is read.
                let first = index.entry_holding(shown.get().from_version);
                let start = match shown.get().not_before {
                    None => end.saturating_sub(limit).max(first),
                    Some(_) => first,
                };
                Ok((start..end)
                    .rev()
                    .map(|at| Look::of(state, index.entry(at)))
                    .collect())
            },
            &|| Wanted::Down(shown.get().from_version, top.get()),
            &mut |events, batch| {
                let wanted = batch.iter().rev().filter(|event| {
                    event.version <= top.get() && shown.get().shows(event.version, event.at)
                });
                events.extend(wanted.take(limit - events.len()).map(EventRef::to_event));
            },
        )
    }

    /// Reads the records `looks` finds (under the shared lock), those of
    /// a part as `wanted` (asked once `looks` ran) picks them, lending each
    /// one's events to `take`, which copies those it wants, until `limit`
    /// events are taken. A read that fails while a purge or a truncation
    /// changed the log looks again: the file it lost was not damaged.
    fn read_places(
        &self,
        stream: &str,
        limit: usize,
        looks: &mut dyn FnMut(&Published) -> Result<Vec<Look>, Error>,
        wanted: &dyn Fn() -> Wanted,
        take: &mut dyn FnMut(&mut Vec<Event>, &[EventRef<'_>]),
    ) -> Result<Vec<Event>, Error> {
        loop {
            let (changes, looks) = {
                let shared = lock(&self.shared);
                (shared.state.changes, looks(&shared.state)?)
            };
            let mut events = Vec::new();
            let mut buf = Vec::new();
            let mut outcome = Ok(());
            'looks: for look in looks {
                let places = match look {
                    Look::Record(place) => vec![place],
                    Look::Part(sealed) => match self.places_in(stream, &sealed, wanted()) {
                        Ok(places) => places,
                        Err(error) => {
                            outcome = Err(error);
                            break;
                        }
                    },
                };
                for place in places {
                    let read = self.read_batch(stream, &place, &mut buf, &mut |batch| {
                        take(&mut events, batch);
                    });
                    if let Err(error) = read {
                        outcome = Err(error);
                        break 'looks;
                    }
                    if events.len() == limit {
                        break 'looks;
                    }
                }
            }
            match outcome {
                Err(_) if lock(&self.shared).state.changes != changes => continue,
                Err(error) => return Err(error),
                Ok(()) => return Ok(events),
            }
        }
    }

    /// The records of `stream` in the sealed segment `sealed` that
    /// `wanted` picks, in the order it reads them, from the segment's
    /// index.
    fn places_in(
        &self,
        stream: &str,
        sealed: &Sealed,
        wanted: Wanted,
    ) -> Result<Vec<Place>, Error> {
        let index = self.segment_index(sealed)?;
        let mut locations = locations(&index, stream, sealed.id);
        if locations.is_empty() {
            // The index the stream's part was made from holds the stream.
            return Err(Error::Corrupt {
                file: self.settings.index_path(sealed.first_seq),
                offset: 0,
                reason: format!("no record of stream {stream:?} in the index of its segment"),
            });
        }
        let holding = |version| {
            locations
                .partition_point(|location: &Location| location.first_version <= version)
                .saturating_sub(1)
        };
        match wanted {
            Wanted::From(from) => {
                locations.drain(..holding(from));
            }
            Wanted::Down(lowest, top) => {
                let (first, end) = (holding(lowest), holding(top) + 1);
                locations.truncate(end);
                locations.drain(..first);
                locations.reverse();
            }
        }
        let place = |location| Place {
            location,
            first_seq: sealed.first_seq,
            segment_len: sealed.len,
        };
        Ok(locations.into_iter().map(place).collect())
    }

    /// Reads and checks one record, and lends its events to `take`. A
    /// failed check is read once more, so a flaky read is not reported as
    /// damage.
    fn read_batch(
        &self,
        stream: &str,
        place: &Place,
        buf: &mut Vec<u8>,
        take: &mut dyn FnMut(&[EventRef<'_>]),
    ) -> Result<(), Error> {
        // Names are built only to open a file or report damage: a read of
        // a cached segment formats nothing.
        let path = || self.settings.segment_path(place.first_seq);
        let vfs = self.settings.vfs.as_ref();
        let file = lock(&self.handles).get(vfs, place.location.segment, path)?;
        let offset = u64::from(place.location.offset);
        debug_assert!(
            offset < place.segment_len,
            "a record starts inside its segment"
        );
        let mut reason = String::new();
        for _ in 0..2 {
            // A damaged length field must not size an allocation: the
            // record ends within the segment's acknowledged bytes.
            let bytes = read_record_bytes(file.as_ref(), offset, place.segment_len - offset, buf)?;
            let mut events = Vec::new();
            match check_read(bytes, stream, place.location.first_version, &mut events) {
                Ok(()) => {
                    take(&events);
                    return Ok(());
                }
                Err(why) => reason = why,
            }
        }
        Err(Error::Corrupt {
            file: path(),
            offset,
            reason,
        })
    }
}

/// `Err(Error::Purged)` if a purge removed the stream's event `version`.
fn check_kept(state: &Published, index: &StreamIndex, version: u64) -> Result<(), Error> {
    let first_kept = index.first_version().unwrap_or(index.version + 1);
    if version < first_kept {
        return Err(Error::Purged {
            first_seq: state.first_seq,
        });
    }
    Ok(())
}

/// The events of the record in `buf` (into `events`), if it is valid and
/// holds `stream` from `first_version`, as the index says it must.
fn check_read<'r>(
    buf: &'r [u8],
    stream: &str,
    first_version: u64,
    events: &mut Vec<EventRef<'r>>,
) -> Result<(), String> {
    let record = parse_record(buf).map_err(|error| error.to_string())?;
    let head = visit_batch_where(
        record.payload,
        |_| true,
        |_, _, _| true,
        |_, event| {
            events.push(event);
        },
    )
    .map_err(|error| error.to_string())?
    .expect("every stream is kept");
    if head.stream != stream || head.first_version != first_version {
        return Err(format!(
            "record holds stream {:?} from version {}, the index expects {stream:?} from version {first_version}",
            head.stream, head.first_version
        ));
    }
    Ok(())
}

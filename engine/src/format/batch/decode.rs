//! The batch's decoder: [`decode_batch`], the filtering
//! `visit_batch_where`, the copy-free validator [`inspect_batch`] and
//! `event_ids`, all through one reader of each field (`read_head`,
//! `read_event`, `read_extras`) that bounds-checks what it reads against
//! what remains and names the field when it runs past the end. The layout
//! they read is the parent module's (`batch/mod.rs`, FORMAT.md "Batch").

use super::super::event::EventRef;
use super::super::{u16_at, u32_at, u64_at};
use super::{
    Batch, BatchError, EVENT_FIXED_BYTES, EVENT_ID_BYTES, EXTRAS_FLAG, EXTRAS_KNOWN,
    HAS_CONTENT_TYPE, HAS_ID, HAS_METADATA, NAME_LEN_BYTES, STREAM_LEN_AT, TYPE_LEN_AT, count_at,
    event_fields_at, events_at, first_version_at,
};

/// Decodes a record payload into a batch. Rejects, never panics on: a field
/// or length that runs past the end, invalid UTF-8, a count of 0, a first
/// version of 0, versions that overflow, and bytes after the last event.
pub fn decode_batch(payload: &[u8]) -> Result<Batch, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    let mut events = Vec::with_capacity(head.count as usize);
    let mut extras = Extensions::new(payload, head.stream.len());
    for index in 0..u64::from(head.count) {
        let (event, next_at) = read_event(payload, event_at, &mut extras)?;
        events.push(
            event
                .to_ref(head.stream, head.first_version + index)
                .to_event(),
        );
        event_at = next_at;
    }
    extras.check_used()?;
    check_end(payload, event_at)?;
    Ok(Batch {
        stream: head.stream.to_owned(),
        first_version: head.first_version,
        events,
    })
}

/// The events of a record's batch that `keep` accepts (given each one's
/// version, type and time), each handed to `each` as it is read, borrowed
/// from the payload; `None` if `keep_stream` refuses its stream. An error
/// may come after some were handed over, so a caller hands nothing on
/// before this returns. A reader that filters pays for the data it keeps,
/// not for the data it skips. The payload is a CRC-checked record's, whose
/// batch was checked before it was written and at recovery; every field
/// read is still bounds-checked.
pub(crate) fn visit_batch_where<'a>(
    payload: &'a [u8],
    keep_stream: impl FnOnce(&str) -> bool,
    keep: impl Fn(u64, &str, i64) -> bool,
    mut each: impl FnMut(&BatchView<'a>, EventRef<'a>),
) -> Result<Option<BatchView<'a>>, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    if !keep_stream(head.stream) {
        return Ok(None);
    }
    let mut extras = Extensions::new(payload, head.stream.len());
    for index in 0..u64::from(head.count) {
        let (event, next_at) = read_event(payload, event_at, &mut extras)?;
        let version = head.first_version + index;
        if keep(version, event.event_type, event.at) {
            each(&head, event.to_ref(head.stream, version));
        }
        event_at = next_at;
    }
    extras.check_used()?;
    check_end(payload, event_at)?;
    Ok(Some(head))
}

/// What recovery needs of a batch, borrowed from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchView<'a> {
    /// The stream all events belong to.
    pub stream: &'a str,
    /// The version of the first event.
    pub first_version: u64,
    /// How many events the batch holds (at least 1).
    pub count: u32,
}

/// Checks a payload exactly as [`decode_batch`] does, without copying any
/// event: recovery validates every record this way at scan speed.
pub fn inspect_batch(payload: &[u8]) -> Result<BatchView<'_>, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    let mut extras = Extensions::new(payload, head.stream.len());
    for _ in 0..head.count {
        event_at = read_event(payload, event_at, &mut extras)?.1;
    }
    extras.check_used()?;
    check_end(payload, event_at)?;
    Ok(head)
}

/// The ids the events of a valid batch carry, each with its version (none
/// for a batch without extras, found without reading its events).
pub(crate) fn event_ids(payload: &[u8]) -> Result<Vec<(u64, [u8; EVENT_ID_BYTES])>, BatchError> {
    let (head, mut event_at) = read_head(payload)?;
    let mut extras = Extensions::new(payload, head.stream.len());
    if !extras.flagged {
        return Ok(Vec::new());
    }
    let mut ids = Vec::with_capacity(head.count as usize);
    for index in 0..u64::from(head.count) {
        let (event, next_at) = read_event(payload, event_at, &mut extras)?;
        if let Some(id) = event.extras.id {
            ids.push((head.first_version + index, id));
        }
        event_at = next_at;
    }
    Ok(ids)
}

/// The fixed part of the batch in `payload`, checked: its stream, first
/// version and count, and where its first event starts.
fn read_head(payload: &[u8]) -> Result<(BatchView<'_>, usize), BatchError> {
    let stream = read_name(payload, STREAM_LEN_AT, "stream name")?;
    let first_version = read_u64(payload, first_version_at(stream.len()), "first_version")?;
    let count = read_u32(payload, count_at(stream.len()), "count")? & !EXTRAS_FLAG;
    check_versions(first_version, count)?;
    let event_at = events_at(stream.len());
    check_count_fits(payload, event_at, count)?;
    let head = BatchView {
        stream,
        first_version,
        count,
    };
    Ok((head, event_at))
}

/// One event of a batch, borrowed from the payload.
struct EventView<'a> {
    event_type: &'a str,
    at: i64,
    data: &'a [u8],
    extras: ExtrasView<'a>,
}

impl<'a> EventView<'a> {
    fn to_ref(&self, stream: &'a str, version: u64) -> EventRef<'a> {
        let extras = &self.extras;
        EventRef::stored(
            (stream, version),
            (self.event_type, self.data, self.at),
            (extras.id, extras.metadata, extras.content_type),
        )
    }
}

/// An event's extras, borrowed from the payload.
#[derive(Default)]
struct ExtrasView<'a> {
    id: Option<[u8; EVENT_ID_BYTES]>,
    metadata: &'a [u8],
    content_type: Option<&'a str>,
}

/// Whether a batch's events carry extras (`count`'s top bit), and whether
/// one of them had any: a flag no event uses is not the encoder's form.
struct Extensions {
    flagged: bool,
    used: bool,
    count_at: usize,
}

impl Extensions {
    fn new(payload: &[u8], stream_len: usize) -> Extensions {
        let count_at = count_at(stream_len);
        let count = u32_at(payload, count_at).unwrap_or(0);
        Extensions {
            flagged: count & EXTRAS_FLAG != 0,
            used: false,
            count_at,
        }
    }

    fn check_used(&self) -> Result<(), BatchError> {
        if self.flagged && !self.used {
            return Err(BatchError::NotCanonical {
                field: "count's extras flag",
                offset: self.count_at,
            });
        }
        Ok(())
    }
}

/// The event at `event_at` of `payload`, and where the next one starts.
fn read_event<'a>(
    payload: &'a [u8],
    event_at: usize,
    extensions: &mut Extensions,
) -> Result<(EventView<'a>, usize), BatchError> {
    let event_type = read_name(payload, event_at + TYPE_LEN_AT, "event type")?;
    let (time_at, data_len_at, data_at) = event_fields_at(event_at, event_type.len());
    let at = read_u64(payload, time_at, "at")? as i64;
    let data_len = read_u32(payload, data_len_at, "data length")? as usize;
    let data = read_bytes(payload, data_at, data_len, "data")?;
    let mut end = data_at + data_len;
    let mut extras = ExtrasView::default();
    if extensions.flagged {
        (extras, end) = read_extras(payload, end)?;
        extensions.used |=
            extras.id.is_some() || !extras.metadata.is_empty() || extras.content_type.is_some();
    }
    let event = EventView {
        event_type,
        at,
        data,
        extras,
    };
    Ok((event, end))
}

/// The extras at `at`, and where they end.
fn read_extras(payload: &[u8], at: usize) -> Result<(ExtrasView<'_>, usize), BatchError> {
    let flags = *read_bytes(payload, at, 1, "extras")?
        .first()
        .expect("one byte read");
    if flags & !EXTRAS_KNOWN != 0 {
        return Err(BatchError::UnknownExtras { offset: at, flags });
    }
    let mut extras = ExtrasView::default();
    let mut next = at + 1;
    if flags & HAS_ID != 0 {
        let id = read_bytes(payload, next, EVENT_ID_BYTES, "id")?;
        extras.id = Some(id.try_into().expect("16 bytes read"));
        next += EVENT_ID_BYTES;
    }
    if flags & HAS_METADATA != 0 {
        let len = read_u32(payload, next, "metadata length")? as usize;
        if len == 0 {
            return Err(BatchError::NotCanonical {
                field: "empty metadata",
                offset: next,
            });
        }
        extras.metadata = read_bytes(payload, next + size_of::<u32>(), len, "metadata")?;
        next += size_of::<u32>() + len;
    }
    if flags & HAS_CONTENT_TYPE != 0 {
        let content_type = read_name(payload, next, "content type")?;
        next += NAME_LEN_BYTES + content_type.len();
        extras.content_type = Some(content_type);
    }
    Ok((extras, next))
}

/// The last event ends at `end`: the payload must too.
fn check_end(payload: &[u8], end: usize) -> Result<(), BatchError> {
    match payload.len() - end {
        0 => Ok(()),
        extra => Err(BatchError::TrailingBytes { offset: end, extra }),
    }
}

/// Every event takes at least EVENT_FIXED_BYTES, so a count the bytes
/// from `event_at` cannot hold is rejected before it sizes an allocation
/// (and with the same error from `decode_batch` and `inspect_batch`).
fn check_count_fits(payload: &[u8], event_at: usize, count: u32) -> Result<(), BatchError> {
    let remaining = payload.len() - event_at;
    if u64::from(count) > (remaining / EVENT_FIXED_BYTES) as u64 {
        return Err(BatchError::Truncated {
            field: "events",
            offset: event_at,
        });
    }
    Ok(())
}

fn check_versions(first_version: u64, count: u32) -> Result<(), BatchError> {
    if count == 0 {
        return Err(BatchError::EmptyBatch);
    }
    if first_version == 0 {
        return Err(BatchError::ZeroVersion);
    }
    if first_version.checked_add(u64::from(count) - 1).is_none() {
        return Err(BatchError::VersionOverflow);
    }
    Ok(())
}

// The batch's readers: each reads one field at its offset, bounds-checked
// against what the payload holds, and names the field when it runs past
// the end.

fn read_u32(payload: &[u8], at: usize, field: &'static str) -> Result<u32, BatchError> {
    u32_at(payload, at).ok_or(BatchError::Truncated { field, offset: at })
}

fn read_u64(payload: &[u8], at: usize, field: &'static str) -> Result<u64, BatchError> {
    u64_at(payload, at).ok_or(BatchError::Truncated { field, offset: at })
}

/// The `len` bytes at `at`, compared against what remains (never by adding
/// `at + len`, which a damaged length could overflow).
fn read_bytes<'a>(
    payload: &'a [u8],
    at: usize,
    len: usize,
    field: &'static str,
) -> Result<&'a [u8], BatchError> {
    payload
        .get(at..)
        .and_then(|rest| rest.get(..len))
        .ok_or(BatchError::Truncated { field, offset: at })
}

/// A name (the stream, a type) whose length field is at `len_at`: a name
/// that runs past the end is reported at its length field, invalid UTF-8
/// at its first byte.
fn read_name<'a>(
    payload: &'a [u8],
    len_at: usize,
    field: &'static str,
) -> Result<&'a str, BatchError> {
    let truncated = || BatchError::Truncated {
        field,
        offset: len_at,
    };
    let len = u16_at(payload, len_at).ok_or_else(truncated)?;
    let name_at = len_at + NAME_LEN_BYTES;
    let bytes = read_bytes(payload, name_at, usize::from(len), field).map_err(|_| truncated())?;
    std::str::from_utf8(bytes).map_err(|_| BatchError::InvalidUtf8 {
        field,
        offset: name_at,
    })
}

//! [`Event`]: one event of a stream, as an append takes it and every read
//! returns it; with what an event store's users carry beside the data (an
//! id, metadata, a content type: SPEC 14, amended 2026-12-03). How they are
//! stored is the batch's business (`batch/mod.rs`, FORMAT.md "Batch").

/// Bytes of an event id: a UUID's.
pub const EVENT_ID_BYTES: usize = 16;

/// One event of a stream.
///
/// `Event::new` sets no id, metadata or content type; the `with_*`
/// builders add them, and the accessors read them back after any read.
/// Kept private behind those so that an event without them stays the
/// event it always was: encoded byte for byte as before they existed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The stream it belongs to; set by `append`.
    pub stream: String,
    /// 1-based, dense per stream; set by `append`.
    pub version: u64,
    /// What kind of event this is (at most 65535 bytes of UTF-8).
    pub event_type: String,
    /// The event's bytes, opaque to the log.
    pub data: Vec<u8>,
    /// Unix time in nanoseconds; set by `append` from `Options::now`.
    pub at: i64,
    extras: Extras,
}

/// What an event may carry beside its data. The default is none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Extras {
    pub id: Option<[u8; EVENT_ID_BYTES]>,
    /// Empty for none: an empty blob and no blob are one thing.
    pub metadata: Vec<u8>,
    pub content_type: Option<String>,
}

impl Extras {
    pub fn is_empty(&self) -> bool {
        self.id.is_none() && self.metadata.is_empty() && self.content_type.is_none()
    }
}

impl Event {
    /// An event to append: stream, version and time are set by `append`.
    pub fn new(event_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Event {
        Event {
            stream: String::new(),
            version: 0,
            event_type: event_type.into(),
            data: data.into(),
            at: 0,
            extras: Extras::default(),
        }
    }

    /// This event with an id (16 bytes: a UUID's). Where every event of
    /// an append carries one, the append is a retry if the stream already
    /// holds events with exactly these ids, in this order, as consecutive
    /// versions (`Log::append`).
    pub fn with_id(mut self, id: [u8; EVENT_ID_BYTES]) -> Event {
        self.extras.id = Some(id);
        self
    }

    /// This event with a metadata blob, opaque to the log (correlation and
    /// causation ids, say); an empty one is none.
    pub fn with_metadata(mut self, metadata: impl Into<Vec<u8>>) -> Event {
        self.extras.metadata = metadata.into();
        self
    }

    /// This event with a content type (at most 65535 bytes of UTF-8),
    /// such as `application/json`.
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Event {
        self.extras.content_type = Some(content_type.into());
        self
    }

    /// Its id, if it has one.
    pub fn id(&self) -> Option<[u8; EVENT_ID_BYTES]> {
        self.extras.id
    }

    /// Its metadata; empty if none.
    pub fn metadata(&self) -> &[u8] {
        &self.extras.metadata
    }

    /// Its content type, if it has one.
    pub fn content_type(&self) -> Option<&str> {
        self.extras.content_type.as_deref()
    }

    pub(crate) fn extras(&self) -> &Extras {
        &self.extras
    }

    /// The event, borrowed.
    pub fn as_ref(&self) -> EventRef<'_> {
        EventRef {
            stream: &self.stream,
            version: self.version,
            event_type: &self.event_type,
            data: &self.data,
            at: self.at,
            id: self.extras.id,
            metadata: &self.extras.metadata,
            content_type: self.extras.content_type.as_deref(),
        }
    }

    /// An event read back from a batch.
    pub(crate) fn stored(
        stream: String,
        version: u64,
        event_type: String,
        data: Vec<u8>,
        at: i64,
        extras: Extras,
    ) -> Event {
        Event {
            stream,
            version,
            event_type,
            data,
            at,
            extras,
        }
    }
}

/// An event as [`crate::Log::visit_all`] hands it over: the fields of an
/// [`Event`], borrowed from the bytes the read fetched (checked as every
/// read checks them), copied only by [`EventRef::to_event`]. A projection
/// that folds the whole log pays for no allocation an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventRef<'a> {
    /// The stream it belongs to.
    pub stream: &'a str,
    /// Its version in the stream.
    pub version: u64,
    /// What kind of event this is.
    pub event_type: &'a str,
    /// The event's bytes.
    pub data: &'a [u8],
    /// Unix time in nanoseconds, as `append` set it.
    pub at: i64,
    id: Option<[u8; EVENT_ID_BYTES]>,
    metadata: &'a [u8],
    content_type: Option<&'a str>,
}

impl<'a> EventRef<'a> {
    /// An event of a batch, as its decoder read it.
    pub(crate) fn stored(
        (stream, version): (&'a str, u64),
        (event_type, data, at): (&'a str, &'a [u8], i64),
        (id, metadata, content_type): (Option<[u8; EVENT_ID_BYTES]>, &'a [u8], Option<&'a str>),
    ) -> EventRef<'a> {
        EventRef {
            stream,
            version,
            event_type,
            data,
            at,
            id,
            metadata,
            content_type,
        }
    }

    /// Its id, if it has one.
    pub fn id(&self) -> Option<[u8; EVENT_ID_BYTES]> {
        self.id
    }

    /// Its metadata; empty if none.
    pub fn metadata(&self) -> &'a [u8] {
        self.metadata
    }

    /// Its content type, if it has one.
    pub fn content_type(&self) -> Option<&'a str> {
        self.content_type
    }

    /// The event, copied: what `read` and `read_all` return.
    pub fn to_event(&self) -> Event {
        Event::stored(
            self.stream.to_owned(),
            self.version,
            self.event_type.to_owned(),
            self.data.to_vec(),
            self.at,
            Extras {
                id: self.id,
                metadata: self.metadata.to_vec(),
                content_type: self.content_type.map(str::to_owned),
            },
        )
    }
}

//! An acknowledged event as the model keeps it: its type, data, time and
//! extras, and the engine's `Event` it stands for.

/// One acknowledged event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelEvent {
    pub event_type: String,
    pub data: Vec<u8>,
    pub at: i64,
    pub extras: Extras,
}

/// An event's id, metadata and content type (FORMAT.md, "Extras"); none
/// of them in most.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Extras {
    pub id: Option<[u8; durlog::EVENT_ID_BYTES]>,
    /// Empty: none.
    pub metadata: Vec<u8>,
    pub content_type: Option<String>,
}

impl Extras {
    pub fn of(event: &durlog::EventRef<'_>) -> Extras {
        Extras {
            id: event.id(),
            metadata: event.metadata().to_vec(),
            content_type: event.content_type().map(str::to_owned),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Extras::default()
    }
}

impl ModelEvent {
    /// The event as its client would send it again.
    pub fn to_event(&self) -> durlog::Event {
        let mut event = durlog::Event::new(self.event_type.clone(), self.data.clone());
        if let Some(id) = self.extras.id {
            event = event.with_id(id);
        }
        if !self.extras.metadata.is_empty() {
            event = event.with_metadata(self.extras.metadata.clone());
        }
        if let Some(content_type) = &self.extras.content_type {
            event = event.with_content_type(content_type.clone());
        }
        event
    }

    /// `event` as acknowledged at `at`.
    pub fn acknowledged(event: durlog::Event, at: i64) -> ModelEvent {
        let extras = Extras::of(&event.as_ref());
        ModelEvent {
            event_type: event.event_type,
            data: event.data,
            at,
            extras,
        }
    }
}

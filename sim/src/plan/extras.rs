//! Event ids, metadata and content types in the plans (FORMAT.md,
//! "Extras"), drawn in 1 seed of 2 from a sub-seed of their own, so that
//! every other draw of a seed stays: most appends carry a fresh id on
//! every event (the engine then takes an append whose ids the stream holds
//! for a retry, whatever its expected version); some send again the ids of
//! an earlier append to the same stream, all of them (a retry that landed,
//! or a new append if the first did not) or only the first of them with
//! fresh ones after it (a version conflict if the first landed); some
//! carry ids on their first event only (no id rule then); and any event
//! may carry metadata and a content type.

use durlog::Event;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Action, EventSpec, Parts, Plan};

/// The content types events carry.
pub const CONTENT_TYPES: [&str; 2] = ["application/json", "text/plain"];

pub(super) fn insert(parts: Parts, actions: &mut [Action]) {
    let mut rng = ChaCha8Rng::seed_from_u64(parts.named("event-extras"));
    if !rng.random_bool(0.5) {
        return;
    }
    let mut next_id = 1;
    let mut fresh = || {
        next_id += 1;
        Some(next_id - 1)
    };
    // Each stream's last append whose events all carried ids: their ids.
    let mut sent: Vec<(u32, Vec<Option<u32>>)> = Vec::new();
    for action in actions {
        let Action::Submit { stream, events, .. } = action else {
            continue;
        };
        let earlier = (sent.iter().rev())
            .find(|(to, _)| to == stream)
            .map(|(_, ids)| ids.clone());
        let ids: Vec<Option<u32>> = match (rng.random_range(0..20), earlier) {
            (0..=1, Some(earlier)) => earlier,
            (2, Some(earlier)) => (earlier.into_iter().take(1))
                .chain(std::iter::repeat_with(&mut fresh))
                .take(events.len().max(2))
                .collect(),
            (3, _) => (0..events.len())
                .map(|at| if at == 0 { fresh() } else { None })
                .collect(),
            (4, _) => vec![None; events.len()],
            _ => (0..events.len()).map(|_| fresh()).collect(),
        };
        // A resend has the events of its ids, as a client resends them
        // (its data may differ: the ids decide).
        if ids.len() != events.len() {
            let last = *events.last().expect("an append has events");
            events.resize(ids.len(), last);
        }
        for (event, id) in events.iter_mut().zip(&ids) {
            event.extras.id = *id;
            if rng.random_bool(0.3) {
                event.extras.metadata_len = rng.random_range(1..=40);
            }
            if rng.random_bool(0.3) {
                event.extras.content_type = Some(rng.random_range(0..CONTENT_TYPES.len() as u8));
            }
        }
        if ids.iter().all(Option::is_some) {
            sent.push((*stream, ids));
        }
    }
}

/// The id made of `number`: 16 bytes, distinct for distinct numbers.
pub fn id_bytes(number: u32) -> [u8; durlog::EVENT_ID_BYTES] {
    let mut id = *b"durlog-sim-id\0\0\0";
    id[12..].copy_from_slice(&number.to_le_bytes());
    id
}

impl Plan {
    /// The event `spec` describes.
    pub fn event(&self, spec: &EventSpec) -> Event {
        let mut event = Event::new(self.type_name(spec.event_type), spec.data());
        if let Some(number) = spec.extras.id {
            event = event.with_id(id_bytes(number));
        }
        if spec.extras.metadata_len > 0 {
            let metadata: Vec<u8> = (0..spec.extras.metadata_len)
                .map(|at| spec.fill ^ at)
                .collect();
            event = event.with_metadata(metadata);
        }
        if let Some(content_type) = spec.extras.content_type {
            event = event.with_content_type(CONTENT_TYPES[usize::from(content_type)]);
        }
        event
    }
}

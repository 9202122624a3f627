//! A subscriber's filter as the oracle reads it, and the engine's
//! `Filter` it stands for.

use std::collections::BTreeMap;

use durlog::{Filter, Log, Subscription};

/// A subscriber's filter, as the oracle reads it: streams starting with a
/// prefix ("" for all), events of one type or all, and whether the
/// streams' metadata is applied (else `$all` is history).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SubFilter {
    pub(crate) prefix: String,
    pub(crate) event_type: Option<String>,
    /// `event_type` is a prefix of the types kept, not the type.
    pub(crate) type_prefix: bool,
    pub(crate) applying_metadata: bool,
    /// Applying metadata: for each stream whose rules hid its first
    /// versions when the subscription started, the lowest first version
    /// they have shown since (`Oracle::shown_floors`, lowered after every
    /// step). The subscription reads ahead under the rules of the moment,
    /// so it may deliver what the rules show now or showed earlier, and
    /// never a version below this.
    pub(crate) floors: BTreeMap<String, u64>,
}

impl SubFilter {
    pub(crate) fn subscribe(&self, log: &Log, from: u64) -> Subscription {
        log.subscribe_filtered(from, self.engine_filter())
    }

    /// The engine's filter for this one.
    pub(crate) fn engine_filter(&self) -> Filter {
        let mut filter = Filter::all().stream_prefix(&self.prefix);
        filter = match (&self.event_type, self.type_prefix) {
            (Some(event_type), false) => filter.event_type(event_type),
            (Some(prefix), true) => filter.event_type_prefix(prefix),
            (None, _) => filter,
        };
        match self.applying_metadata {
            true => filter.applying_metadata(),
            false => filter,
        }
    }

    pub(crate) fn keeps_stream(&self, stream: &str) -> bool {
        stream.starts_with(&self.prefix)
    }

    /// A new subscription of this filter starts under `floors`, the first
    /// versions the rules show now (nothing, for history).
    pub(crate) fn set_floors(&mut self, floors: &BTreeMap<String, u64>) {
        self.floors = match self.applying_metadata {
            true => floors.clone(),
            false => BTreeMap::new(),
        };
    }

    /// The lowest version of `stream` this subscriber may be handed.
    pub(crate) fn floor(&self, stream: &str) -> u64 {
        self.floors.get(stream).copied().unwrap_or(1)
    }

    pub(crate) fn keeps_type(&self, event_type: &str) -> bool {
        self.event_type
            .as_ref()
            .is_none_or(|wanted| match self.type_prefix {
                true => event_type.starts_with(wanted.as_str()),
                false => wanted == event_type,
            })
    }
}

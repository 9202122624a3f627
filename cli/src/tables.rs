//! The log's two tables beside its records (SPEC section 14, FORMAT.md
//! "Stream metadata and consumer positions"), as the commands show them:
//! `durlog.streams` (each stream's metadata and deletion) and
//! `durlog.consumers` (each named consumer's position), read straight
//! from the directory and decoded by the engine's `decode_streams` and
//! `decode_consumers`, never written here. A log that never had any has
//! neither file.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use durlog::StreamMetadata;
use durlog::format::{
    CONSUMERS_FILE_NAME, CONSUMERS_TEMP_NAME, Deleted, STREAMS_FILE_NAME, STREAMS_TEMP_NAME,
    StreamEntry, decode_consumers, decode_streams,
};

use crate::escape::escape;
use crate::words::plural;

/// Both tables of the log in `dir`, each `None` if the file is missing,
/// unreadable or damaged: the callers go on to the recovery scan (or
/// `Log::open_read_only`), which refuses a damaged table with an error
/// naming it, so reporting it here too would say the same thing twice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableFiles {
    pub streams: Option<BTreeMap<String, StreamEntry>>,
    pub consumers: Option<BTreeMap<String, u64>>,
    /// New tables a crash left before their rename (`durlog.streams.new`,
    /// `durlog.consumers.new`): the old ones (or none) rule, and the next
    /// writer's Open removes these.
    pub temps: Vec<&'static str>,
}

/// Reads the tables of the log in `dir`.
pub fn read_tables(dir: &Path) -> TableFiles {
    let read = |name: &str| std::fs::read(dir.join(name)).ok();
    TableFiles {
        streams: read(STREAMS_FILE_NAME).and_then(|bytes| decode_streams(&bytes).ok()),
        consumers: read(CONSUMERS_FILE_NAME).and_then(|bytes| decode_consumers(&bytes).ok()),
        temps: [STREAMS_TEMP_NAME, CONSUMERS_TEMP_NAME]
            .into_iter()
            .filter(|name| dir.join(name).exists())
            .collect(),
    }
}

/// What a stream's entry holds, in words: `max count 100, max age 3600 s;
/// deleted (soft, at version 7)`; `no metadata` for none.
pub fn describe_entry(metadata: &StreamMetadata, deleted: Option<Deleted>) -> String {
    let mut limits = Vec::new();
    if let Some(count) = metadata.max_count {
        limits.push(format!("max count {count}"));
    }
    if let Some(age) = metadata.max_age {
        limits.push(format!("max age {}", seconds(age)));
    }
    if let Some(version) = metadata.truncate_before {
        limits.push(format!("truncate before {version}"));
    }
    let mut text = match limits.is_empty() {
        true => "no metadata".to_owned(),
        false => limits.join(", "),
    };
    match deleted {
        Some(Deleted::Soft { at_version }) => {
            text.push_str(&format!("; deleted (soft, at version {at_version})"));
        }
        Some(Deleted::Hard) => text.push_str("; deleted for good (hard)"),
        None => {}
    }
    text
}

/// `3600 s`, or `0.250000000 s` for a part of a second.
fn seconds(age: Duration) -> String {
    match age.subsec_nanos() {
        0 => format!("{} s", age.as_secs()),
        nanos => format!("{}.{nanos:09} s", age.as_secs()),
    }
}

/// `dump`'s lines for the tables: for each, one line naming the file and
/// counting its entries, then one per entry in name order. The stream
/// table's start with `# streams: `, the consumers' with `# consumers: `.
pub fn table_lines(tables: &TableFiles) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(streams) = &tables.streams {
        lines.push(format!(
            "# streams: {STREAMS_FILE_NAME}: {} with metadata or a deletion",
            plural(streams.len() as u64, "stream")
        ));
        lines.extend(streams.iter().map(|(stream, entry)| {
            format!(
                "# streams: stream {}: {}",
                escape(stream.as_bytes()),
                describe_entry(&entry.metadata, entry.deleted)
            )
        }));
    }
    if let Some(consumers) = &tables.consumers {
        lines.push(format!(
            "# consumers: {CONSUMERS_FILE_NAME}: {}",
            plural(consumers.len() as u64, "consumer position")
        ));
        lines.extend(consumers.iter().map(|(name, seq)| {
            format!(
                "# consumers: consumer {}: handled up to seq {seq}",
                escape(name.as_bytes())
            )
        }));
    }
    lines.extend(tables.temps.iter().map(|temp| {
        format!(
            "# tables: {temp}: a new table a crash left before its rename (the old one rules; the next writer removes it)"
        )
    }));
    lines
}

/// `verify`'s words for the tables, `None` when the log has neither:
/// `durlog.streams: 2 streams with metadata or a deletion; durlog.consumers:
/// 1 consumer position`.
pub fn table_summary(tables: &TableFiles) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(streams) = &tables.streams {
        parts.push(format!(
            "{STREAMS_FILE_NAME}: {} with metadata or a deletion",
            plural(streams.len() as u64, "stream")
        ));
    }
    if let Some(consumers) = &tables.consumers {
        parts.push(format!(
            "{CONSUMERS_FILE_NAME}: {}",
            plural(consumers.len() as u64, "consumer position")
        ));
    }
    parts.extend(tables.temps.iter().map(|temp| {
        format!("{temp} left by a crash before its rename (the next writer removes it)")
    }));
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_in_words_names_each_limit_and_the_deletion() {
        let mut metadata = StreamMetadata::default();
        assert_eq!(describe_entry(&metadata, None), "no metadata");
        metadata.max_count = Some(100);
        metadata.max_age = Some(Duration::from_millis(1500));
        metadata.truncate_before = Some(40);
        assert_eq!(
            describe_entry(&metadata, Some(Deleted::Soft { at_version: 7 })),
            "max count 100, max age 1.500000000 s, truncate before 40; deleted (soft, at version 7)"
        );
        assert_eq!(
            describe_entry(&StreamMetadata::default(), Some(Deleted::Hard)),
            "no metadata; deleted for good (hard)"
        );
    }
}

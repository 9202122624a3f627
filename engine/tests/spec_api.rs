//! SPEC section 4 fixes the engine's public names and signatures: tests
//! outside the project use them. This file names each one at its path at
//! the crate root, with its type, so the build fails if one moves, is
//! renamed, or changes its signature. It also pins the one path rule: the
//! root is where these items live, and `durlog::format` and
//! `durlog::recovery` hold only the tools' items (see `tools_items`).

// The point of this file is to spell SPEC's signatures out whole, as SPEC
// writes them, not behind type aliases.
#![allow(clippy::type_complexity)]

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use durlog::vfs::SimVfs;

#[test]
fn the_constants_have_their_values() {
    const HEADER_SIZE: usize = durlog::HEADER_SIZE;
    const DEFAULT_SEGMENT_BYTES: u64 = durlog::DEFAULT_SEGMENT_BYTES;
    const FAILPOINT_AFTER_WRITE: &str = durlog::FAILPOINT_AFTER_WRITE;
    assert_eq!(HEADER_SIZE, 16);
    assert_eq!(DEFAULT_SEGMENT_BYTES, 64 << 20);
    assert_eq!(FAILPOINT_AFTER_WRITE, "dur/log/after-write-before-fsync");
}

#[test]
fn the_format_functions_have_their_signatures() {
    let crc32c: fn(&[u8]) -> u32 = durlog::crc32c;
    let append_record: fn(&mut Vec<u8>, u64, &[u8]) = durlog::append_record;
    let parse_record: fn(&[u8]) -> Result<durlog::Record<'_>, durlog::RecordError> =
        durlog::parse_record;
    let encode_batch: fn(&str, u64, &[durlog::Event]) -> Vec<u8> = durlog::encode_batch;
    let decode_batch: fn(&[u8]) -> Result<durlog::Batch, durlog::BatchError> = durlog::decode_batch;
    let segment_name: fn(u64) -> String = durlog::segment_name;

    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(segment_name(1), "00000000000000000001.log");
    let event: durlog::Event = durlog::Event::new("T", "hi");
    let payload = encode_batch("s", 1, &[event]);
    let mut record = Vec::new();
    append_record(&mut record, 1, &payload);
    let durlog::Record { seq, payload, len } = parse_record(&record).unwrap();
    let _: (u64, &[u8], usize) = (seq, payload, len);
    assert_eq!((seq, len), (1, 48));
    let durlog::Batch {
        stream,
        first_version,
        events,
    } = decode_batch(payload).unwrap();
    let _: (String, u64, Vec<durlog::Event>) = (stream, first_version, events.clone());
    // The fields SPEC section 4 names; an id, metadata and a content type
    // (SPEC 14, amended) are read through methods.
    let durlog::Event {
        stream,
        version,
        event_type,
        data,
        at,
        ..
    } = events[0].clone();
    let _: (Option<[u8; 16]>, &[u8], Option<&str>) = (
        events[0].id(),
        events[0].metadata(),
        events[0].content_type(),
    );
    let _: (String, u64, String, Vec<u8>, i64) = (stream, version, event_type, data, at);
    assert_eq!(&events[0].data[..], b"hi");
    match parse_record(&record[..3]) {
        Err(durlog::RecordError::Short) | Err(durlog::RecordError::Checksum) | Ok(_) => {}
    }
}

#[test]
fn the_log_api_has_its_signatures() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<durlog::Log>();

    // `dir: impl AsRef<Path>`, here at one of the types it takes.
    let _: fn(PathBuf, durlog::Options) -> Result<durlog::Log, durlog::Error> = durlog::Log::open;
    let open_with_vfs: fn(SimVfs, PathBuf, durlog::Options) -> Result<durlog::Log, durlog::Error> =
        durlog::Log::open_with_vfs;
    let append: fn(
        &durlog::Log,
        &str,
        durlog::Expected,
        &[durlog::Event],
    ) -> Result<u64, durlog::Error> = durlog::Log::append;
    let read: fn(&durlog::Log, &str, u64, usize) -> Result<Vec<durlog::Event>, durlog::Error> =
        durlog::Log::read;
    let version: fn(&durlog::Log, &str) -> u64 = durlog::Log::version;
    let streams: fn(&durlog::Log, &str) -> Vec<String> = durlog::Log::streams;
    let last_seq: fn(&durlog::Log) -> u64 = durlog::Log::last_seq;
    let size: fn(&durlog::Log) -> u64 = durlog::Log::size;
    let close: fn(durlog::Log) -> Result<(), durlog::Error> = durlog::Log::close;

    let now: Arc<dyn Fn() -> i64 + Send + Sync> = Arc::new(|| 7);
    let failpoint: Arc<dyn Fn(&str) -> io::Result<()> + Send + Sync> = Arc::new(|_| Ok(()));
    let options = durlog::Options {
        segment_bytes: 0,
        max_bytes: 0,
        now: Some(now),
        failpoint: Some(failpoint),
    };
    let log = open_with_vfs(SimVfs::new(1), PathBuf::from("/log"), options).unwrap();
    let expected = [
        durlog::Expected::NoStream,
        durlog::Expected::Exact(1),
        durlog::Expected::StreamExists,
        durlog::Expected::Any,
    ];
    for (events, expected) in expected.into_iter().enumerate() {
        let event = durlog::Event::new("T", vec![events as u8]);
        assert_eq!(
            append(&log, "s", expected, &[event]).unwrap(),
            events as u64 + 1
        );
    }
    assert_eq!(read(&log, "s", 2, 1).unwrap()[0].at, 7);
    assert_eq!(
        (version(&log, "s"), streams(&log, ""), last_seq(&log)),
        (4, vec!["s".into()], 4)
    );
    assert!(size(&log) > 0);
    let conflict = append(
        &log,
        "s",
        durlog::Expected::Exact(0),
        &[durlog::Event::new("T", "")],
    );
    match conflict {
        Err(durlog::Error::VersionConflict {
            stream,
            expected: durlog::Expected::Exact(0),
            actual: 4,
        }) => assert_eq!(stream, "s"),
        other => panic!("{other:?}"),
    }
    close(log).unwrap();
}

/// Each of `durlog::Error`'s variants that SPEC section 4 names, with its
/// fields.
#[allow(dead_code)]
fn the_error_variants_have_their_fields(error: durlog::Error) {
    match error {
        durlog::Error::VersionConflict {
            stream: _,
            expected: _,
            actual: _,
        } => {}
        durlog::Error::Quota {
            limit: _,
            needed: _,
        } => {}
        durlog::Error::Closed => {}
        durlog::Error::Poisoned => {}
        durlog::Error::Corrupt {
            file: _,
            offset: _,
            reason: _,
        } => {}
        durlog::Error::Io(_) => {}
        _ => {}
    }
}

/// The tools' items, at their one path (the root does not export them).
#[test]
fn tools_items() {
    let _: Option<durlog::format::Header> = durlog::format::Header::peek(&[0; 16]);
    let _: fn(&[u8]) -> Result<durlog::format::BatchView<'_>, durlog::BatchError> =
        durlog::format::inspect_batch;
    let _: fn(&str) -> Option<u64> = durlog::format::parse_segment_name;
    let _: u64 = durlog::format::RECORD_BYTES_MIN;
    let _: &str = durlog::format::LOCK_FILE_NAME;
    let _ = durlog::recovery::verify;
    let _ = durlog::recovery::check;
    let _ = durlog::recovery::visit_records;
}

//! The fuzz targets' bodies. Each takes arbitrary bytes, must never panic on
//! them, and asserts what a successful decode promises: the bytes it consumed
//! are exactly the bytes the encoder writes for what it returned. A panic here
//! is a bug in `durlog::format` (or in the property), never in the input.

use durlog::format::inspect_batch;
use durlog::{HEADER_SIZE, RecordError, append_record, decode_batch, encode_batch, parse_record};

/// Feeds `data` to `parse_record` as the bytes at a record's offset in a
/// segment. On success the record re-appended equals `data[..len]` and its
/// payload goes through [`fuzz_decode_batch`], as recovery would take it. On
/// failure the error is the one the spec's order of checks gives.
pub fn fuzz_parse_record(data: &[u8]) {
    match parse_record(data) {
        Ok(record) => {
            assert_eq!(
                record.len,
                HEADER_SIZE + record.payload.len(),
                "len counts header and payload"
            );
            assert!(
                record.len <= data.len(),
                "record claims more than the input"
            );
            let mut again = Vec::with_capacity(record.len);
            append_record(&mut again, record.seq, record.payload);
            assert_eq!(
                again[..],
                data[..record.len],
                "re-appending a parsed record does not give back its bytes"
            );
            fuzz_decode_batch(record.payload);
        }
        Err(error) => {
            // Short exactly when the header or the payload it announces is
            // missing; otherwise every byte was there and the CRC failed.
            let short = match data.first_chunk::<4>() {
                Some(length) if data.len() >= HEADER_SIZE => {
                    u64::from(u32::from_le_bytes(*length)) > (data.len() - HEADER_SIZE) as u64
                }
                _ => true,
            };
            let expected = if short {
                RecordError::Short
            } else {
                RecordError::Checksum
            };
            assert_eq!(error, expected, "wrong error for {} bytes", data.len());
        }
    }
}

/// Feeds `data` to `decode_batch` and `inspect_batch` as a record payload.
/// Both agree. On success the batch is well formed (events, dense versions, one stream) and re-encodes to
/// exactly `data`: nothing was skipped, defaulted or normalised.
pub fn fuzz_decode_batch(data: &[u8]) {
    let decoded = decode_batch(data);
    // Recovery validates with `inspect_batch` what reads decode with
    // `decode_batch`: they must agree on every input, error included.
    let batch = match (decoded, inspect_batch(data)) {
        (Ok(batch), Ok(view)) => {
            assert_eq!(
                (view.stream, view.first_version, view.count as usize),
                (
                    batch.stream.as_str(),
                    batch.first_version,
                    batch.events.len()
                ),
                "inspect_batch and decode_batch disagree"
            );
            batch
        }
        (Err(decode_error), Err(inspect_error)) => {
            assert_eq!(
                decode_error, inspect_error,
                "inspect_batch and decode_batch reject differently"
            );
            return;
        }
        (decoded, inspected) => {
            panic!("decode_batch gives {decoded:?} but inspect_batch gives {inspected:?}")
        }
    };
    assert!(!batch.events.is_empty(), "decoded an empty batch");
    assert!(batch.first_version >= 1, "decoded first_version 0");
    for (index, event) in batch.events.iter().enumerate() {
        assert_eq!(
            event.stream, batch.stream,
            "event {index} has another stream"
        );
        assert_eq!(
            Some(event.version),
            batch.first_version.checked_add(index as u64),
            "event {index} breaks dense versions"
        );
    }
    let again = encode_batch(&batch.stream, batch.first_version, &batch.events);
    assert_eq!(
        again[..],
        data[..],
        "re-encoding a decoded batch does not give back its bytes"
    );
}

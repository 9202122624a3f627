//! `state_file`: `LogState::decode` on arbitrary bytes. The state file
//! (`durlog.state`) is read back by every Open and by `durlog dump`, from
//! a disk that may have damaged it: decoding must never panic. Whatever
//! decodes must re-encode to bytes that decode to the same state; those
//! bytes are the input's but for the order of the streams (`encode` writes
//! them in name order, `decode` takes any order), so they have its length
//! and its fixed fields, and encoding is a fixed point.
//!
//! A mutation almost always breaks the CRC, which would hide every check
//! after it from the fuzzer; so each input is also tried with its CRC
//! made right.
//!
//! The body is here rather than in `durlog_tests::fuzz_targets` with the
//! other targets' (see fuzz/Cargo.toml): moved there, `cargo test` would
//! replay corpus/state_file/ on stable as it replays the others.
#![no_main]

use durlog::{LogState, crc32c};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_state_file(data));

/// Bytes 0..12 (magic, format version) and 16..36 (first seq, truncation,
/// stream count) of a state file: the fields before and after its CRC that
/// do not depend on the streams' order (engine/src/format/state.rs).
const ORDER_FREE_FIELDS: [std::ops::Range<usize>; 2] = [0..12, 16..36];

/// Where a state file keeps the CRC-32C of every byte after it.
const CRC_FIELD: std::ops::Range<usize> = 12..16;

pub fn fuzz_state_file(data: &[u8]) {
    check(data);
    if data.len() >= CRC_FIELD.end {
        let mut fixed = data.to_vec();
        let crc = crc32c(&data[CRC_FIELD.end..]);
        fixed[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
        check(&fixed);
    }
}

fn check(data: &[u8]) {
    let Ok(state) = LogState::decode(data) else {
        return;
    };
    let encoded = state.encode();
    let again = LogState::decode(&encoded)
        .unwrap_or_else(|error| panic!("{state:?} re-encoded does not decode: {error}"));
    assert_eq!(again, state, "a state re-encoded decodes to another");
    assert_eq!(again.encode(), encoded, "encoding is not a fixed point");
    assert_eq!(
        encoded.len(),
        data.len(),
        "re-encoding changed the length of {state:?}"
    );
    for range in ORDER_FREE_FIELDS {
        assert_eq!(
            encoded[range.clone()],
            data[range.clone()],
            "re-encoding changed bytes {range:?} of {state:?}"
        );
    }
    if state.purged_versions.len() < 2 {
        assert_eq!(encoded, data, "one stream or none has one encoding");
    }
}

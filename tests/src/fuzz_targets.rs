//! The fuzz targets' bodies, one plain public function per target (the
//! files in `fuzz/fuzz_targets/` call them and nothing else), so that
//! `cargo test` replays every committed corpus file through exactly the code
//! libFuzzer runs. Each takes arbitrary bytes and must never panic on them:
//! a panic is a bug in durlog (or in the property), never in the input.
//!
//! - [`fuzz_parse_record`], [`fuzz_decode_batch`]: the parsers, on raw
//!   bytes; a successful decode re-encodes to exactly the bytes consumed.
//! - [`fuzz_state_file`]: the state file's decoder, on raw bytes (and
//!   with their CRC made right); what decodes re-encodes to bytes that
//!   decode to the same state. The same bytes as a consumer's position
//!   file (`PositionFile::open`): refused exactly when no slot is valid,
//!   else the newest slot's position.
//! - [`fuzz_index_file`]: a sealed segment's index file (`SegmentIndex`),
//!   on raw bytes (and with their CRC made right); what decodes
//!   re-encodes to exactly its bytes.
//! - [`fuzz_tables`]: the decoders of the tables of stream metadata and
//!   consumer positions, on raw bytes (and with their CRC made right);
//!   what decodes re-encodes to exactly its bytes.
//! - [`fuzz_recover`]: `Log::open` on a directory of segments (and, maybe,
//!   the two tables) built from the input (valid records, then mutated),
//!   on a simulated disk.
//! - [`fuzz_sim_ops`]: a workload of appends, commits, reads, power losses,
//!   restarts and quota changes under a fault set, run by the simulator and
//!   judged by its oracle.
//! - [`fuzz_cli`]: the `durlog` command's stdin handling and read-only
//!   commands, on a real (tmpfs) directory.
//! - [`fuzz_cli_args`]: the `durlog` command's argument parser on arbitrary
//!   argument vectors.
//!
//! The structured targets decode their input with `arbitrary`; an input too
//! short for a field reads zeros, so every input decodes to something.

mod cli;
mod layout;
mod recover;
mod sim_ops;
mod tables;

use arbitrary::{Arbitrary, Unstructured};
use durlog::format::{
    StreamEntry, decode_consumers, decode_streams, encode_consumers, encode_streams, inspect_batch,
};
use durlog::{
    HEADER_SIZE, LogState, RecordError, append_record, crc32c, decode_batch, encode_batch,
    parse_record,
};

pub use cli::{AppendInput, CliInput, InspectInput};
pub use layout::{
    Built, ContentSpec, DirSpec, Entry, EventSpec, FileSpec, Mutation, NameSpec, RecordSpec,
};
pub use recover::RecoverInput;
pub use sim_ops::{
    CrashOp, EventOp, ExpectedOp, Fault, FaultChoice, LenOp, LimitOp, Op, QuotaOp, SimOpsInput,
};
pub use tables::{StreamEntrySpec, TableDamage, TableSpec, TablesSpec};

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

/// Bytes 0..12 (magic, format version) and 16..36 (first seq, truncation,
/// stream count) of a state file: the fields before and after its CRC that
/// do not depend on the streams' order (engine/src/format/state.rs).
const STATE_ORDER_FREE_FIELDS: [std::ops::Range<usize>; 2] = [0..12, 16..36];

/// Where each checksummed file of a log (the state file, an index file,
/// the two tables: engine/src/format/) keeps the CRC-32C of every byte
/// after it.
const CRC_FIELD: std::ops::Range<usize> = 12..16;

/// Runs `check` on `data`, and again with its CRC made right: a mutation
/// almost always breaks the CRC, which would hide every check behind it
/// from the fuzzer.
fn also_with_crc_made_right(data: &[u8], check: impl Fn(&[u8])) {
    check(data);
    if data.len() >= CRC_FIELD.end {
        let mut fixed = data.to_vec();
        let crc = crc32c(&data[CRC_FIELD.end..]);
        fixed[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
        check(&fixed);
    }
}

/// Feeds `data` to `SegmentIndex::decode` as the bytes of an index file,
/// which Open and reads take from a disk that may have damaged it: it
/// must never panic, and an index that decodes must encode back to
/// exactly `data` (the format has one encoding of each index: streams
/// and ids sorted, no slack), so nothing is read that is not there and
/// nothing there is passed over. Each input is tried again with its CRC
/// made right, so that the fuzzer reaches the rules behind the CRC.
pub fn fuzz_index_file(data: &[u8]) {
    also_with_crc_made_right(data, check_index_file);
}

fn check_index_file(data: &[u8]) {
    if let Ok(index) = durlog::format::SegmentIndex::decode(data) {
        assert_eq!(
            index.encode(),
            data,
            "{index:?} decoded from bytes it does not encode back to"
        );
    }
}

/// Feeds `data` to `LogState::decode` as the bytes of a state file
/// (`durlog.state`), which every Open and `durlog dump` read back from a
/// disk that may have damaged it: it must never panic. Whatever decodes
/// must re-encode to bytes that decode to the same state; those bytes are
/// the input's but for the order of the streams (`encode` writes them in
/// name order, `decode` takes any order), so they have its length and its
/// fixed fields, and encoding is a fixed point. A mutation almost always
/// breaks the CRC, which would hide every check after it from the fuzzer;
/// so each input is also tried with its CRC made right.
pub fn fuzz_state_file(data: &[u8]) {
    also_with_crc_made_right(data, check_state_file);
    check_position_file(data);
    // A position file built from the bytes: two slots whose generations
    // and seqs are bytes 0..16 and 16..32, valid but for the bit of the
    // file that bytes 32..36 name (if any), its length cut to bytes
    // 36..38 (if any): a mutation reaches past magic and CRC.
    if data.len() >= 32 {
        let mut file = Vec::new();
        for fields in [&data[..16], &data[16..32]] {
            let mut slot = vec![0; 4096];
            slot[..8].copy_from_slice(b"DLPOS\x00\x00\x01");
            slot[8..24].copy_from_slice(fields);
            let crc = crc32c(&slot[..24]);
            slot[24..28].copy_from_slice(&crc.to_le_bytes());
            file.extend(slot);
        }
        if let Some(bit) = data.get(32..36) {
            let bit = u32::from_le_bytes(bit.try_into().expect("4 bytes")) as usize % (8 * 8192);
            file[bit / 8] ^= 1 << (bit % 8);
        }
        if let Some(len) = data.get(36..38) {
            file.truncate(usize::from(u16::from_le_bytes([len[0], len[1]])) % 8193);
        }
        check_position_file(&file);
    }
}

/// The position a slot of a position file holds, if it is valid, read
/// here apart from the engine (FORMAT.md, "Position files"): 4096 bytes,
/// the magic, a CRC-32C of bytes 0..24 at 24, zeros after byte 28.
fn position_slot(bytes: &[u8]) -> Option<(u64, u64)> {
    let slot = bytes.get(..4096)?;
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(slot[24..28].try_into().expect("4 bytes"));
    let valid = slot[..8] == *b"DLPOS\x00\x00\x01"
        && crc == crc32c(&slot[..24])
        && slot[28..].iter().all(|&byte| byte == 0);
    valid.then(|| (word(8), word(16)))
}

/// Feeds `data` to `PositionFile::open` as the bytes of a position file,
/// which a consumer reads back from a disk that may have damaged it: never
/// a panic; refused, naming the file, exactly when neither slot is valid;
/// else the position of the valid slot with the higher generation (none
/// at generation 0), and a position recorded then reads back after a
/// power loss.
fn check_position_file(data: &[u8]) {
    let path = std::path::Path::new("/consumer/position");
    let vfs = durlog::vfs::SimVfs::new(0);
    durlog::vfs::Vfs::create_dir_all(&vfs, std::path::Path::new("/consumer")).expect("a directory");
    vfs.put_durable_file(path, data);
    let slots = [data.get(..4096), data.get(4096..)].map(|slot| slot.and_then(position_slot));
    let newest = slots
        .iter()
        .flatten()
        .max_by_key(|(generation, _)| *generation);
    match (durlog::PositionFile::open(&vfs, path), newest) {
        (Err(durlog::Error::Corrupt { file, .. }), None) => assert_eq!(file, path),
        (Ok(mut file), Some(&(generation, seq))) => {
            let want = (generation > 0).then_some(seq);
            assert_eq!(file.position(), want, "slots {slots:?}");
            if generation == u64::MAX {
                assert!(matches!(file.record(7), Err(durlog::Error::Corrupt { .. })));
                return;
            }
            file.record(7).expect("recording on a disk with no faults");
            drop(file);
            vfs.crash();
            let again = durlog::PositionFile::open(&vfs, path).expect("reopening");
            assert_eq!(
                again.position(),
                Some(7),
                "a recorded position after a power loss"
            );
        }
        (opened, newest) => panic!(
            "PositionFile::open gave {:?} where the slots hold {newest:?}",
            opened.map(|file| file.position())
        ),
    }
}

fn check_state_file(data: &[u8]) {
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
    for range in STATE_ORDER_FREE_FIELDS {
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

/// Feeds `data` to `decode_streams` and `decode_consumers` as the bytes of
/// `durlog.streams` or `durlog.consumers`, which every Open, `durlog dump`
/// and `verify`, and `durlog tail --follow` (again at each poll) read back
/// from a disk that may have damaged them: neither may panic. No bytes
/// are both tables (their magics differ). A table that decodes has one
/// encoding (entries in name order, each name once, each number there
/// exactly when its flag is, no entry empty), so it re-encodes to exactly
/// the input; and no proper prefix of it decodes (its length is what its
/// entries take). A mutation almost always breaks the CRC, which would
/// hide every check after it from the fuzzer; so each input is also tried
/// with its CRC made right.
pub fn fuzz_tables(data: &[u8]) {
    also_with_crc_made_right(data, check_tables);
}

fn check_tables(data: &[u8]) {
    let (streams, consumers) = (decode_streams(data), decode_consumers(data));
    assert!(
        streams.is_err() || consumers.is_err(),
        "the same bytes decode as both tables"
    );
    let shorter = &data[..data.len().saturating_sub(1)];
    if let Ok(entries) = &streams {
        assert!(
            entries
                .values()
                .all(|entry| *entry != StreamEntry::default()),
            "decoded an entry with nothing in it: {entries:?}"
        );
        assert_eq!(
            encode_streams(entries),
            data,
            "{entries:?} re-encodes to other bytes"
        );
        assert!(
            decode_streams(shorter).is_err(),
            "a proper prefix decodes too"
        );
    }
    if let Ok(positions) = &consumers {
        assert_eq!(
            encode_consumers(positions),
            data,
            "{positions:?} re-encodes to other bytes"
        );
        assert!(
            decode_consumers(shorter).is_err(),
            "a proper prefix decodes too"
        );
    }
}

/// Decodes a structured input with `T::arbitrary`. The targets take raw
/// bytes and decode here, rather than `fuzz_target!(|input: T|)` (which
/// uses `arbitrary_take_rest`), so that a corpus file means the same to
/// libFuzzer and to `cargo test`.
pub fn decode<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    T::arbitrary(&mut Unstructured::new(data)).ok()
}

/// `Log::open` on the directory `data` describes: see
/// [`RecoverInput`] and the `recover` module's doc for what it asserts.
pub fn fuzz_recover(data: &[u8]) {
    if let Some(input) = decode::<RecoverInput>(data) {
        recover::check(&input);
    }
}

/// The simulator on the workload `data` describes ([`SimOpsInput`]): its
/// oracle must report no violation.
pub fn fuzz_sim_ops(data: &[u8]) {
    if let Some(input) = decode::<SimOpsInput>(data) {
        sim_ops::check(&input);
    }
}

/// The `durlog` command's library on the stdin or directory `data`
/// describes ([`CliInput`]).
pub fn fuzz_cli(data: &[u8]) {
    if let Some(input) = decode::<CliInput>(data) {
        cli::check(&input);
    }
}

/// Splits `data` at NUL bytes into an argument vector (lossy UTF-8, as a
/// shell could pass) and parses it as `durlog ARGS...`. The property is
/// clap's own: the parser's definition is consistent (its debug checks run
/// on every parse) and no argument vector panics it; a usage error is a
/// value, printed and mapped to an exit code by the binary.
pub fn fuzz_cli_args(data: &[u8]) {
    use clap::Parser;
    let argv = std::iter::once("durlog".to_string()).chain(
        data.split(|&byte| byte == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned()),
    );
    match durlog_cli::args::Cli::try_parse_from(argv) {
        Ok(cli) => drop(format!("{cli:?}")),
        Err(error) => drop(error.render().to_string()),
    }
}

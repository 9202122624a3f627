//! Replays every file under `corpus/<target>/` through the body of the fuzz
//! target of that name (`durlog_tests::fuzz_targets`), on stable, in plain
//! `cargo test`: the committed seeds, and any crash input added there as a
//! regression, keep passing without a nightly toolchain or cargo-fuzz.
//!
//! A seed named `valid_*` starts with a valid record (parse_record), is a
//! valid batch (decode_batch), a valid state file (state_file) or table
//! (tables), or describes a directory of valid segments (recover), and
//! must also be accepted: the parser bodies allow any error,
//! so without this a parser that rejects everything would replay clean; and
//! a change to the recover input's layout that quietly changed what its
//! seeds mean would go unnoticed (the recover body checks that Open keeps
//! every record of a valid directory, so a `valid_*` seed exercises that).
//!
//! Every input is also held to a bound on the heap it holds at its peak
//! (`ALLOCATION_BYTES_MAX`, counted by `allocation-counter` on this thread;
//! the peak bounds any single allocation): libFuzzer stops a run at its
//! malloc limit (`-rss_limit_mb=2048` in `.ci/fuzz`), which a plain test
//! would pass by just allocating, so an input that makes the engine trust a
//! length field would replay clean without it.
//!
//! A crash input found by fuzzing is committed as `corpus/<target>/crash-*`
//! (named for what it is) and replays here for ever.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use durlog::{LogState, decode_batch, parse_record};
use durlog_tests::fuzz_targets::{
    RecoverInput, decode, fuzz_cli, fuzz_cli_args, fuzz_decode_batch, fuzz_index_file,
    fuzz_parse_record, fuzz_recover, fuzz_sim_ops, fuzz_state_file, fuzz_tables,
};

/// The most heap one corpus input may hold at once. No input of these
/// targets needs more than a few MiB (the structured ones are bounded, the
/// raw ones are at most a few KiB); this much means a length read from the
/// input was trusted.
const ALLOCATION_BYTES_MAX: u64 = 256 << 20;

/// Every file under `dir`, in subdirectories too, sorted by path.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        String::from("(a panic without a message)")
    }
}

/// Prefix of the seeds that the parser must accept.
const VALID_PREFIX: &str = "valid_";

/// The committed corpus of `target`.
fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target)
}

/// Runs `body` on every corpus file of `target`, and `accepts` on those named
/// `valid_*`, and fails naming each file that panics, allocates too much or
/// is rejected.
fn replay(target: &str, body: fn(&[u8]), accepts: fn(&[u8]) -> Result<(), String>) {
    let dir = corpus_dir(target);
    let files = files_under(&dir);
    assert!(
        !files.is_empty(),
        "no corpus files under {}: the committed seeds are missing",
        dir.display()
    );
    let failures: Vec<String> = files
        .iter()
        .flat_map(|file| replay_file(file, body, accepts))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} corpus files of {target} fail; replay one with \
         `cargo +nightly fuzz run --fuzz-dir fuzz {target} FILE`:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// Runs `body` on `file` (and `accepts`, if it is named `valid_*`); returns
/// what went wrong.
fn replay_file(
    file: &Path,
    body: fn(&[u8]),
    accepts: fn(&[u8]) -> Result<(), String>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let bytes = std::fs::read(file)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
    let mut outcome = Ok(());
    let heap = allocation_counter::measure(|| {
        outcome = catch_unwind(AssertUnwindSafe(|| body(&bytes)));
    });
    if let Err(payload) = outcome {
        failures.push(format!(
            "  {} ({} bytes): {}",
            file.display(),
            bytes.len(),
            panic_message(payload.as_ref())
        ));
    }
    if heap.bytes_max > ALLOCATION_BYTES_MAX {
        failures.push(format!(
            "  {}: held {} bytes of heap at once, over the limit of {ALLOCATION_BYTES_MAX} \
             (libFuzzer reports this as out-of-memory)",
            file.display(),
            heap.bytes_max
        ));
    }
    let name = file.file_name().and_then(|name| name.to_str());
    if name.is_some_and(|name| name.starts_with(VALID_PREFIX))
        && let Err(error) = accepts(&bytes)
    {
        failures.push(format!("  {}: rejected: {error}", file.display()));
    }
    failures
}

/// A `valid_*` parse_record seed: a record whose payload is a batch.
fn record_accepted(bytes: &[u8]) -> Result<(), String> {
    let record = parse_record(bytes).map_err(|error| error.to_string())?;
    decode_batch(record.payload).map_err(|error| error.to_string())?;
    Ok(())
}

/// A `valid_*` decode_batch seed: a batch.
fn batch_accepted(bytes: &[u8]) -> Result<(), String> {
    decode_batch(bytes).map_err(|error| error.to_string())?;
    Ok(())
}

/// A `valid_*` recover seed: a directory of valid segments.
fn directory_valid(bytes: &[u8]) -> Result<(), String> {
    let input: RecoverInput = decode(bytes).ok_or("does not decode")?;
    match input.dir.build().valid {
        Some(_) => Ok(()),
        None => Err(format!("not a directory of valid segments: {input:?}")),
    }
}

/// A `valid_*` state_file seed: a state file.
fn state_accepted(bytes: &[u8]) -> Result<(), String> {
    LogState::decode(bytes).map_err(|error| error.to_string())?;
    Ok(())
}

/// A `valid_*` tables seed: a table of stream metadata or of consumer
/// positions.
fn table_accepted(bytes: &[u8]) -> Result<(), String> {
    match (
        durlog::format::decode_streams(bytes),
        durlog::format::decode_consumers(bytes),
    ) {
        (Err(streams), Err(consumers)) => Err(format!(
            "neither table: as streams {streams}; as consumers {consumers}"
        )),
        _ => Ok(()),
    }
}

/// Seeds of the targets with no `valid_*` convention.
fn no_check(_: &[u8]) -> Result<(), String> {
    Ok(())
}

#[test]
fn parse_record_corpus_replays() {
    replay("parse_record", fuzz_parse_record, record_accepted);
}

#[test]
fn decode_batch_corpus_replays() {
    replay("decode_batch", fuzz_decode_batch, batch_accepted);
}

#[test]
fn state_file_corpus_replays() {
    replay("state_file", fuzz_state_file, state_accepted);
}

/// A `valid_*` index_file seed: an index file.
fn index_accepted(bytes: &[u8]) -> Result<(), String> {
    durlog::format::SegmentIndex::decode(bytes).map_err(|error| error.to_string())?;
    Ok(())
}

#[test]
fn index_file_corpus_replays() {
    replay("index_file", fuzz_index_file, index_accepted);
}

#[test]
fn tables_corpus_replays() {
    replay("tables", fuzz_tables, table_accepted);
}

#[test]
fn recover_corpus_replays() {
    replay("recover", fuzz_recover, directory_valid);
}

/// The recover seeds written for the tables (`*tables_*`) still hold
/// tables after any change to the input's layout: good ones
/// (`valid_tables_*`), or a damaged one (`tables_damaged_*`).
#[test]
fn recover_seeds_of_the_tables_still_hold_them() {
    let mut seeds = 0;
    for file in files_under(&corpus_dir("recover")) {
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if !name.contains("tables_") {
            continue;
        }
        seeds += 1;
        let bytes = std::fs::read(&file).expect("read a seed");
        let input: RecoverInput = decode(&bytes).expect("a seed decodes");
        assert!(!input.tables.is_empty(), "{name}: no tables in {input:?}");
        if name.starts_with("valid_") {
            assert!(!input.tables.is_damaged(), "{name}: {:?}", input.tables);
        }
        if name.starts_with("tables_damaged_") {
            assert!(input.tables.is_damaged(), "{name}: {:?}", input.tables);
        }
    }
    assert!(seeds >= 4, "the tables' recover seeds are missing");
}

#[test]
fn sim_ops_corpus_replays() {
    replay("sim_ops", fuzz_sim_ops, no_check);
}

#[test]
fn cli_corpus_replays() {
    replay("cli", fuzz_cli, no_check);
}

#[test]
fn cli_args_corpus_replays() {
    replay("cli_args", fuzz_cli_args, no_check);
}

/// Found by the sim_ops target in its first minute: a read of a record whose
/// bytes were damaged (a misdirected write landed over the segment's start,
/// then a bit flipped on read) allocated what the damaged length field
/// claimed, 2.2 GB: `read_record_bytes` in engine/src/segment.rs sized its
/// buffer from the header alone (SPEC 2.1, pitfall 2), and libFuzzer stopped
/// on it as out-of-memory. The read is now bounded by the record's length.
#[test]
fn sim_ops_crash_read_allocates_a_damaged_record_length() {
    let file = corpus_dir("sim_ops").join("crash-read-allocates-a-damaged-record-length");
    let failures = replay_file(&file, fuzz_sim_ops, no_check);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

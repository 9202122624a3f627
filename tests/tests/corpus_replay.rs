//! Replays every file under `corpus/<target>/` through the body of the fuzz
//! target of that name (`durlog_tests::fuzz_targets`), on stable, in plain
//! `cargo test`: the committed seeds, and any crash input added there as a
//! regression, keep passing without a nightly toolchain or cargo-fuzz.
//!
//! A seed named `valid_*` starts with a valid record (parse_record) or is a
//! valid batch (decode_batch), and must also be accepted: the fuzz bodies
//! allow any error, so without this a parser that rejects everything would
//! replay clean.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use durlog::{decode_batch, parse_record};
use durlog_tests::fuzz_targets::{fuzz_decode_batch, fuzz_parse_record};

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

/// Runs `body` on every corpus file of `target`, and `accepts` on those named
/// `valid_*`, and fails naming each file that panics or is rejected.
fn replay(target: &str, body: fn(&[u8]), accepts: fn(&[u8]) -> Result<(), String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target);
    let files = files_under(&dir);
    assert!(
        !files.is_empty(),
        "no corpus files under {}: the committed seeds are missing",
        dir.display()
    );
    let mut failures = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| body(&bytes))) {
            failures.push(format!(
                "  {} ({} bytes): {}",
                file.display(),
                bytes.len(),
                panic_message(payload.as_ref())
            ));
        }
        let name = file.file_name().and_then(|name| name.to_str());
        if name.is_some_and(|name| name.starts_with(VALID_PREFIX))
            && let Err(error) = accepts(&bytes)
        {
            failures.push(format!("  {}: rejected: {error}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files of {target} fail; replay one with \
         `cargo fuzz run {target} FILE` in fuzz/:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
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

#[test]
fn parse_record_corpus_replays() {
    replay("parse_record", fuzz_parse_record, record_accepted);
}

#[test]
fn decode_batch_corpus_replays() {
    replay("decode_batch", fuzz_decode_batch, batch_accepted);
}

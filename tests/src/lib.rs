//! Helpers shared by durlog's cross-crate tests and fuzz targets.
//!
//! - [`fuzz_targets`]: the bodies of the cargo-fuzz targets as plain public
//!   functions, so `cargo test` on stable replays every committed corpus file
//!   through exactly the code libFuzzer runs (`tests/corpus_replay.rs`).
//! - [`hexdump`]: the readable dumps the golden snapshots are made of.
//!
//! The tests themselves live in `tests/`.

pub mod fuzz_targets;
pub mod hexdump;

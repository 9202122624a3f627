//! `tables`: see `durlog_tests::fuzz_targets::fuzz_tables`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_tables(data));

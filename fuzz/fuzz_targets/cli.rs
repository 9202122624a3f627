//! `cli`: see `durlog_tests::fuzz_targets::fuzz_cli`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_cli(data));

//! `cli_args`: see `durlog_tests::fuzz_targets::fuzz_cli_args`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_cli_args(data));

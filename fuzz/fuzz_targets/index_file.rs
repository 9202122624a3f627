//! `index_file`: see `durlog_tests::fuzz_targets::fuzz_index_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_index_file(data));

//! `parse_record` on arbitrary bytes: see `durlog_tests::fuzz_targets`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_parse_record(data));

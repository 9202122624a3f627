//! `sim_ops`: see `durlog_tests::fuzz_targets::fuzz_sim_ops`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| durlog_tests::fuzz_targets::fuzz_sim_ops(data));

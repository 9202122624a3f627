//! The real `Log`, its group commit, segment preparer, purges and
//! subscribers, run by threads under shuttle's schedulers (PCT and random)
//! on the simulated disk. `cargo test -p durlog --features shuttle --test
//! shuttle`; `DURLOG_SHUTTLE_ITERATIONS=N` sets the schedules per test
//! (default 2,000: the CI run; TESTING.md gives the long one).
//!
//! On every schedule: every thread returns (shuttle fails a schedule where
//! all threads are blocked, and one that passes its step limit); the
//! outcomes are those of running the appends one at a time in an order
//! consistent with each thread's own (the order of the records' seqs);
//! every `Ok` is durable on the simulated disk at the moment it is
//! returned; versions and seqs are dense; a thread that saw the log
//! poisoned sees every later append refused. A failure prints shuttle's
//! schedule: `DURLOG_SHUTTLE_REPLAY='<schedule>' cargo test -p durlog
//! --features shuttle --test shuttle <test>` runs that schedule again.
//! `DURLOG_SHUTTLE_SCHEDULER=pct` (or `random`) runs one scheduler only.

//!
//! The harness (`harness.rs`: the schedulers, the log's setup), the
//! appenders' scenarios (`appends.rs`) and those where a purge, a
//! truncation, subscribers or the index files' writer race them
//! (`changes.rs`).

#![cfg(feature = "shuttle")]

mod appends;
mod changes;
mod harness;

//! A process that dies exactly between an append's write and its sync
//! (the failpoint `dur/log/after-write-before-fsync`, SPEC 3): every
//! acknowledged version survives, and the one that was written but never
//! synced is whole or absent.
//!
//! The hook that kills the process must never be part of the shipped
//! `durlog` binary, so the child is this test binary itself: run with
//! `DURLOG_FAILPOINT_CHILD_DIR` set, the test `failpoint_child` runs
//! `durlog_cli::append::run` (the code behind `durlog append`) with a
//! failpoint hook that calls `std::process::abort()` on the 6th append.
//! Without the variable, `failpoint_child` does nothing.

mod common;

use std::fs::File;
use std::io::{self, Cursor};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{COMMAND_LIMIT, exit_code, run, run_with_input, stdout, wait_with_output_within};
use durlog::vfs::PosixVfs;
use durlog::{FAILPOINT_AFTER_WRITE, Failpoint, Log, Options};
use durlog_cli::append::{self, AppendArgs};

/// The log directory; set only for the child.
const CHILD_DIR_ENV: &str = "DURLOG_FAILPOINT_CHILD_DIR";
/// Where the child prints its versions (a file: its writes reach the
/// kernel before the abort, like a pipe's would).
const CHILD_VERSIONS_ENV: &str = "DURLOG_FAILPOINT_CHILD_VERSIONS";
/// The append that hits the failpoint and dies.
const FATAL_APPEND: u32 = 6;
const LINES: u32 = 10;
const SIGABRT: i32 = 6;

fn line(number: u32) -> Vec<u8> {
    format!(
        "event {number}: some\tdata \\ {}",
        "x".repeat(number as usize * 10)
    )
    .into_bytes()
}

/// The child's entry point (see the module doc).
#[test]
fn failpoint_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let versions_path =
        std::env::var_os(CHILD_VERSIONS_ENV).expect("the parent sets the versions file");
    let hits = AtomicU32::new(0);
    let failpoint: Failpoint = Arc::new(move |name| {
        if name == FAILPOINT_AFTER_WRITE && hits.fetch_add(1, Ordering::SeqCst) + 1 == FATAL_APPEND
        {
            // The record is written, not synced, not acknowledged.
            std::process::abort();
        }
        Ok(())
    });
    let mut input = Vec::new();
    for number in 1..=LINES {
        input.extend_from_slice(&line(number));
        input.push(b'\n');
    }
    let mut versions = File::create(versions_path).expect("create the versions file");
    let args = AppendArgs {
        dir: Path::new(&dir),
        stream: "s",
        event_type: "line",
        expected: durlog::Expected::Any,
    };
    let options = Options {
        failpoint: Some(failpoint),
        ..Options::default()
    };
    let result = append::run(
        &args,
        options,
        &mut Cursor::new(input),
        &mut versions,
        &mut io::sink(),
    );
    panic!("the failpoint never fired: append returned {result:?}");
}

#[test]
fn crash_between_write_and_sync_keeps_every_acknowledged_version() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join("log");
    let versions_path = scratch.path().join("versions");
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "failpoint_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, &dir)
        .env(CHILD_VERSIONS_ENV, &versions_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the child");
    let child = wait_with_output_within(child, "the failpoint child", COMMAND_LIMIT);
    assert_eq!(
        child.status.signal(),
        Some(SIGABRT),
        "the child should die at the failpoint: {:?}; stderr: {}",
        child.status,
        String::from_utf8_lossy(&child.stderr)
    );

    // Exactly the five acknowledged versions were printed.
    let printed = std::fs::read_to_string(&versions_path).expect("read the versions");
    assert_eq!(printed, "1\n2\n3\n4\n5\n");

    // `verify` (read-only) accepts it: the 6th record is whole or absent.
    let verdict = run([Path::new("verify"), &dir]);
    assert!(
        matches!(exit_code(&verdict), 0 | 1),
        "verify: {}",
        common::stderr(&verdict)
    );

    let log = Log::open_read_only(PosixVfs, &dir).expect("reopen read-only");
    let version = log.version("s");
    assert!(
        version == 5 || version == 6,
        "after the crash the stream is at {version}, not 5 or 6"
    );
    let events = log.read("s", 1, usize::MAX).expect("read");
    assert_eq!(events.len() as u64, version);
    for event in &events {
        assert_eq!(
            event.data,
            line(event.version as u32),
            "version {}",
            event.version
        );
    }
    drop(log);
    eprintln!(
        "after the crash at the failpoint the stream is at version {version} (6 = the unsynced record was kept whole)"
    );

    // The next `durlog append` recovers and continues right after.
    let output = run_with_input(
        [Path::new("append"), &dir, Path::new("s")],
        b"after the crash\n",
    );
    assert_eq!(exit_code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(stdout(&output), format!("{}\n", version + 1));
    let verdict = run([Path::new("verify"), &dir]);
    assert_eq!(exit_code(&verdict), 0, "{}", common::stderr(&verdict));
}

//! `durlog dump` (and `read`, `streams`) of the committed golden log
//! directory `corpus/golden-dir/`, as insta snapshots.
//!
//! The directory holds the SPEC 2.3 example record first, then more records
//! in two segments, written by the library with a fixed clock. The first
//! test proves the committed bytes are exactly what `write_golden_dir`
//! writes today; to regenerate them after an intended format change, run
//! `DURLOG_BLESS_GOLDEN_DIR=1 cargo test -p durlog-cli --test cli_dump --
//! --test-threads=1` (the other tests read the directory it rewrites),
//! then review and commit the files and the snapshots.

mod common;

use std::path::{Path, PathBuf};

use common::{Append, exit_code, run, snapshot_tree, stdout, write_log};

/// 2024-02-29T12:34:56.123456789Z: a leap day.
const LEAP_DAY_NANOS: i64 = 1_709_210_096_123_456_789;

/// The SPEC 2.3 record: stream `s`, type `T`, data `hi`, at 0, seq 1.
const SPEC_2_3_RECORD: [u8; 48] = [
    0x20, 0x00, 0x00, 0x00, 0x5e, 0x1a, 0x72, 0x0b, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, //
    0x01, 0x00, 0x73, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x01, //
    0x00, 0x54, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x68, 0x69,
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus/golden-dir")
}

/// Writes the golden log into `dir`: 200-byte segments, so the first holds
/// the 48-, 49-, 49- and 51-byte records of SPEC 2.3 (197 bytes) and the
/// second the rest.
fn write_golden_dir(dir: &Path) {
    let appends: Vec<Append<'_>> = vec![
        ("s", &[("T", b"hi")]),
        ("s", &[("t", b"one")]),
        ("s", &[("t", b"two")]),
        ("s", &[("t", b"three")]),
        (
            "orders",
            &[
                ("created", br#"{"id":7}"#),
                ("paid", b"tab\there, backslash\\ \xff"),
            ],
        ),
        ("s", &[("t", b"four")]),
    ];
    let times = [
        0,
        1_000_000_000,
        2_000_000_000,
        3_000_000_000,
        LEAP_DAY_NANOS,
        1_714_564_800_123_456_789,
    ];
    write_log(dir, 200, &times, &appends);
}

/// The tree's files by name, for comparing two directories; but for the
/// writer's lock file, which is empty and not part of the log's record.
fn files_by_name(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    snapshot_tree(dir)
        .into_iter()
        .map(|(path, bytes)| {
            (
                path.strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string(),
                bytes,
            )
        })
        .filter(|(name, bytes)| {
            let lock = name == durlog::format::LOCK_FILE_NAME;
            assert!(
                !lock || bytes.as_deref() == Some(&[][..]),
                "the lock file is empty"
            );
            !lock
        })
        .collect()
}

#[test]
fn golden_dir_holds_what_its_generator_writes() {
    let scratch = tempfile::tempdir().expect("tempdir");
    write_golden_dir(scratch.path());
    if std::env::var_os("DURLOG_BLESS_GOLDEN_DIR").is_some() {
        let golden = golden_dir();
        if golden.exists() {
            std::fs::remove_dir_all(&golden).expect("remove the old golden directory");
        }
        std::fs::create_dir_all(&golden).expect("create the golden directory");
        for (name, bytes) in files_by_name(scratch.path()) {
            std::fs::write(golden.join(name), bytes.expect("only files"))
                .expect("write a golden file");
        }
    }
    let expected = files_by_name(scratch.path());
    let names: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["00000000000000000001.log", "00000000000000000005.log"]
    );
    let first = expected[0].1.as_ref().expect("a file");
    assert_eq!(first.len(), 197);
    assert_eq!(
        first[..48],
        SPEC_2_3_RECORD,
        "the first record is not SPEC 2.3's"
    );
    assert_eq!(
        files_by_name(&golden_dir()),
        expected,
        "corpus/golden-dir differs from what write_golden_dir writes: see this file's doc to regenerate it"
    );
}

/// Runs `durlog args...` on the golden directory, asserts success and no
/// change to it, and returns stdout.
fn on_golden_dir(args: &[&str]) -> String {
    let golden = golden_dir();
    let before = snapshot_tree(&golden);
    let mut all = vec![PathBuf::from(args[0]), golden.clone()];
    all.extend(args[1..].iter().map(PathBuf::from));
    let output = run(&all);
    assert_eq!(
        exit_code(&output),
        0,
        "durlog {args:?}: {}",
        common::stderr(&output)
    );
    assert!(output.stderr.is_empty());
    assert_eq!(
        snapshot_tree(&golden),
        before,
        "durlog {args:?} changed the golden directory"
    );
    stdout(&output)
}

#[test]
fn dump_of_the_golden_dir() {
    insta::assert_snapshot!(on_golden_dir(&["dump"]));
}

#[test]
fn read_of_the_golden_dir() {
    insta::assert_snapshot!("read_s", on_golden_dir(&["read", "s"]));
    insta::assert_snapshot!(
        "read_orders_json",
        on_golden_dir(&["read", "orders", "--json"])
    );
    assert_eq!(on_golden_dir(&["streams"]), "orders\ns\n");
    let verdict = on_golden_dir(&["verify"]);
    assert!(
        verdict.starts_with("clean: ")
            && verdict.ends_with(": 2 segments, 6 records of 352 bytes, last seq 6\n"),
        "{verdict}"
    );
}

//! Bad input to every read-only command (`read`, `dump`, `streams`,
//! `verify`): a missing directory, a file that is not a segment, damaged
//! bytes. Each gives a non-zero exit, exactly one line on stderr naming the
//! path (and the offset where there is one), and leaves every byte of the
//! directory as it was.

mod common;

use std::path::{Path, PathBuf};

use common::{
    append_bytes, assert_one_line_error, exit_code, flip_bit, run, run_with_input, snapshot_tree,
    stdout, write_three_segment_log,
};

/// A read-only command and its arguments after DIR.
struct ReadOnlyCommand {
    args: &'static [&'static str],
    /// Exit code for an error: 1, but `verify` follows fsck.
    exit_missing_dir: i32,
    exit_corrupt: i32,
}

const COMMANDS: [ReadOnlyCommand; 4] = [
    ReadOnlyCommand {
        args: &["read", "DIR", "s"],
        exit_missing_dir: 1,
        exit_corrupt: 1,
    },
    ReadOnlyCommand {
        args: &["dump", "DIR"],
        exit_missing_dir: 1,
        exit_corrupt: 1,
    },
    ReadOnlyCommand {
        args: &["streams", "DIR"],
        exit_missing_dir: 1,
        exit_corrupt: 1,
    },
    ReadOnlyCommand {
        args: &["verify", "DIR"],
        exit_missing_dir: 8,
        exit_corrupt: 4,
    },
];

fn args_for(command: &ReadOnlyCommand, dir: &Path) -> Vec<PathBuf> {
    command
        .args
        .iter()
        .map(|arg| {
            if *arg == "DIR" {
                dir.to_path_buf()
            } else {
                PathBuf::from(arg)
            }
        })
        .collect()
}

/// Runs every command on `dir` and checks: exit code, one stderr line with
/// all `needles`, the directory (its parent, for a missing one) unchanged.
fn check_every_command(
    root: &Path,
    dir: &Path,
    exit_code_of: fn(&ReadOnlyCommand) -> i32,
    needles: &[&str],
) {
    for command in &COMMANDS {
        let before = snapshot_tree(root);
        let output = run(args_for(command, dir));
        let line = assert_one_line_error(&output, exit_code_of(command), needles);
        assert!(
            line.starts_with(&format!("durlog {}: ", command.args[0])),
            "{line}"
        );
        assert_eq!(
            snapshot_tree(root),
            before,
            "`durlog {}` changed {}",
            command.args[0],
            root.display()
        );
    }
}

#[test]
fn missing_directory() {
    let root = tempfile::tempdir().expect("tempdir");
    let missing = root.path().join("missing");
    let path = missing.display().to_string();
    check_every_command(
        root.path(),
        &missing,
        |command| command.exit_missing_dir,
        &[&path, "No such file"],
    );
    assert!(
        !missing.exists(),
        "a read-only command created the directory"
    );
}

#[test]
fn file_that_is_not_a_segment() {
    // A name the log owns (it ends in .log) on a file that is not one of
    // its segments; any other name is not the log's business.
    for name in ["garbage.log", "00000000000000000abc.log"] {
        let root = tempfile::tempdir().expect("tempdir");
        write_three_segment_log(root.path());
        let stranger = root.path().join(name);
        std::fs::write(&stranger, "remember the milk\n").expect("write");
        let path = stranger.display().to_string();
        check_every_command(
            root.path(),
            root.path(),
            |command| command.exit_corrupt,
            &[&path, "named like a segment"],
        );
    }
}

#[test]
fn file_named_like_a_segment_that_is_not_one() {
    let root = tempfile::tempdir().expect("tempdir");
    write_three_segment_log(root.path());
    // Named for seq 2, which the first segment holds. (Named for seq 7, the
    // next one, it would be a last segment whose first record is torn,
    // which SPEC 2.5 lets Open truncate: `verify` exits 1 for that.)
    let impostor = root.path().join(durlog::segment_name(2));
    std::fs::write(
        &impostor,
        "this is text, not records, and long enough to be read\n",
    )
    .expect("write");
    let path = impostor.display().to_string();
    check_every_command(
        root.path(),
        root.path(),
        |command| command.exit_corrupt,
        &[&path, "offset 0"],
    );
}

#[test]
fn damaged_bytes_in_an_earlier_segment() {
    let root = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(root.path());
    // The CRC field of the second segment's second record (offset 53).
    flip_bit(&segments[1], 53 + 5);
    let path = segments[1].display().to_string();
    check_every_command(
        root.path(),
        root.path(),
        |command| command.exit_corrupt,
        &[&path, "offset 53"],
    );
}

#[test]
fn dump_prints_the_records_before_the_damage() {
    let root = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(root.path());
    flip_bit(&segments[1], 53 + 5);
    let output = run([Path::new("dump"), root.path()]);
    assert_eq!(exit_code(&output), 1);
    let text = stdout(&output);
    // Header, the two records of the first segment, the first of the second.
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.lines()
            .last()
            .is_some_and(|line| line.contains("\t0\t3\t53\tother\t1..1\tt")),
        "{text}"
    );
}

#[test]
fn torn_tail_is_read_around_and_left_in_place() {
    let root = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(root.path());
    append_bytes(
        segments.last().expect("a last segment"),
        b"\x40\x00\x00\x00garbage",
    );
    let before = snapshot_tree(root.path());
    for args in [
        &["read", "DIR", "s"][..],
        &["dump", "DIR"],
        &["streams", "DIR"],
    ] {
        let args: Vec<PathBuf> = args
            .iter()
            .map(|arg| {
                if *arg == "DIR" {
                    root.path().to_path_buf()
                } else {
                    PathBuf::from(arg)
                }
            })
            .collect();
        let output = run(&args);
        assert_eq!(
            exit_code(&output),
            0,
            "{args:?}: {}",
            common::stderr(&output)
        );
        assert!(output.stderr.is_empty());
        assert_eq!(
            snapshot_tree(root.path()),
            before,
            "{args:?} changed the directory"
        );
    }
    let dump = stdout(&run([Path::new("dump"), root.path()]));
    assert!(
        dump.lines()
            .last()
            .is_some_and(|line| line.starts_with("# tail: torn: 11 bytes at offset 104 of ")),
        "{dump}"
    );
    assert_eq!(
        stdout(&run([Path::new("read"), root.path(), Path::new("s")]))
            .lines()
            .count(),
        4
    );
}

/// `append` to the stream named "" is refused, named, before the directory
/// is made or any line read, and a log that exists is left as it was.
#[test]
fn append_to_an_empty_stream_name_is_refused() {
    let root = tempfile::tempdir().expect("tempdir");
    let fresh = root.path().join("fresh");
    let refused = run_with_input([Path::new("append"), &fresh, Path::new("")], b"one\n");
    assert_one_line_error(&refused, 1, &["stream named \"\"", "needs a name"]);
    assert!(!fresh.exists(), "a refused append made {}", fresh.display());
    write_three_segment_log(root.path());
    let before = snapshot_tree(root.path());
    let refused = run_with_input([Path::new("append"), root.path(), Path::new("")], b"one\n");
    assert_one_line_error(&refused, 1, &["needs a name"]);
    assert_eq!(
        snapshot_tree(root.path()),
        before,
        "a refused append changed the log"
    );
}

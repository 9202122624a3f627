//! `durlog verify`: fsck exit codes (0 clean, 1 torn tail, 4 corruption,
//! 8 operational error, 16 usage error), one line naming the file and
//! offset, and never a changed byte.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{
    append_bytes, assert_one_line_error, exit_code, flip_bit, run, snapshot_tree, stdout,
    write_three_segment_log,
};
use durlog::{Log, Options};

fn verify(dir: &Path) -> std::process::Output {
    run([Path::new("verify"), dir])
}

/// Runs `verify` on `dir`, asserts it changed nothing, and returns its output.
fn verify_unchanged(dir: &Path) -> std::process::Output {
    let before = snapshot_tree(dir);
    let output = verify(dir);
    assert_eq!(snapshot_tree(dir), before, "verify changed the directory");
    output
}

#[test]
fn clean_log_exits_0_with_one_line_on_stdout() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_three_segment_log(dir.path());
    let output = verify_unchanged(dir.path());
    assert_eq!(exit_code(&output), 0);
    assert!(output.stderr.is_empty());
    assert_eq!(
        stdout(&output),
        format!(
            "clean: {}: 3 segments, 6 records of 305 bytes, last seq 6\n",
            dir.path().display()
        )
    );
}

#[test]
fn empty_directory_is_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = verify_unchanged(dir.path());
    assert_eq!(exit_code(&output), 0);
    assert!(stdout(&output).contains("0 segments, 0 records"));
}

#[test]
fn zero_tail_is_clean_and_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(dir.path());
    let last = segments.last().expect("a last segment");
    append_bytes(last, &[0; 4096]);
    let output = verify_unchanged(dir.path());
    assert_eq!(exit_code(&output), 0);
    assert!(stdout(&output).contains("4096 zero bytes follow at offset 104"));
}

#[test]
fn torn_tail_exits_1_naming_file_offset_and_bytes_and_is_not_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(dir.path());
    let last = segments.last().expect("a last segment");
    // Half of a record: a header claiming 100 bytes, then 10 of them.
    let mut torn = 100u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xAB; 22]);
    append_bytes(last, &torn);
    let length_before = std::fs::metadata(last).expect("stat").len();

    let output = verify_unchanged(dir.path());
    let line = assert_one_line_error(
        &output,
        1,
        &[&last.display().to_string(), "offset 104", "26 bytes"],
    );
    assert!(line.starts_with("durlog verify: torn tail: "), "{line}");
    assert!(output.stdout.is_empty());
    assert_eq!(
        std::fs::metadata(last).expect("stat").len(),
        length_before,
        "verify truncated"
    );
    // Again: still there, same verdict.
    assert_eq!(exit_code(&verify_unchanged(dir.path())), 1);

    // Opening the log (what `append` does) truncates it; then it is clean.
    Log::open(dir.path(), Options::default())
        .expect("open truncates the torn tail")
        .close()
        .expect("close");
    assert_eq!(std::fs::metadata(last).expect("stat").len(), 104);
    assert_eq!(exit_code(&verify_unchanged(dir.path())), 0);
}

#[test]
fn damage_in_an_earlier_segment_exits_4_naming_file_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(dir.path());
    // The payload of the second record (offset 48) of the first segment.
    flip_bit(&segments[0], 48 + 20);
    let output = verify_unchanged(dir.path());
    let line = assert_one_line_error(
        &output,
        4,
        &[&segments[0].display().to_string(), "offset 48"],
    );
    assert!(line.contains("corrupt"), "{line}");
    assert!(output.stdout.is_empty());
    // Open refuses it too, and leaves it alone.
    let before = snapshot_tree(dir.path());
    assert!(matches!(
        Log::open(dir.path(), Options::default()),
        Err(durlog::Error::Corrupt { .. })
    ));
    assert_eq!(snapshot_tree(dir.path()), before);
}

#[test]
fn missing_segment_exits_4_naming_the_segment_after_the_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(dir.path());
    std::fs::remove_file(&segments[1]).expect("remove the middle segment");
    let output = verify_unchanged(dir.path());
    assert_one_line_error(
        &output,
        4,
        &[&segments[2].display().to_string(), "offset 0", "missing"],
    );
}

#[test]
fn file_that_is_not_a_segment_exits_4_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_three_segment_log(dir.path());
    let stranger = dir.path().join("garbage.log");
    std::fs::write(&stranger, "not a segment\n").expect("write garbage.log");
    assert_one_line_error(
        &verify_unchanged(dir.path()),
        4,
        &[&stranger.display().to_string()],
    );
}

/// What is not the log's (`lost+found`, dot files, a README) is listed as
/// ignored, and the log is clean around it.
#[test]
fn foreign_entries_are_listed_as_ignored_and_the_log_is_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_three_segment_log(dir.path());
    std::fs::create_dir(dir.path().join("lost+found")).expect("mkdir");
    std::fs::write(dir.path().join(".DS_Store"), "finder").expect("write");
    std::fs::write(dir.path().join("README"), "an operator's note").expect("write");
    let output = verify_unchanged(dir.path());
    assert_eq!(
        exit_code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout(&output);
    assert!(line.starts_with("clean: "), "{line}");
    assert!(
        line.contains("ignored (not the log's): .DS_Store, README, lost+found"),
        "{line}"
    );
}

#[test]
fn missing_directory_exits_8_and_is_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let output = verify(&missing);
    assert_one_line_error(&output, 8, &[&missing.display().to_string()]);
    assert!(!missing.exists());
}

#[test]
fn a_file_given_as_the_directory_exits_8() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segments = write_three_segment_log(dir.path());
    let before = snapshot_tree(dir.path());
    let output = verify(&segments[0]);
    assert_one_line_error(
        &output,
        8,
        &[&segments[0].display().to_string(), "Not a directory"],
    );
    assert_eq!(snapshot_tree(dir.path()), before);
}

#[test]
fn unreadable_directory_exits_8() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    write_three_segment_log(&log_dir);
    std::fs::set_permissions(&log_dir, std::fs::Permissions::from_mode(0o000)).expect("chmod 000");
    let denied = std::fs::read_dir(&log_dir).is_err();
    let output = verify(&log_dir);
    std::fs::set_permissions(&log_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
    if denied {
        assert_one_line_error(
            &output,
            8,
            &[&log_dir.display().to_string(), "ermission denied"],
        );
    } else {
        // Running as root: permissions do not apply, so the log is clean.
        assert_eq!(exit_code(&output), 0);
    }
}

#[test]
fn usage_error_exits_16() {
    assert_eq!(exit_code(&run(["verify"])), 16);
    assert_eq!(exit_code(&run(["verify", "a", "b"])), 16);
    // Other commands exit 1 on a usage error.
    assert_eq!(exit_code(&run(["read"])), 1);
    assert_eq!(exit_code(&run(["no-such-command"])), 1);
    assert_eq!(exit_code(&run(["--help"])), 0);
}

//! `durlog append` on real failing disks: a journaled ext4 image that
//! fills, a thin-provisioned device whose ENOSPC comes from `fdatasync`,
//! and a file-size limit (`ulimit -f`: a short write, then EFBIG). The
//! command must print a version only once it is durable, stop at the first
//! append that fails with exit code 1 and exactly one line on stderr
//! naming the segment file (SPEC section 8), and every version it printed
//! must read back (`durlog read`) after a remount; once there is room,
//! `durlog append` resumes at the next version.

mod common;
#[path = "../../vfs/tests/real_disk/mod.rs"]
mod real_disk;

use std::path::Path;
use std::process::Output;

use common::{
    COMMAND_LIMIT, assert_one_line_error, exit_code, run, run_with_input, stdout,
    wait_with_output_within,
};
use durlog::segment_name;
use real_disk::{Ext4, SmallFs};

/// Line `index` (0-based) of the input: its number, then a pattern, about
/// 2 KiB, so that a line read back from the wrong place cannot match.
fn input_line(index: usize) -> String {
    let pattern: String = (0..2000 + index % 97)
        .map(|at| char::from(b'a' + ((at + index) % 26) as u8))
        .collect();
    format!("line-{index}-{pattern}")
}

fn input(lines: std::ops::Range<usize>) -> String {
    lines.map(|index| input_line(index) + "\n").collect()
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temporary path")
}

/// The versions `durlog append` printed: 1, 2, ... in order (checked).
fn printed_versions(output: &Output, first: u64) -> u64 {
    let printed: Vec<u64> = stdout(output)
        .lines()
        .map(|line| line.parse().expect("append prints versions"))
        .collect();
    let expected: Vec<u64> = (first..first + printed.len() as u64).collect();
    assert_eq!(printed, expected, "dense versions from {first}");
    printed.len() as u64
}

/// `durlog read DIR s` holds exactly the first `count` input lines, as
/// versions 1 to `count`.
fn assert_read_back(dir: &Path, count: u64) {
    let output = run(["read", text(dir), "s"]);
    assert_eq!(exit_code(&output), 0, "read: {output:?}");
    let read = stdout(&output);
    let lines: Vec<&str> = read.lines().collect();
    assert_eq!(
        lines.len() as u64,
        count,
        "every printed version and nothing else"
    );
    for (index, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], (index + 1).to_string(), "the version");
        assert_eq!(
            fields[3],
            input_line(index),
            "version {} reads back exactly",
            index + 1
        );
    }
}

/// Appends `lines` to a fresh log in `dir` that cannot hold them all;
/// checks the exit code, stderr (every one of `needles`, and one of
/// `errors`) and what reads back (`remount` drops the page cache first, as
/// a reboot would); returns the versions printed.
fn check_append_fails(
    fs: &mut SmallFs,
    dir: &Path,
    lines: usize,
    needles: &[&str],
    errors: &[&str],
    remount: bool,
) -> u64 {
    let output = run_with_input(["append", text(dir), "s"], input(0..lines).as_bytes());
    let printed = printed_versions(&output, 1);
    assert!(
        printed > 0 && (printed as usize) < lines,
        "some lines appended, not all: {printed} of {lines}"
    );
    let segment = dir.join(segment_name(1));
    let mut needles = needles.to_vec();
    needles.push(text(&segment));
    let line = assert_one_line_error(&output, 1, &needles);
    assert!(
        errors.iter().any(|error| line.contains(error)),
        "{line:?} names none of {errors:?}"
    );
    eprintln!("after {printed} versions, exit 1: {line}");
    if remount {
        fs.remount();
    }
    assert_read_back(dir, printed);
    printed
}

/// With room again, three more lines go in at the next versions.
fn append_resumes(dir: &Path, printed: u64) {
    let more = input(printed as usize..printed as usize + 3);
    let output = run_with_input(["append", text(dir), "s"], more.as_bytes());
    assert_eq!(exit_code(&output), 0, "append with room: {output:?}");
    printed_versions(&output, printed + 1);
    assert_read_back(dir, printed + 3);
}

#[test]
fn append_on_a_full_disk_exits_1_with_one_line_and_keeps_every_printed_version() {
    let test = "append_on_a_full_disk";
    let Some(mut fs) = SmallFs::ext4(test, 16 << 20, Ext4::Journaled) else {
        return;
    };
    let dir = fs.path().join("log");
    let filler = fs.fill(256 << 10);
    // 1000 lines of about 2 KiB: twice the room.
    let needles = ["durlog append: ", "write "];
    let errors = ["No space left on device"];
    let printed = check_append_fails(&mut fs, &dir, 1000, &needles, &errors, true);
    std::fs::remove_file(filler).expect("free the space");
    append_resumes(&dir, printed);
}

/// The ENOSPC of a thin-provisioned device comes from `fdatasync` (every
/// write was taken into the page cache), or an EIO: which the kernel
/// reports depends on what writeback sends to the full device first (see
/// the engine's `a_late_enospc_from_fdatasync` test); the command's
/// contract is the same for both. No remount: see that test for what this
/// device does to the page whose writeback failed.
#[test]
fn append_on_a_full_thin_device_exits_1_with_one_line_and_keeps_every_printed_version() {
    let test = "append_on_a_full_thin_device";
    let kind = Ext4::ThinNoJournal {
        headroom_bytes: 512 << 10,
    };
    let Some(mut fs) = SmallFs::ext4(test, 64 << 20, kind) else {
        return;
    };
    let dir = fs.path().join("log");
    let needles = ["durlog append: ", "fdatasync "];
    let errors = ["No space left on device", "Input/output error"];
    let printed = check_append_fails(&mut fs, &dir, 2000, &needles, &errors, false);
    fs.free_device();
    append_resumes(&dir, printed);
}

/// `ulimit -f` (in 512-byte blocks): the append that crosses the limit gets
/// a short write, then EFBIG; sh ignores SIGXFSZ first, else the kernel
/// would kill `durlog` instead.
#[test]
fn append_under_a_file_size_limit_exits_1_with_one_line_and_keeps_every_printed_version() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let dir = root.path().join("log");
    let limit_blocks = 200; // 100 KiB: about 48 lines
    let script = format!("trap '' XFSZ; ulimit -f {limit_blocks}; exec \"$0\" \"$@\"");
    let mut child = std::process::Command::new("sh")
        .args(["-c", &script, common::DURLOG, "append", text(&dir), "s"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        // The child stops reading at the failure: a broken pipe is fine.
        let _ = stdin.write_all(input(0..200).as_bytes());
    }
    let output = wait_with_output_within(child, "durlog append under ulimit -f", COMMAND_LIMIT);
    let printed = printed_versions(&output, 1);
    assert!(
        printed > 0 && printed < 200,
        "some lines appended: {printed}"
    );
    let segment = dir.join(segment_name(1));
    let needles = [
        "durlog append: ",
        "write ",
        text(&segment),
        "File too large",
    ];
    let line = assert_one_line_error(&output, 1, &needles);
    eprintln!("under ulimit -f {limit_blocks}, after {printed} versions, exit 1: {line}");
    let length = std::fs::metadata(&segment).expect("stat").len();
    assert!(
        length < limit_blocks * 512,
        "the append that crossed the limit was cut back: {length} bytes"
    );
    assert_read_back(&dir, printed);
    append_resumes(&dir, printed);
}

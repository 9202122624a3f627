//! `durlog purge` and `durlog truncate` (SPEC section 11), with real
//! processes on logs that `durlog append` wrote: what they remove and the
//! one line they print; `read`, `tail`, `verify` and `dump` after them (a
//! purged version is a clear error, the first seq kept and the state file
//! are shown); both are writers, so while another writer holds the log they
//! fail at once naming the directory and change nothing; bad arguments are
//! usage errors naming the argument; a damaged state file is refused by
//! name.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{
    TEST_LIMIT, assert_one_line_error, durlog, exit_code, flip_bit, run, run_with_input,
    segment_files, snapshot_tree, stderr, stdout, wait_within, within,
};
use durlog::{LogState, STATE_FILE_NAME};

/// Segments of 128 bytes hold two of the test log's records (51 to 55
/// bytes each).
const SEGMENT_BYTES: &str = "128";

/// How long a writer refused for the lock may take: it must fail at once.
const PROMPT_LIMIT: Duration = Duration::from_secs(30);

/// `durlog append DIR stream` of `lines`, in 128-byte segments; asserts it
/// printed their versions from `first_version` on.
fn append(dir: &Path, stream: &str, lines: &[&str], first_version: u64) {
    let input: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let output = run_with_input(
        [
            Path::new("append"),
            dir,
            Path::new(stream),
            Path::new("--segment-bytes"),
            Path::new(SEGMENT_BYTES),
        ],
        input.as_bytes(),
    );
    assert_eq!(exit_code(&output), 0, "append: {}", stderr(&output));
    let versions: String = (first_version..first_version + lines.len() as u64)
        .map(|version| format!("{version}\n"))
        .collect();
    assert_eq!(stdout(&output), versions);
}

/// A log of eight records in four segments, written by `durlog append`:
/// seqs 1-4 are `s` versions 1-4 (segments 1 and 3), seqs 5-6 `other`
/// versions 1-2 (segment 5), seqs 7-8 `s` versions 5-6 (segment 7).
/// Returns the segment files in order.
fn write_test_log(dir: &Path) -> Vec<PathBuf> {
    append(dir, "s", &["s1", "s2", "s3", "s4"], 1);
    append(dir, "other", &["o1", "o2"], 1);
    append(dir, "s", &["s5", "s6"], 5);
    let segments = segment_files(dir);
    let names: Vec<String> = segments.iter().map(|path| file_name(path)).collect();
    assert_eq!(
        names,
        [1, 3, 5, 7].map(durlog::segment_name),
        "the test log's layout"
    );
    segments
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").len()
}

/// `durlog COMMAND DIR args...`.
fn on(command: &str, dir: &Path, args: &[&str]) -> Output {
    let mut all = vec![PathBuf::from(command), dir.to_path_buf()];
    all.extend(args.iter().map(PathBuf::from));
    run(&all)
}

/// `durlog COMMAND DIR args...`, which must succeed silently on stderr;
/// returns its stdout.
fn ok(command: &str, dir: &Path, args: &[&str]) -> String {
    let output = on(command, dir, args);
    assert_eq!(
        exit_code(&output),
        0,
        "durlog {command} {args:?}: {}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), "", "durlog {command} {args:?}");
    stdout(&output)
}

/// `read DIR stream --from from` as (version, data) pairs.
fn read_stream(dir: &Path, stream: &str, from: u64) -> Vec<(u64, String)> {
    ok("read", dir, &[stream, "--from", &from.to_string()])
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 4, "not an event line: {line:?}");
            (fields[0].parse().expect("a version"), fields[3].to_owned())
        })
        .collect()
}

fn events(versions: std::ops::RangeInclusive<u64>, prefix: &str) -> Vec<(u64, String)> {
    versions
        .map(|version| (version, format!("{prefix}{version}")))
        .collect()
}

#[test]
fn purge_removes_the_oldest_segments_and_read_verify_dump_and_tail_show_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    let segments = write_test_log(dir);
    let purged_bytes = file_bytes(&segments[0]) + file_bytes(&segments[1]);
    let kept_bytes = file_bytes(&segments[2]) + file_bytes(&segments[3]);
    let kept_before: Vec<Vec<u8>> = segments[2..]
        .iter()
        .map(|path| std::fs::read(path).expect("read"))
        .collect();

    assert_eq!(
        ok("purge", dir, &["--before", "5"]),
        format!("purged 2 segments (4 records, {purged_bytes} bytes); first seq 5\n")
    );
    assert_eq!(segment_files(dir), segments[2..], "the segments left");
    let kept_after: Vec<Vec<u8>> = segments[2..]
        .iter()
        .map(|path| std::fs::read(path).expect("read"))
        .collect();
    assert_eq!(kept_after, kept_before, "purge changed a segment it kept");

    // A purged version of a stream: one line naming the stream, the
    // version and the first version kept.
    for from in ["1", "4"] {
        let output = on("read", dir, &["s", "--from", from]);
        let line = assert_one_line_error(
            &output,
            1,
            &[
                &dir.display().to_string(),
                "stream \"s\"",
                &format!("version {from} was purged"),
                "seq 5",
                "--from 5",
            ],
        );
        assert!(line.starts_with("durlog read: "), "{line}");
        assert_eq!(stdout(&output), "");
    }
    assert_eq!(read_stream(dir, "s", 5), events(5..=6, "s"));
    assert_eq!(read_stream(dir, "other", 1), events(1..=2, "o"));

    assert_eq!(
        ok("verify", dir, &[]),
        format!(
            "clean: {}: 2 segments, 4 records of {kept_bytes} bytes, first seq 5, last seq 8\n",
            dir.display()
        )
    );

    let dump = ok("dump", dir, &[]);
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.len(), 1 + 2 + 4 + 1, "{dump}");
    assert_eq!(lines[0], durlog_cli::inspect::DUMP_HEADER);
    assert_eq!(
        lines[1..3],
        [
            "# state: durlog.state: first seq 5; no truncation under way",
            "# state: stream s: versions 1..4 purged",
        ],
        "{dump}"
    );
    assert!(
        lines[3].starts_with("00000000000000000005.log\t0\t5\t"),
        "{dump}"
    );
    assert!(lines[7].starts_with("# tail: clean; 2 segments"), "{dump}");

    // `tail` starts at the first record kept; a purged seq is an error.
    let tailed = ok("tail", dir, &[]);
    let seqs: Vec<&str> = tailed
        .lines()
        .map(|line| line.split('\t').next().expect("a seq"))
        .collect();
    assert_eq!(seqs, ["5", "6", "7", "8"], "{tailed}");
    assert_one_line_error(&on("tail", dir, &["--from", "4"]), 1, &["seq 5"]);

    // The streams keep their versions.
    append(dir, "s", &["s7"], 7);
    append(dir, "other", &["o3"], 3);
}

#[test]
fn purge_never_removes_the_last_segment_and_says_which_records_stay() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    let segments = write_test_log(dir);
    let purged_bytes: u64 = segments[..3].iter().map(|path| file_bytes(path)).sum();
    assert_eq!(
        ok("purge", dir, &["--before", "100"]),
        format!(
            "purged 3 segments (6 records, {purged_bytes} bytes); first seq 7; the records from seq 7 on stay (a purge removes whole segments only, and never the last one)\n"
        )
    );
    assert_eq!(segment_files(dir), segments[3..]);
    assert_eq!(read_stream(dir, "s", 5), events(5..=6, "s"));
    // Every event of `other` went: its version stays, and a read of it
    // says so.
    assert_one_line_error(
        &on("read", dir, &["other"]),
        1,
        &["stream \"other\"", "every one of its 2 events was purged"],
    );
    assert_eq!(ok("streams", dir, &[]), "other\ns\n");

    // Nothing more to purge: nothing changes.
    let before = snapshot_tree(dir);
    let nothing = "purged 0 segments (0 records, 0 bytes); first seq 7";
    for (seq, stay) in [
        ("0", ""),
        ("7", ""),
        (
            "8",
            "; the records from seq 7 on stay (a purge removes whole segments only, and never the last one)",
        ),
    ] {
        assert_eq!(
            ok("purge", dir, &["--before", seq]),
            format!("{nothing}{stay}\n")
        );
        assert_eq!(snapshot_tree(dir), before, "purge --before {seq}");
    }
}

#[test]
fn truncate_removes_the_records_after_the_seq_and_the_streams_go_back() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    let segments = write_test_log(dir);
    // Segment 5 holds two records of `other` of the same length.
    let kept = file_bytes(&segments[0]) + file_bytes(&segments[1]) + file_bytes(&segments[2]) / 2;
    let removed = file_bytes(&segments[3]) + file_bytes(&segments[2]) / 2;
    assert_eq!(
        ok("truncate", dir, &["--after", "5"]),
        format!("truncated after seq 5: removed 3 records ({removed} bytes); last seq 5\n")
    );
    assert_eq!(segment_files(dir), segments[..3]);
    assert_eq!(read_stream(dir, "s", 1), events(1..=4, "s"));
    assert_eq!(read_stream(dir, "other", 1), events(1..=1, "o"));
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.ends_with(&format!(
            ": 3 segments, 5 records of {kept} bytes, last seq 5\n"
        )),
        "{verdict}"
    );
    let dump = ok("dump", dir, &[]);
    assert_eq!(
        dump.lines().nth(1),
        Some("# state: durlog.state: first seq 1; no truncation under way"),
        "{dump}"
    );
    // At or past the last seq: nothing changes.
    let before = snapshot_tree(dir);
    for seq in ["5", "6", &u64::MAX.to_string()] {
        assert_eq!(
            ok("truncate", dir, &["--after", seq]),
            format!("truncated after seq {seq}: removed 0 records (0 bytes); last seq 5\n")
        );
    }
    assert_eq!(snapshot_tree(dir), before);
    append(dir, "other", &["o2"], 2);

    // Back into records a purge removed: refused, and nothing changes.
    ok("purge", dir, &["--before", "5"]);
    let before = snapshot_tree(dir);
    let output = on("truncate", dir, &["--after", "3"]);
    let line = assert_one_line_error(&output, 1, &[&dir.display().to_string(), "purged", "seq 5"]);
    assert!(line.starts_with("durlog truncate: "), "{line}");
    assert_eq!(snapshot_tree(dir), before);
}

/// A `durlog append` holding the log: it has printed the version of its
/// first line and waits for more input, so the log is open (and locked).
struct Holder {
    child: std::process::Child,
}

impl Holder {
    fn start(dir: &Path) -> Holder {
        use std::io::{BufRead, BufReader, Write};
        let mut child = durlog([Path::new("append"), dir, Path::new("s")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn durlog append");
        let stdin = child.stdin.as_mut().expect("stdin is piped");
        stdin.write_all(b"held\n").expect("write a line");
        stdin.flush().expect("flush");
        let mut version = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout is piped"))
            .read_line(&mut version)
            .expect("read the version");
        assert_eq!(version, "7\n", "the holder's version");
        Holder { child }
    }

    /// Ends its input and waits for it to exit.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = wait_within(&mut self.child, "the holding durlog append", PROMPT_LIMIT);
        assert!(status.success(), "the holding append: {status:?}");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn purge_and_truncate_fail_at_once_while_another_writer_holds_the_log() {
    within(
        "purge_and_truncate_fail_at_once_while_another_writer_holds_the_log",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            write_test_log(&dir);
            let holder = Holder::start(&dir);
            let before = snapshot_tree(&dir);
            for (command, args) in [("purge", ["--before", "5"]), ("truncate", ["--after", "2"])] {
                let started = std::time::Instant::now();
                let output = on(command, &dir, &args);
                assert!(
                    started.elapsed() < PROMPT_LIMIT,
                    "durlog {command} waited for the lock"
                );
                let line = assert_one_line_error(&output, 1, &[&dir.display().to_string()]);
                assert_eq!(
                    line,
                    format!(
                        "durlog {command}: log {} is in use by another process or Log",
                        dir.display()
                    )
                );
                assert_eq!(stdout(&output), "");
                assert_eq!(
                    snapshot_tree(&dir),
                    before,
                    "the refused durlog {command} changed the directory"
                );
            }
            holder.finish();
            assert_eq!(
                ok("purge", &dir, &["--before", "5"]),
                format!(
                    "purged 2 segments (4 records, {} bytes); first seq 5\n",
                    before
                        .iter()
                        .filter(|(path, _)| {
                            let name = file_name(path);
                            name == durlog::segment_name(1) || name == durlog::segment_name(3)
                        })
                        .map(|(_, bytes)| bytes.as_ref().expect("a file").len())
                        .sum::<usize>()
                )
            );
        },
    );
}

#[test]
fn bad_arguments_are_usage_errors_naming_the_argument() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("log");
    write_test_log(&dir);
    let before = snapshot_tree(root.path());
    let cases: [(&[&str], &[&str]); 8] = [
        (&["purge", "DIR"], &["required", "--before <SEQ>"]),
        (
            &["purge", "DIR", "--before", "abc"],
            &["invalid value 'abc' for '--before <SEQ>'"],
        ),
        (&["purge", "DIR", "--before", "-1"], &["'-1'", "--before"]),
        (&["purge", "DIR", "--before"], &["--before <SEQ>"]),
        (&["purge", "--before", "5"], &["required", "<DIR>"]),
        (&["truncate", "DIR"], &["required", "--after <SEQ>"]),
        (
            &["truncate", "DIR", "--after", "5x"],
            &["invalid value '5x' for '--after <SEQ>'"],
        ),
        (
            &["truncate", "DIR", "--after", "18446744073709551616"],
            &["'--after <SEQ>'"],
        ),
    ];
    for (args, needles) in cases {
        let args: Vec<PathBuf> = args
            .iter()
            .map(|arg| {
                if *arg == "DIR" {
                    dir.clone()
                } else {
                    PathBuf::from(arg)
                }
            })
            .collect();
        let output = run(&args);
        let text = stderr(&output);
        assert_eq!(exit_code(&output), 1, "{args:?}: {text}");
        assert!(text.starts_with("error: "), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
        for needle in needles {
            assert!(text.contains(needle), "{args:?}: {text:?} lacks {needle:?}");
        }
        assert_eq!(stdout(&output), "", "{args:?}");
        assert_eq!(snapshot_tree(root.path()), before, "{args:?}");
    }

    // A missing directory is an error naming it, and is not created.
    let missing = root.path().join("missing");
    for (command, args) in [("purge", ["--before", "5"]), ("truncate", ["--after", "2"])] {
        let output = on(command, &missing, &args);
        assert_one_line_error(
            &output,
            1,
            &[&missing.display().to_string(), "No such file"],
        );
        assert!(!missing.exists(), "durlog {command} created the directory");
    }
}

#[test]
fn verify_and_dump_report_a_truncation_under_way_and_purged_segments_left_behind() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    let segments = write_test_log(dir);

    // A crash after a purge's state file was renamed, before its segments
    // were removed: the first one is back.
    let first = std::fs::read(&segments[0]).expect("read");
    ok("purge", dir, &["--before", "3"]);
    std::fs::write(&segments[0], &first).expect("put the first segment back");
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.contains(", first seq 3, last seq 8; 1 purged segment left to remove"),
        "{verdict}"
    );
    let dump = ok("dump", dir, &[]);
    assert!(
        dump.contains("\n# state: durlog.state: first seq 3; no truncation under way\n# state: stream s: versions 1..2 purged\n00000000000000000003.log\t0\t3\t"),
        "{dump}"
    );
    // The next writer removes it.
    append(dir, "s", &["s7"], 7);
    assert!(
        !segments[0].exists(),
        "the next writer left the purged segment"
    );
    assert!(!ok("verify", dir, &[]).contains("left to remove"));

    // A crash in a truncation after seq 4, after its state file named it.
    let state = LogState {
        first_seq: 3,
        truncate_after: Some(4),
        purged_versions: [("s".to_owned(), 2)].into(),
    };
    std::fs::write(dir.join(STATE_FILE_NAME), state.encode()).expect("write the state file");
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.contains("first seq 3, last seq 4; truncation under way after seq 4"),
        "{verdict}"
    );
    let dump = ok("dump", dir, &[]);
    assert!(
        dump.contains("\n# state: durlog.state: first seq 3; a truncation after seq 4 under way (the next writer's open finishes it)\n"),
        "{dump}"
    );
    // The next writer finishes it: `other` goes back to version 0.
    append(dir, "other", &["o1 again"], 1);
    assert!(!ok("verify", dir, &[]).contains("truncation"));
}

#[test]
fn a_damaged_state_file_is_refused_by_name_and_left_alone() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_test_log(dir);
    ok("purge", dir, &["--before", "5"]);
    let state_file = dir.join(STATE_FILE_NAME);
    flip_bit(&state_file, 20);
    let before = snapshot_tree(dir);
    let name = state_file.display().to_string();
    for (command, args, code) in [
        ("verify", &[][..], 4),
        ("dump", &[], 1),
        ("read", &["s", "--from", "5"], 1),
        ("tail", &[], 1),
        ("streams", &[], 1),
        ("purge", &["--before", "7"], 1),
        ("truncate", &["--after", "6"], 1),
    ] {
        let output = on(command, dir, args);
        let line = assert_one_line_error(&output, code, &[&name, "state file is damaged"]);
        assert!(line.starts_with(&format!("durlog {command}: ")), "{line}");
        assert_eq!(
            snapshot_tree(dir),
            before,
            "durlog {command} changed the log"
        );
    }
}

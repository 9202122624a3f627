//! `durlog append` and `durlog read` against the real binary: the text
//! format (tabs, escaping, RFC 3339 times), `--from` and `--limit`,
//! `--json`, and lines that round-trip byte for byte.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use common::{
    Append, COMMAND_LIMIT, assert_one_line_error, exit_code, run, run_with_input, snapshot_tree,
    stdout, wait_with_output_within, write_log,
};
use durlog::vfs::PosixVfs;
use durlog::{Log, Options};
use durlog_cli::escape::unescape;

/// 2024-02-29T12:34:56.123456789Z: a leap day, with every fraction digit.
const LEAP_DAY_NANOS: i64 = 1_709_210_096_123_456_789;

/// One log with known times: stream `s` holds five events, `t` one.
fn known_log(dir: &std::path::Path) {
    let appends: Vec<Append<'_>> = vec![
        ("s", &[("T", b"hi")]),
        (
            "s",
            &[(
                "kind\twith tab",
                b"tab\there, backslash\\ here, newline\n, \xff byte",
            )],
        ),
        ("s", &[("t", b""), ("t", b"two in one batch")]),
        ("t", &[("t", b"other stream")]),
        ("s", &[("t", b"caf\xc3\xa9")]),
    ];
    write_log(
        dir,
        0,
        &[0, LEAP_DAY_NANOS, -1, 7, 1_714_564_800_123_456_789],
        &appends,
    );
}

fn read(args: &[&str]) -> String {
    let output = run(args);
    assert_eq!(
        exit_code(&output),
        0,
        "durlog {args:?}: {}",
        common::stderr(&output)
    );
    stdout(&output)
}

#[test]
fn read_prints_version_type_time_and_escaped_data_separated_by_tabs() {
    let dir = tempfile::tempdir().expect("tempdir");
    known_log(dir.path());
    let path = dir.path().to_str().expect("UTF-8 path");
    let expected = "\
1\tT\t1970-01-01T00:00:00.000000000Z\thi
2\tkind\\twith tab\t2024-02-29T12:34:56.123456789Z\ttab\\there, backslash\\\\ here, newline\\n, \\xff byte
3\tt\t1969-12-31T23:59:59.999999999Z\t
4\tt\t1969-12-31T23:59:59.999999999Z\ttwo in one batch
5\tt\t2024-05-01T12:00:00.123456789Z\tcaf\u{e9}
";
    assert_eq!(read(&["read", path, "s"]), expected);
}

#[test]
fn escaped_data_round_trips_to_the_bytes_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    known_log(dir.path());
    let path = dir.path().to_str().expect("UTF-8 path");
    let log = Log::open_read_only(PosixVfs, dir.path()).expect("open read-only");
    let events = log.read("s", 1, usize::MAX).expect("read s");
    let text = read(&["read", path, "s"]);
    assert_eq!(text.lines().count(), events.len(), "one line per event");
    for (line, event) in text.lines().zip(&events) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "four tab-separated fields in {line:?}");
        assert_eq!(fields[0], event.version.to_string());
        assert_eq!(
            unescape(fields[1]).expect("type unescapes"),
            event.event_type.as_bytes()
        );
        assert_eq!(
            unescape(fields[3]).expect("data unescapes"),
            event.data,
            "line {line:?}"
        );
    }
}

#[test]
fn from_and_limit_select_a_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    known_log(dir.path());
    let path = dir.path().to_str().expect("UTF-8 path");
    let versions = |args: &[&str]| -> Vec<u64> {
        let mut all = vec!["read", path, "s"];
        all.extend_from_slice(args);
        read(&all)
            .lines()
            .map(|line| line.split('\t').next().unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(versions(&[]), [1, 2, 3, 4, 5]);
    assert_eq!(versions(&["--from", "0"]), [1, 2, 3, 4, 5]);
    assert_eq!(versions(&["--from", "2"]), [2, 3, 4, 5]);
    // Version 4 is the second event of a two-event record.
    assert_eq!(versions(&["--from", "4"]), [4, 5]);
    assert_eq!(versions(&["--from", "2", "--limit", "2"]), [2, 3]);
    assert_eq!(versions(&["--limit", "1"]), [1]);
    assert_eq!(versions(&["--limit", "0"]), Vec::<u64>::new());
    assert_eq!(versions(&["--from", "6"]), Vec::<u64>::new());
    assert_eq!(versions(&["--from", "5", "--limit", "10"]), [5]);
}

#[test]
fn json_lines_parse_and_carry_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    known_log(dir.path());
    let path = dir.path().to_str().expect("UTF-8 path");
    let text = read(&["read", path, "s", "--json"]);
    let values: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    assert_eq!(values.len(), 5);
    assert_eq!(
        values[0],
        serde_json::json!({
            "version": 1, "type": "T", "at": "1970-01-01T00:00:00.000000000Z",
            "at_unix_nanos": 0, "data": "hi"
        })
    );
    // Not UTF-8: the data comes as hex instead.
    assert_eq!(values[1]["type"], "kind\twith tab");
    assert_eq!(values[1]["at"], "2024-02-29T12:34:56.123456789Z");
    assert_eq!(values[1]["at_unix_nanos"], LEAP_DAY_NANOS);
    assert!(values[1].get("data").is_none());
    let hex = values[1]["data_hex"]
        .as_str()
        .expect("data_hex is a string");
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
        .collect();
    assert_eq!(bytes, b"tab\there, backslash\\ here, newline\n, \xff byte");
    assert_eq!(values[2]["data"], "");
    assert_eq!(values[2]["at_unix_nanos"], -1);
    assert_eq!(values[4]["data"], "caf\u{e9}");
    let limited = read(&["read", path, "s", "--json", "--from", "3", "--limit", "1"]);
    assert_eq!(limited.lines().count(), 1);
    assert!(limited.starts_with("{\"version\":3,"));
}

/// An event's id, metadata and content type come in its JSON line, from
/// `read` and from `tail`, where it has them; an event with none of them
/// prints as before.
#[test]
fn json_lines_carry_an_events_extras() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), Options::default()).expect("open");
    let id: [u8; 16] = std::array::from_fn(|at| at as u8 * 17);
    let events = [
        durlog::Event::new("T", "one")
            .with_id(id)
            .with_metadata(&b"\xffmeta"[..])
            .with_content_type("text/plain"),
        durlog::Event::new("T", "two").with_metadata("{\"by\":\"ada\"}"),
        durlog::Event::new("T", "three"),
    ];
    log.append("s", durlog::Expected::Any, &events)
        .expect("append");
    drop(log);
    let path = dir.path().to_str().expect("UTF-8 path");
    for (args, keys) in [
        (&["read", path, "s", "--json"][..], 0),
        (&["tail", path, "--json"][..], 2),
    ] {
        let values: Vec<serde_json::Value> = (read(args).lines())
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect();
        assert_eq!(values.len(), 3, "{args:?}");
        assert_eq!(
            values[0]["id"], "00112233445566778899aabbccddeeff",
            "{args:?}"
        );
        assert_eq!(values[0]["metadata_hex"], "ff6d657461", "{args:?}");
        assert_eq!(values[0]["content_type"], "text/plain", "{args:?}");
        assert_eq!(values[1]["metadata"], "{\"by\":\"ada\"}", "{args:?}");
        assert!(values[1].get("id").is_none() && values[1].get("content_type").is_none());
        let plain = values[2].as_object().expect("an object");
        assert_eq!(plain.len(), 5 + keys, "{args:?}: {plain:?}");
    }
}

#[test]
fn unknown_stream_prints_nothing_and_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    known_log(dir.path());
    let path = dir.path().to_str().expect("UTF-8 path");
    let output = run(["read", path, "nope"]);
    assert_eq!(exit_code(&output), 0);
    assert!(output.stdout.is_empty() && output.stderr.is_empty());
    let output = run(["read", path, "nope", "--json"]);
    assert_eq!(exit_code(&output), 0);
    assert!(output.stdout.is_empty());
}

#[test]
fn append_prints_one_version_per_line_and_read_gives_the_lines_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("new/nested");
    let path = log_dir.to_str().expect("UTF-8 path");
    // A tab and a backslash, an empty line, a carriage return (kept), a
    // byte that is not UTF-8, and a last line with no line feed.
    let input = b"a\tb\\c\n\nwith cr\r\n\xfe\xff\nlast";
    let output = run_with_input(["append", path, "s"], input);
    assert_eq!(exit_code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(stdout(&output), "1\n2\n3\n4\n5\n");
    let text = read(&["read", path, "s"]);
    let lines: Vec<&[u8]> = input.split(|&byte| byte == b'\n').collect();
    assert_eq!(text.lines().count(), lines.len());
    for (line, sent) in text.lines().zip(lines) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[1], "line", "the default type");
        assert_eq!(unescape(fields[3]).expect("unescapes"), sent);
    }
    assert!(text.starts_with("1\tline\t") && text.contains("\ta\\tb\\\\c\n"));

    // A second run continues the versions, with its own type.
    let output = run_with_input(["append", path, "s", "--type", "note"], b"more\n");
    assert_eq!(stdout(&output), "6\n");
    let output = run_with_input(["append", path, "other"], b"x\n");
    assert_eq!(stdout(&output), "1\n");
    assert!(read(&["read", path, "s", "--from", "6"]).starts_with("6\tnote\t"));
    assert_eq!(read(&["streams", path]), "other\ns\n");
    assert_eq!(read(&["streams", path, "o"]), "other\n");
    assert_eq!(read(&["streams", path, "zzz"]), "");
}

#[test]
fn append_rolls_segments_when_told_a_small_segment_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("UTF-8 path");
    let input: String = (0..20)
        .map(|line| format!("line number {line}\n"))
        .collect();
    let output = run_with_input(
        ["append", path, "s", "--segment-bytes", "200"],
        input.as_bytes(),
    );
    assert_eq!(exit_code(&output), 0);
    assert_eq!(stdout(&output).lines().count(), 20);
    assert!(common::segment_files(dir.path()).len() > 1);
    let log = Log::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(log.version("s"), 20);
}

#[test]
fn read_does_not_create_a_missing_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let path = missing.to_str().expect("UTF-8 path");
    let before = snapshot_tree(dir.path());
    assert_one_line_error(&run(["read", path, "s"]), 1, &[path]);
    assert!(!missing.exists());
    assert_eq!(snapshot_tree(dir.path()), before);
}

#[test]
fn read_into_a_closed_pipe_stops_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One record of 5,000 events: far more output than a pipe buffers.
    let events: Vec<(&str, &[u8])> = vec![("t", b"some data to fill the pipe"); 5_000];
    write_log(dir.path(), 0, &[0], &[("s", &events)]);
    let mut child = common::durlog([Path::new("read"), dir.path(), Path::new("s")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn durlog read");
    drop(child.stdout.take()); // the reader goes away, like `| head`
    let output = wait_with_output_within(child, "durlog read", COMMAND_LIMIT);
    assert_eq!(exit_code(&output), 0, "{}", common::stderr(&output));
    assert!(output.stderr.is_empty());
}

#[test]
fn append_that_cannot_print_its_version_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let mut child = common::durlog([Path::new("append"), dir.path(), Path::new("s")])
        .stdin(Stdio::piped())
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn durlog append");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"one\ntwo\n")
        .expect("write stdin");
    let output = wait_with_output_within(child, "durlog append", COMMAND_LIMIT);
    assert_one_line_error(
        &output,
        1,
        &[
            "appended version 1 of stream \"s\" durably",
            "No space left",
        ],
    );
    // The first line is durable; the second was never appended.
    let log = Log::open_read_only(PosixVfs, dir.path()).expect("open");
    assert_eq!(log.version("s"), 1);
}

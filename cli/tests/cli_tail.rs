//! `durlog tail`: the whole log in commit order, and `--follow` beside a
//! running `durlog append` in another process: every version the writer
//! printed shows up in the follower's output, in seq order, across
//! segment rolls, each once.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{TEST_LIMIT, durlog, exit_code, run, run_with_input, snapshot_tree, stdout, within};

#[test]
fn tail_prints_every_event_in_commit_order_with_seq_and_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let log_arg = log.to_str().expect("utf-8 path");
    run_with_input(["append", log_arg, "a"], b"one\ntwo\n");
    run_with_input(["append", log_arg, "b"], b"three\n");
    let before = snapshot_tree(&log);
    let all = run(["tail", log_arg]);
    assert_eq!(exit_code(&all), 0);
    let fields: Vec<Vec<String>> = stdout(&all)
        .lines()
        .map(|line| line.split('\t').map(str::to_owned).collect())
        .collect();
    let summary: Vec<(&str, &str, &str, &str)> = fields
        .iter()
        .map(|f| (f[0].as_str(), f[1].as_str(), f[2].as_str(), f[5].as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("1", "a", "1", "one"),
            ("2", "a", "2", "two"),
            ("3", "b", "1", "three")
        ]
    );
    let from_two = stdout(&run(["tail", log_arg, "--from", "2", "--streams", "b"]));
    assert_eq!(from_two.lines().count(), 1);
    assert!(from_two.starts_with("3\tb\t1\t"), "{from_two}");
    let json = stdout(&run(["tail", log_arg, "--json", "--from", "3"]));
    let value: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON line");
    assert_eq!(
        (value["seq"].as_u64(), value["stream"].as_str()),
        (Some(3), Some("b"))
    );
    assert_eq!(snapshot_tree(&log), before, "tail changed nothing");
}

/// A follower started first, then a writer in another process appending
/// line by line over small segments: the follower prints each acknowledged
/// version in order, once, within a bounded time.
#[test]
fn tail_follow_shows_what_a_running_append_writes() {
    within(
        "tail_follow_shows_what_a_running_append_writes",
        TEST_LIMIT,
        || {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = dir.path().join("log");
            let log_arg = log.to_str().expect("utf-8 path");
            run_with_input(["append", log_arg, "s"], b"first\n");
            let mut follower = KillOnDrop(
                durlog(["tail", log_arg, "--follow"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start tail --follow"),
            );
            let mut writer = durlog(["append", log_arg, "s", "--segment-bytes", "300"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start append");
            let mut writer_in = writer.stdin.take().expect("stdin");
            let mut writer_out = BufReader::new(writer.stdout.take().expect("stdout"));
            let mut lines = BufReader::new(follower.0.stdout.take().expect("stdout")).lines();
            let first = lines.next().expect("a line").expect("utf-8");
            assert!(first.starts_with("1\ts\t1\t"), "{first}");
            let deadline = Instant::now() + Duration::from_secs(60);
            for i in 2..=20u64 {
                writeln!(writer_in, "event {i}").expect("write to append");
                writer_in.flush().expect("flush");
                let mut version = String::new();
                writer_out.read_line(&mut version).expect("a version");
                assert_eq!(version.trim(), i.to_string(), "the writer's version");
                let line = lines.next().expect("the follower goes on").expect("utf-8");
                let fields: Vec<&str> = line.split('\t').collect();
                assert_eq!(
                    (fields[0], fields[2], fields[5]),
                    (
                        i.to_string().as_str(),
                        i.to_string().as_str(),
                        format!("event {i}").as_str()
                    ),
                    "{line}"
                );
                assert!(Instant::now() < deadline, "the follower fell behind");
            }
            drop(writer_in);
            assert!(writer.wait().expect("append ends").success());
            drop(follower);
            let segments = std::fs::read_dir(&log)
                .expect("list")
                .filter(|entry| {
                    let name = entry.as_ref().expect("entry").file_name();
                    name.to_string_lossy().ends_with(".log")
                })
                .count();
            assert!(segments > 1, "the writer rolled segments while followed");
        },
    );
}

/// A child process that is killed when the test lets go of it, also when
/// the test fails first: a follower never outlives its test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

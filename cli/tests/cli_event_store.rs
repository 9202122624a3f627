//! SPEC section 14 from the shell: `tail --types` (the engine's filter, in
//! the catch-up and in the follower that reads the files a writer in
//! another process fills), `tail --consumer` (a writer: from after the
//! consumer's position, recorded after each printed page, at least once,
//! and refused while another writer has the log), `delete` and
//! `metadata` (writers, honoured at once by `read`, `tail` and
//! `streams`), and the two tables in `dump` and `verify`, refused, named,
//! when damaged.

mod common;

use std::io::{self, BufRead, BufReader, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    Append, TEST_LIMIT, assert_one_line_error, durlog, exit_code, flip_bit, run, run_with_input,
    snapshot_tree, stdout, within, write_log, write_three_segment_log,
};
use durlog::vfs::PosixVfs;
use durlog::{Event, Expected, Log, Options};
use durlog_cli::inspect::ReadFormat;
use durlog_cli::tail::{self, TailArgs};

/// Five records of three streams; records 1 and 4 hold two events of two
/// types each, so a type filter keeps part of a record.
fn write_typed_log(dir: &Path) {
    let appends: Vec<Append<'_>> = vec![
        (
            "order-1",
            &[("order.created", b"c1"), ("order.noted", b"n1")],
        ),
        ("user-1", &[("user.created", b"u1")]),
        ("order-1", &[("order.shipped", b"s1")]),
        ("order-2", &[("order.created", b"c2"), ("audit", b"a2")]),
        ("user-1", &[("user.renamed", b"u2")]),
    ];
    let times: Vec<i64> = (0..appends.len() as i64).collect();
    write_log(dir, 0, &times, &appends);
}

/// How long a test waits out a lock that a moment's copy holds (see
/// [`unlocked`]).
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Runs `attempt` again while it fails because the log is locked. The
/// tests of this binary run on threads side by side, and a child process
/// another test spawns while this test's log is open gets a copy of every
/// descriptor, the lock file's too, until it execs: the lock (flock, which
/// belongs to the open file) outlives this test's close for that moment.
fn unlocked<T>(mut attempt: impl FnMut() -> T, mut locked: impl FnMut(&mut T) -> bool) -> T {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let mut outcome = attempt();
        if !locked(&mut outcome) || Instant::now() > deadline {
            return outcome;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_locked(output: &Output) -> bool {
    exit_code(output) == 1 && common::stderr(output).contains("in use by another process")
}

/// `durlog COMMAND DIR ARGS...`, once.
fn on_once(command: &str, dir: &Path, args: &[&str]) -> Output {
    let mut all: Vec<PathBuf> = vec![command.into(), dir.to_path_buf()];
    all.extend(args.iter().map(PathBuf::from));
    run(all)
}

/// `durlog COMMAND DIR ARGS...`, again while the log is locked (see
/// [`unlocked`]).
fn on(command: &str, dir: &Path, args: &[&str]) -> Output {
    unlocked(|| on_once(command, dir, args), |output| is_locked(output))
}

/// `durlog append DIR STREAM [--type T]` of `input`, which must succeed;
/// its stdout.
fn append(dir: &Path, stream: &str, event_type: Option<&str>, input: &[u8]) -> String {
    let mut args = vec!["append", dir.to_str().expect("utf-8 path"), stream];
    args.extend(event_type.iter().flat_map(|kind| ["--type", kind]));
    let output = unlocked(|| run_with_input(&args, input), |output| is_locked(output));
    assert_eq!(exit_code(&output), 0, "{}", common::stderr(&output));
    stdout(&output)
}

/// A writer of the log in `dir`, in this process (see [`unlocked`]).
fn open_writer(dir: &Path) -> Log {
    let log = unlocked(
        || Log::open_with_vfs(PosixVfs, dir, Options::default()),
        |opened| matches!(opened, Err(durlog::Error::Locked { .. })),
    );
    log.expect("open a writer")
}

/// `durlog COMMAND DIR ARGS...`, which must succeed; its stdout.
fn ok(command: &str, dir: &Path, args: &[&str]) -> String {
    let output = on(command, dir, args);
    assert_eq!(
        exit_code(&output),
        0,
        "durlog {command} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output)
}

/// (seq, stream, version, type, data) of each line `tail` printed.
fn tail_lines(text: &str) -> Vec<(u64, String, u64, String, String)> {
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 6, "not a tail line: {line:?}");
            (
                fields[0].parse().expect("a seq"),
                fields[1].to_owned(),
                fields[2].parse().expect("a version"),
                fields[3].to_owned(),
                fields[5].to_owned(),
            )
        })
        .collect()
}

/// (seq, stream, version, type) of each line, for short expectations.
fn summary(text: &str) -> Vec<(u64, String, u64, String)> {
    tail_lines(text)
        .into_iter()
        .map(|(seq, stream, version, kind, _)| (seq, stream, version, kind))
        .collect()
}

fn owned(lines: &[(u64, &str, u64, &str)]) -> Vec<(u64, String, u64, String)> {
    lines
        .iter()
        .map(|(seq, stream, version, kind)| (*seq, (*stream).into(), *version, (*kind).into()))
        .collect()
}

/// The versions `durlog read DIR STREAM` prints.
fn read_versions(dir: &Path, stream: &str) -> Vec<u64> {
    ok("read", dir, &[stream])
        .lines()
        .map(|line| {
            line.split('\t')
                .next()
                .expect("a version")
                .parse()
                .expect("a number")
        })
        .collect()
}

fn consumer_position(dir: &Path, name: &str) -> Option<u64> {
    let log = Log::open_read_only(PosixVfs, dir).expect("open read-only");
    log.consumer_position(name)
}

#[test]
fn tail_types_keeps_the_matching_events_and_skips_records_with_none() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_typed_log(dir);
    let before = snapshot_tree(dir);
    // Record 1 shows whole, 2 and 5 not at all, 4 with its first event.
    assert_eq!(
        summary(&ok("tail", dir, &["--types", "order."])),
        owned(&[
            (1, "order-1", 1, "order.created"),
            (1, "order-1", 2, "order.noted"),
            (3, "order-1", 3, "order.shipped"),
            (4, "order-2", 1, "order.created"),
        ])
    );
    assert_eq!(
        summary(&ok("tail", dir, &["--types", "order.created"])),
        owned(&[
            (1, "order-1", 1, "order.created"),
            (4, "order-2", 1, "order.created")
        ])
    );
    // Both prefixes must hold.
    assert_eq!(
        summary(&ok(
            "tail",
            dir,
            &["--types", "order.", "--streams", "order-2"]
        )),
        owned(&[(4, "order-2", 1, "order.created")])
    );
    assert_eq!(
        summary(&ok("tail", dir, &["--types", "user.", "--from", "3"])),
        owned(&[(5, "user-1", 2, "user.renamed")])
    );
    assert_eq!(ok("tail", dir, &["--types", "no-such-type"]), "");
    let json = ok("tail", dir, &["--types", "audit", "--json"]);
    let value: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON line");
    assert_eq!(
        (
            value["seq"].as_u64(),
            value["version"].as_u64(),
            value["data"].as_str()
        ),
        (Some(4), Some(2), Some("a2"))
    );
    assert_eq!(snapshot_tree(dir), before, "tail --types changed nothing");
}

/// A follower with `--types` and `--apply-metadata` beside a writer in
/// another process: it prints the events of the type asked for, none of
/// the others, and none that the stream's metadata hides, in order.
#[test]
fn tail_follow_filters_and_honours_metadata_like_the_catch_up() {
    within(
        "tail_follow_filters_and_honours_metadata_like_the_catch_up",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            let dir_arg = dir.to_str().expect("utf-8 path");
            append(&dir, "u", Some("keep"), b"ready\n");
            // Versions below 4 of s are not read.
            ok("metadata", &dir, &["s", "--truncate-before", "4"]);
            let mut follower = KillOnDrop(
                durlog([
                    "tail",
                    dir_arg,
                    "--follow",
                    "--types",
                    "ke",
                    "--apply-metadata",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tail --follow"),
            );
            let mut lines = BufReader::new(follower.0.stdout.take().expect("stdout")).lines();
            // Printed by the catch-up, after which the log it opened is
            // done with: every record from here on reaches the follower.
            let ready = lines.next().expect("a line").expect("utf-8");
            assert!(ready.starts_with("1\tu\t1\tkeep\t"), "{ready}");
            // Each line its own append, so that the follower meets them one
            // by one, or several at a poll.
            for (version, kind) in [
                (1, "keep"),
                (2, "keep"),
                (3, "keep"),
                (4, "drop"),
                (5, "keep"),
            ] {
                append(&dir, "s", Some(kind), format!("v{version}\n").as_bytes());
            }
            // One record of two events of t, of which t's metadata shows
            // the newest alone: the record is printed with that event.
            ok("metadata", &dir, &["t", "--max-count", "1"]);
            let writer = open_writer(&dir);
            let events = [
                Event::new("keep", &b"t1"[..]),
                Event::new("keep", &b"t2"[..]),
            ];
            writer.append("t", Expected::Any, &events).expect("append");
            writer.close().expect("close");
            append(&dir, "s", Some("keep"), b"v6\n");
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut seen = Vec::new();
            while seen
                .last()
                .is_none_or(|line: &String| !line.contains("\tv6"))
            {
                assert!(Instant::now() < deadline, "the follower printed {seen:?}");
                seen.push(lines.next().expect("the follower goes on").expect("utf-8"));
            }
            let seen = tail_lines(&(seen.join("\n") + "\n"));
            let printed: Vec<(u64, String, u64, String)> = seen
                .iter()
                .map(|(seq, stream, version, _, data)| {
                    (*seq, stream.clone(), *version, data.clone())
                })
                .collect();
            assert_eq!(
                printed,
                [
                    (6, "s".into(), 5, "v5".into()),
                    (7, "t".into(), 2, "t2".into()),
                    (8, "s".into(), 6, "v6".into()),
                ],
                "versions 1-3 of s are below its truncate-before, 4 is of another type, t1 is past t's max count"
            );
        },
    );
}

#[test]
fn tail_consumer_starts_after_its_position_and_records_it_as_it_prints() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_typed_log(dir);
    assert_eq!(
        summary(&ok(
            "tail",
            dir,
            &["--consumer", "p", "--record-every", "2"]
        ))
        .iter()
        .map(|line| line.0)
        .collect::<Vec<_>>(),
        [1, 1, 2, 3, 4, 4, 5]
    );
    assert_eq!(consumer_position(dir, "p"), Some(5));
    assert_eq!(ok("tail", dir, &["--consumer", "p"]), "", "nothing new");
    append(dir, "user-1", None, b"u3\n");
    assert_eq!(
        summary(&ok("tail", dir, &["--consumer", "p"])),
        owned(&[(6, "user-1", 3, "line")])
    );
    assert_eq!(consumer_position(dir, "p"), Some(6));

    // Filtered, a consumer handles the records that match nothing too: its
    // position is the log's last seq, though it printed seq 4 last.
    assert_eq!(
        summary(&ok(
            "tail",
            dir,
            &["--consumer", "q", "--types", "order.created"]
        )),
        owned(&[
            (1, "order-1", 1, "order.created"),
            (4, "order-2", 1, "order.created")
        ])
    );
    assert_eq!(consumer_position(dir, "q"), Some(6));
    // --from can only start later than the position.
    assert_eq!(
        summary(&ok("tail", dir, &["--consumer", "r", "--from", "5"])),
        owned(&[(5, "user-1", 2, "user.renamed"), (6, "user-1", 3, "line")])
    );
    assert_eq!(ok("tail", dir, &["--consumer", "r", "--from", "2"]), "");
    let dump = ok("dump", dir, &[]);
    for line in [
        "# consumers: durlog.consumers: 3 consumer positions",
        "# consumers: consumer p: handled up to seq 6",
        "# consumers: consumer q: handled up to seq 6",
    ] {
        assert!(dump.contains(&format!("{line}\n")), "{dump}");
    }
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.ends_with("; durlog.consumers: 3 consumer positions\n"),
        "{verdict}"
    );
}

/// Standard output that takes `pages_before_crash` pages (each page is
/// one write and one flush), then "crashes" at the next flush: the page's
/// bytes went out, the process dies before anything else happens.
struct CrashAfterPages {
    bytes: Vec<u8>,
    pages_before_crash: usize,
}

impl Write for CrashAfterPages {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.pages_before_crash == 0 {
            panic!("crash: a page printed, its position not yet recorded");
        }
        self.pages_before_crash -= 1;
        Ok(())
    }
}

fn consume(dir: &Path, record_every: usize, output: &mut dyn Write) {
    let args = TailArgs {
        dir,
        from: 1,
        follow: false,
        streams: "",
        types: "",
        apply_metadata: false,
        consumer: Some("p"),
        record_every,
        format: ReadFormat::Text,
    };
    unlocked(
        || tail::run(&args, output, &mut io::sink()),
        |outcome| {
            outcome
                .as_ref()
                .is_err_and(|error| error.to_string().contains("in use"))
        },
    )
    .expect("tail --consumer");
}

/// At least once, with the bound the help states: a crash right after a
/// page went out, before its position was recorded, replays that page and
/// nothing before it.
#[test]
fn a_crash_after_a_printed_page_replays_that_page_alone() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_typed_log(dir);
    let mut output = CrashAfterPages {
        bytes: Vec::new(),
        pages_before_crash: 1,
    };
    let crashed = catch_unwind(AssertUnwindSafe(|| consume(dir, 2, &mut output)));
    assert!(crashed.is_err(), "the output crashed the run");
    let printed: Vec<u64> = tail_lines(&String::from_utf8(output.bytes).unwrap())
        .iter()
        .map(|line| line.0)
        .collect();
    assert_eq!(
        printed,
        [1, 1, 2, 3, 4, 4],
        "two pages of two records went out"
    );
    assert_eq!(
        consumer_position(dir, "p"),
        Some(2),
        "recorded after the first page only"
    );
    let mut again = Vec::new();
    consume(dir, 2, &mut again);
    let replayed: Vec<u64> = tail_lines(&String::from_utf8(again).unwrap())
        .iter()
        .map(|line| line.0)
        .collect();
    assert_eq!(
        replayed,
        [3, 4, 4, 5],
        "the second page again, then the rest"
    );
    assert_eq!(consumer_position(dir, "p"), Some(5));
}

/// `--consumer` records positions, so it is a writer: while another writer
/// has the log it fails at once, prints nothing and records nothing. So do
/// `delete` and `metadata` with an option; `metadata` alone only reads.
#[test]
fn writer_commands_fail_at_once_while_another_writer_has_the_log() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_typed_log(dir);
    let writer = open_writer(dir);
    let before = snapshot_tree(dir);
    let in_use = dir.display().to_string();
    for (command, args) in [
        ("tail", &["--consumer", "p"][..]),
        ("delete", &["order-1"][..]),
        ("delete", &["order-1", "--hard"][..]),
        ("metadata", &["order-1", "--max-count", "1"][..]),
    ] {
        let output = on_once(command, dir, args);
        let line = assert_one_line_error(&output, 1, &[&in_use, "in use"]);
        assert!(line.starts_with(&format!("durlog {command}: ")), "{line}");
        assert_eq!(stdout(&output), "", "{command} {args:?} printed");
        assert_eq!(
            snapshot_tree(dir),
            before,
            "{command} {args:?} changed the log"
        );
    }
    assert_eq!(
        ok("metadata", dir, &["order-1"]),
        "stream order-1 (version 3): no metadata\n"
    );
    drop(writer);
    assert_eq!(tail_lines(&ok("tail", dir, &["--consumer", "p"])).len(), 7);
}

#[test]
fn bad_consumer_arguments_are_refused_before_anything_is_printed() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("log");
    write_typed_log(&dir);
    let before = snapshot_tree(root.path());
    for (args, needles) in [
        (
            &["--consumer", "p", "--follow"][..],
            &["'--consumer <NAME>' cannot be used with '--follow'"][..],
        ),
        (&["--record-every", "2"][..], &["--consumer <NAME>"][..]),
        (
            &["--consumer", "p", "--record-every", "0"][..],
            &["--record-every <N>"][..],
        ),
    ] {
        let output = on("tail", &dir, args);
        let text = common::stderr(&output);
        assert_eq!(exit_code(&output), 1, "{args:?}: {text}");
        assert!(text.starts_with("error: "), "{args:?}: {text}");
        for needle in needles {
            assert!(text.contains(needle), "{args:?}: {text:?} lacks {needle:?}");
        }
        assert_eq!(stdout(&output), "", "{args:?}");
    }
    let output = on("tail", &dir, &["--consumer", ""]);
    assert_one_line_error(&output, 1, &["consumer name \"\" is empty"]);
    assert_eq!(stdout(&output), "");
    assert_eq!(
        snapshot_tree(root.path()),
        before,
        "a refusal changed nothing"
    );
    let missing = root.path().join("missing");
    let output = on("tail", &missing, &["--consumer", "p"]);
    assert_one_line_error(
        &output,
        1,
        &[&missing.display().to_string(), "No such file"],
    );
    assert!(!missing.exists(), "tail --consumer created the directory");
}

/// A consumer whose next records a purge removed has lost them: refused,
/// naming the seqs gone and how to go on, until told to start later.
#[test]
fn a_consumer_behind_a_purge_is_refused_until_given_where_to_go_on() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_three_segment_log(dir);
    let log = open_writer(dir);
    log.record_consumer_position("p", 1).expect("record");
    log.close().expect("close");
    let purged = ok("purge", dir, &["--before", "5"]);
    assert!(
        purged.starts_with("purged 2 segments (4 records, ") && purged.ends_with("; first seq 5\n"),
        "{purged}"
    );
    let output = on("tail", dir, &["--consumer", "p"]);
    assert_one_line_error(
        &output,
        1,
        &[
            "consumer \"p\" handled the records up to seq 1",
            "removed seqs 2 to 4",
            "--from 5",
        ],
    );
    assert_eq!(stdout(&output), "");
    assert_eq!(consumer_position(dir, "p"), Some(1), "the purge kept it");
    let lines = tail_lines(&ok("tail", dir, &["--consumer", "p", "--from", "5"]));
    assert_eq!(lines.iter().map(|line| line.0).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(consumer_position(dir, "p"), Some(6));
}

#[test]
fn metadata_and_deletions_are_honoured_by_read_tail_and_streams() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    const X: &[(&str, &[u8])] = &[("t", b"x")];
    let appends: Vec<Append<'_>> = vec![
        ("a", X),
        ("a", X),
        ("a", X),
        ("a", X),
        ("a", X),
        ("b", &[("t", b"y")]),
        ("b", &[("t", b"z")]),
    ];
    let times: Vec<i64> = (0..appends.len() as i64).collect();
    write_log(dir, 0, &times, &appends);

    assert_eq!(
        ok("metadata", dir, &["a", "--max-count", "2"]),
        "stream a (version 5): max count 2\n"
    );
    assert_eq!(read_versions(dir, "a"), [4, 5]);
    let tailed = |args: &[&str]| -> Vec<(String, u64)> {
        tail_lines(&ok("tail", dir, args))
            .into_iter()
            .map(|(_, stream, version, _, _)| (stream, version))
            .collect()
    };
    assert_eq!(
        tailed(&["--streams", "a", "--apply-metadata"]),
        [("a".to_owned(), 4), ("a".to_owned(), 5)]
    );
    // `$all` is history: without --apply-metadata every event stays.
    let history: Vec<(String, u64)> = (1..=5).map(|version| ("a".to_owned(), version)).collect();
    assert_eq!(tailed(&["--streams", "a"]), history);
    // Each field given replaces its own; the others stay.
    assert_eq!(
        ok("metadata", dir, &["a", "--truncate-before", "5"]),
        "stream a (version 5): max count 2, truncate before 5\n"
    );
    assert_eq!(read_versions(dir, "a"), [5]);
    assert_eq!(
        ok(
            "metadata",
            dir,
            &["a", "--max-count", "none", "--truncate-before", "3"]
        ),
        "stream a (version 5): truncate before 3\n"
    );
    assert_eq!(read_versions(dir, "a"), [3, 4, 5]);
    // The events were written at 1970's first nanoseconds: all older.
    ok("metadata", dir, &["a", "--max-age", "3600"]);
    assert_eq!(read_versions(dir, "a"), Vec::<u64>::new());
    // Past u64 nanoseconds (584 years): kept as the most there is, not a
    // panic of the table's encoder.
    assert_eq!(
        ok("metadata", dir, &["a", "--max-age", "18446744073709551615"]),
        "stream a (version 5): max age 18446744073.709551615 s, truncate before 3\n"
    );
    assert_eq!(read_versions(dir, "a"), [3, 4, 5]);

    // Showing only reads.
    let before = snapshot_tree(dir);
    assert_eq!(
        ok("metadata", dir, &["a"]),
        "stream a (version 5): max age 18446744073.709551615 s, truncate before 3\n"
    );
    assert_eq!(snapshot_tree(dir), before, "metadata alone changed the log");

    // Soft: empty, left out, and a later append continues and shows.
    assert_eq!(
        ok("delete", dir, &["b"]),
        "deleted stream b (soft, at version 2): it reads as empty until a later append, which gets version 3\n"
    );
    assert_eq!(ok("streams", dir, &[]), "a\n");
    assert_eq!(ok("read", dir, &["b"]), "");
    assert!(tailed(&["--streams", "b", "--apply-metadata"]).is_empty());
    let both: Vec<(String, u64)> = vec![("b".to_owned(), 1), ("b".to_owned(), 2)];
    assert_eq!(tailed(&["--streams", "b"]), both, "history keeps them");
    let dir_arg = dir.to_str().expect("utf-8 path");
    assert_eq!(append(dir, "b", None, b"w\n"), "3\n");
    assert_eq!(read_versions(dir, "b"), [3]);
    assert_eq!(ok("streams", dir, &[]), "a\nb\n");
    assert_eq!(
        tailed(&["--streams", "b", "--apply-metadata"]),
        [("b".to_owned(), 3)]
    );

    // Hard: for good.
    assert_eq!(
        ok("delete", dir, &["b", "--hard"]),
        "deleted stream b for good (hard, at version 3): it reads as empty and refuses every later append\n"
    );
    assert_eq!(ok("read", dir, &["b"]), "");
    assert_eq!(ok("streams", dir, &[]), "a\n");
    let refused = [
        unlocked(
            || run_with_input(["append", dir_arg, "b"], b"v\n"),
            |output| is_locked(output),
        ),
        on("delete", dir, &["b"]),
        on("metadata", dir, &["b", "--max-count", "1"]),
    ];
    for output in &refused {
        assert_one_line_error(output, 1, &[dir_arg, "stream \"b\" was deleted for good"]);
    }
    assert_eq!(
        ok("delete", dir, &["b", "--hard"]).lines().count(),
        1,
        "again: a no-op"
    );

    let dump = ok("dump", dir, &[]);
    for line in [
        "# streams: durlog.streams: 2 streams with metadata or a deletion",
        "# streams: stream a: max age 18446744073.709551615 s, truncate before 3",
        "# streams: stream b: no metadata; deleted for good (hard)",
    ] {
        assert!(dump.contains(&format!("{line}\n")), "{dump}");
    }
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.ends_with("; durlog.streams: 2 streams with metadata or a deletion\n"),
        "{verdict}"
    );
    let output = on("metadata", dir, &["a", "--max-count", "ten"]);
    assert_eq!(exit_code(&output), 1);
    assert!(common::stderr(&output).contains("neither a whole number"));
}

/// A damaged table is corruption: every command refuses the log, naming
/// the file (verify with 4), and changes nothing. A new table a crash left
/// before its rename is not the log's: verify and dump say so, and the
/// next writer removes it.
#[test]
fn damaged_tables_are_refused_by_every_command_naming_the_file() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path();
    write_typed_log(dir);
    ok("metadata", dir, &["order-1", "--max-count", "1"]);
    ok("tail", dir, &["--consumer", "p"]);
    for name in ["durlog.streams", "durlog.consumers"] {
        let table = dir.join(name);
        let good = std::fs::read(&table).expect("read the table");
        flip_bit(&table, good.len() - 1);
        let before = snapshot_tree(dir);
        for (command, args, code) in [
            ("read", &["order-1"][..], 1),
            ("streams", &[][..], 1),
            ("dump", &[][..], 1),
            ("tail", &[][..], 1),
            ("tail", &["--consumer", "p"][..], 1),
            ("metadata", &["order-1"][..], 1),
            ("delete", &["order-1"][..], 1),
            ("verify", &[][..], 4),
        ] {
            let output = on(command, dir, args);
            assert_one_line_error(&output, code, &[&table.display().to_string(), "damaged"]);
            assert_eq!(
                snapshot_tree(dir),
                before,
                "{command} {args:?} changed the log"
            );
        }
        std::fs::write(&table, &good).expect("restore the table");
    }

    std::fs::write(dir.join("durlog.streams.new"), b"half a table").expect("write a temp");
    let verdict = ok("verify", dir, &[]);
    assert!(
        verdict.contains("durlog.streams.new left by a crash before its rename"),
        "{verdict}"
    );
    assert!(
        ok("dump", dir, &[]).contains("# tables: durlog.streams.new: a new table a crash left")
    );
    ok("delete", dir, &["user-1"]);
    assert!(
        !dir.join("durlog.streams.new").exists(),
        "the writer removed it"
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

#[test]
fn the_follower_stops_with_one_line_on_a_table_damaged_while_it_follows() {
    within(
        "the_follower_stops_with_one_line_on_a_table_damaged_while_it_follows",
        TEST_LIMIT,
        || {
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path().join("log");
            let dir_arg = dir.to_str().expect("utf-8 path");
            append(&dir, "s", None, b"one\n");
            ok("metadata", &dir, &["s", "--max-count", "5"]);
            // Only a follower that applies the metadata reads the table:
            // history needs none.
            let follower = durlog(["tail", dir_arg, "--follow", "--apply-metadata"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tail --follow");
            let mut follower = KillOnDrop(follower);
            let mut lines = BufReader::new(follower.0.stdout.take().expect("stdout")).lines();
            assert!(
                lines
                    .next()
                    .expect("a line")
                    .expect("utf-8")
                    .ends_with("\tone")
            );
            // A writer that read the table before the damage appends (a
            // writer opened after it would refuse the log).
            let writer = open_writer(&dir);
            let table = dir.join("durlog.streams");
            let len = std::fs::metadata(&table).expect("the table").len() as usize;
            flip_bit(&table, len - 1);
            let two = [Event::new("line", &b"two"[..])];
            writer.append("s", Expected::Any, &two).expect("append");
            let status = common::wait_within(&mut follower.0, "tail --follow", TEST_LIMIT);
            let mut stderr = String::new();
            std::io::Read::read_to_string(follower.0.stderr.as_mut().expect("stderr"), &mut stderr)
                .expect("read stderr");
            assert_eq!(status.code(), Some(1), "{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
            assert!(
                stderr.contains(&table.display().to_string()) && stderr.contains("damaged"),
                "{stderr}"
            );
            assert!(lines.next().is_none(), "nothing printed after the damage");
        },
    );
}

/// The replay bound under a real kill: `tail --consumer` killed (SIGKILL)
/// while it prints pages of 100 records into a pipe nobody reads: its
/// position is a page's end, every record up to it was printed, and at
/// most 100 records printed after it are printed again by the next run.
#[test]
fn a_killed_consumer_replays_at_most_one_page() {
    within(
        "a_killed_consumer_replays_at_most_one_page",
        TEST_LIMIT,
        || {
            const RECORDS: u64 = 3000;
            const PAGE: u64 = 100;
            let root = tempfile::tempdir().expect("tempdir");
            let dir = root.path();
            let event: &[(&str, &[u8])] = &[("t", &[b'x'; 100])];
            let appends: Vec<Append<'_>> = (0..RECORDS).map(|_| ("s", event)).collect();
            let times: Vec<i64> = (0..RECORDS as i64).collect();
            write_log(dir, 0, &times, &appends);
            // Started again while the log is locked for a moment (see
            // `unlocked`): a first line says it runs.
            let (mut consumer, mut lines, first) = unlocked(
                || {
                    let mut consumer = KillOnDrop(
                        durlog([
                            "tail".as_ref(),
                            dir.as_os_str(),
                            "--consumer".as_ref(),
                            "p".as_ref(),
                            "--record-every".as_ref(),
                            "100".as_ref(),
                        ])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("start tail --consumer"),
                    );
                    let mut lines =
                        BufReader::new(consumer.0.stdout.take().expect("stdout")).lines();
                    let first = lines.next().map(|line| line.expect("utf-8"));
                    (consumer, lines, first)
                },
                |(consumer, _, first)| {
                    let mut stderr = String::new();
                    if first.is_none()
                        && let Some(pipe) = consumer.0.stderr.as_mut()
                    {
                        let _ = std::io::Read::read_to_string(pipe, &mut stderr);
                    }
                    stderr.contains("in use")
                },
            );
            let mut printed: Vec<String> = first.into_iter().collect();
            assert_eq!(printed.len(), 1, "tail --consumer printed nothing");
            // Then the pipe fills (64 KiB, about 400 lines) and the consumer
            // waits in a write, with pages printed and recorded behind it.
            for _ in 1..800 {
                printed.push(lines.next().expect("a line").expect("utf-8"));
            }
            consumer.0.kill().expect("SIGKILL");
            consumer.0.wait().expect("reap");
            // What it wrote before the kill is still in the pipe.
            printed.extend(lines.map(|line| line.expect("utf-8")));
            let seqs: Vec<u64> = tail_lines(&(printed.join("\n") + "\n"))
                .iter()
                .map(|line| line.0)
                .collect();
            let last_printed = *seqs.last().expect("lines");
            assert_eq!(
                seqs,
                (1..=last_printed).collect::<Vec<_>>(),
                "in order, once"
            );
            let position = consumer_position(dir, "p").expect("a page was recorded");
            assert_eq!(position % PAGE, 0, "recorded at a page's end: {position}");
            assert!(
                position <= last_printed && last_printed - position <= PAGE,
                "recorded {position}, printed up to {last_printed}"
            );
            assert!(last_printed < RECORDS, "killed before the end");
            let rest: Vec<u64> = tail_lines(&ok("tail", dir, &["--consumer", "p"]))
                .iter()
                .map(|line| line.0)
                .collect();
            assert_eq!(rest, (position + 1..=RECORDS).collect::<Vec<_>>());
            assert_eq!(consumer_position(dir, "p"), Some(RECORDS));
        },
    );
}

/// `append --expected`: the stream must be at that version before the
/// first line, and a mismatch appends nothing and names the version the
/// stream is at (two shell scripts appending the same lines at the same
/// expected version: one wins, the other fails and writes nothing).
#[test]
fn append_checks_the_expected_version() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path().join("log");
    let path = dir.to_str().expect("utf-8 path");
    let with_expected = |stream: &str, expected: &str, input: &[u8]| {
        let args = ["append", path, stream, "--expected", expected];
        unlocked(|| run_with_input(args, input), |output| is_locked(output))
    };
    let first = with_expected("account-1", "no-stream", b"opened\ndeposited 100\n");
    assert_eq!(exit_code(&first), 0, "{}", common::stderr(&first));
    assert_eq!(stdout(&first), "1\n2\n");
    // The same deposit by a second writer that also read version 1.
    let second = with_expected("account-1", "1", b"deposited 100\n");
    assert_one_line_error(
        &second,
        1,
        &["account-1", "expected version 1", "at version 2"],
    );
    assert_eq!(stdout(&second), "");
    let third = with_expected("account-1", "2", b"deposited 100\nwithdrew 50\n");
    assert_eq!(exit_code(&third), 0, "{}", common::stderr(&third));
    assert_eq!(stdout(&third), "3\n4\n");
    let missing = with_expected("account-2", "exists", b"deposited 1\n");
    assert_one_line_error(&missing, 1, &["account-2", "at version 0"]);
    let log = Log::open_with_vfs(PosixVfs, &dir, Options::default()).expect("open");
    let data: Vec<Vec<u8>> = (log.read("account-1", 1, usize::MAX).expect("read").iter())
        .map(|event| event.data.clone())
        .collect();
    assert_eq!(
        data,
        [
            &b"opened"[..],
            b"deposited 100",
            b"deposited 100",
            b"withdrew 50"
        ]
    );
    assert_eq!(log.version("account-2"), 0);
    drop(log);
    let bad = with_expected("account-1", "two", b"x\n");
    assert_eq!(exit_code(&bad), 1);
    assert!(
        common::stderr(&bad).contains("not a version"),
        "{}",
        common::stderr(&bad)
    );
}

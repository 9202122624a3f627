//! Reading the whole log and following it: catch-up `read_all` (and
//! `visit_all`, lent) over a generated log next to Open's scan of the same log; the latency from
//! `append` returning to a live subscriber holding the record; and what
//! live subscribers cost the writers (rounds with and without them
//! alternate, so both see the same disk weather).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use durlog::{Event, Expected, Filter, Log, Options};

use crate::engine::{self, Shape};

/// Records asked of `read_all` at a time while catching up.
const PAGE_RECORDS: usize = 10_000;

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Catch-up over a log of about `log_bytes` of `data_bytes` events: the
/// whole log through `read_all` pages, then Open of the same log, both
/// from the page cache.
fn catch_up(dir: &Path, log_bytes: u64, data_bytes: usize, out: &mut String) -> Result<()> {
    let record_bytes = engine::encoded_record_bytes(data_bytes) as u64;
    let shape = Shape {
        events: (log_bytes / record_bytes).max(1),
        streams: 64,
        data_bytes,
        segment_bytes: durlog::DEFAULT_SEGMENT_BYTES,
    };
    let bytes = engine::generate(dir, shape)?;
    for round in 0..3 {
        let log = Log::open(dir, Options::default())?;
        let started = Instant::now();
        let mut next = 1;
        let mut records = 0u64;
        loop {
            let page = log.read_all(next, PAGE_RECORDS)?;
            let Some(last) = page.last() else { break };
            next = last.seq + 1;
            records += page.len() as u64;
        }
        let read_s = started.elapsed().as_secs_f64();
        ensure!(records == shape.events, "read_all gave {records} records");
        // The same records lent in place: what a projection pays.
        let started = Instant::now();
        let (mut lent, mut data) = (0u64, 0u64);
        log.visit_all(1, usize::MAX, &Filter::all(), |commit| {
            lent += 1;
            data += commit
                .events
                .iter()
                .map(|event| event.data.len() as u64)
                .sum::<u64>();
            ControlFlow::Continue(())
        })?;
        let visit_s = started.elapsed().as_secs_f64();
        ensure!(
            lent == shape.events && data > 0,
            "visit_all lent {lent} records"
        );
        drop(log);
        let started = Instant::now();
        let reopened = Log::open(dir, Options::default())?;
        let open_s = started.elapsed().as_secs_f64();
        drop(reopened);
        writeln!(
            out,
            "| {data_bytes} B | {round} | {:.2} GB/s, {:.0} records/s | {:.2} GB/s, {:.0} records/s | {:.2} GB/s, {:.0} records/s |",
            bytes as f64 / read_s / 1e9,
            records as f64 / read_s,
            bytes as f64 / visit_s / 1e9,
            records as f64 / visit_s,
            bytes as f64 / open_s / 1e9,
            records as f64 / open_s
        )?;
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// What one live round measured.
struct Live {
    appends_per_s: f64,
    /// Latencies in microseconds, from `append` returning to a subscriber
    /// holding the record (0 where the subscriber had it first).
    latencies_us: Vec<u64>,
    /// How many deliveries came before their `append` returned.
    early: u64,
    /// CPU time the whole process used, in core-seconds per second.
    cores: f64,
}

/// The scheduling class subscriber threads run in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// The writers' own.
    Normal,
    /// `SCHED_IDLE`: a subscriber runs only on a core nothing else wants,
    /// as a deployment that puts its writers first would run followers.
    Idle,
}

/// The process's user + system CPU time so far, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given and reads nothing.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage the call may write.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Puts the calling thread in `SCHED_IDLE`.
fn run_at_idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    assert_eq!(rc, 0, "sched_setscheduler(SCHED_IDLE)");
}

/// `writers` threads append 100 B events for `seconds` while
/// `subscribers` live subscriptions follow.
fn live(
    dir: &Path,
    writers: usize,
    subscribers: usize,
    priority: Priority,
    batching: Duration,
    seconds: f64,
) -> Result<Live> {
    let _ = std::fs::remove_dir_all(dir);
    let log = Arc::new(Log::open(dir, Options::default())?);
    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let stop = Arc::new(AtomicBool::new(false));
    let followers: Vec<_> = (0..subscribers)
        .map(|_| {
            let mut subscription = log.subscribe(1);
            subscription.set_batching(batching);
            std::thread::spawn(move || {
                if priority == Priority::Idle {
                    run_at_idle_priority();
                }
                let mut seen = Vec::new();
                for commit in subscription {
                    let commit = commit.expect("no error");
                    let at = start.elapsed().as_nanos() as u64;
                    seen.push((commit.stream, commit.first_version, at));
                }
                seen
            })
        })
        .collect();
    let deadline = Duration::from_secs_f64(seconds);
    let returned: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
                scope.spawn(move || {
                    let stream = format!("w{writer}");
                    let events = [Event::new("bench", vec![0xA5; 100])];
                    let mut done = Vec::new();
                    while !stop.load(Ordering::Relaxed) && start.elapsed() < deadline {
                        let version = log.append(&stream, Expected::Any, &events).expect("append");
                        done.push((version, start.elapsed().as_nanos() as u64));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("writer"))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cores = (cpu_seconds() - cpu_start) / elapsed;
    stop.store(true, Ordering::Relaxed);
    let appends: usize = returned.iter().map(Vec::len).sum();
    let mut returned_at = HashMap::new();
    for (writer, done) in returned.iter().enumerate() {
        for &(version, at) in done {
            returned_at.insert((format!("w{writer}"), version), at);
        }
    }
    drop(log);
    let mut latencies_us = Vec::new();
    let mut early = 0;
    for follower in followers {
        for (stream, version, at) in follower.join().expect("subscriber") {
            if let Some(&returned) = returned_at.get(&(stream, version)) {
                early += u64::from(at < returned);
                latencies_us.push(at.saturating_sub(returned) / 1000);
            }
        }
    }
    latencies_us.sort_unstable();
    Ok(Live {
        appends_per_s: appends as f64 / elapsed,
        latencies_us,
        early,
        cores,
    })
}

/// Runs everything and returns the markdown of results/follow.md.
pub fn run(
    data: &Path,
    log_bytes: u64,
    sizes: &[usize],
    rounds: usize,
    seconds: f64,
) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "### Catch-up: read_all and visit_all over a {} MiB log, next to Open (page cache)\n",
        log_bytes >> 20
    )?;
    writeln!(
        out,
        "| event | round | read_all | visit_all | Open |\n|---|---|---|---|---|"
    )?;
    for &size in sizes {
        catch_up(
            &data.join(format!("catch-up-{size}")),
            log_bytes,
            size,
            &mut out,
        )?;
    }
    writeln!(
        out,
        "\n### Live delivery: append returned -> subscriber holds it (100 B events)\n"
    )?;
    writeln!(
        out,
        "| writers | subscribers | round | appends/s | p50 us | p99 us | delivered before the append returned | CPU cores busy |\n|---|---|---|---|---|---|---|---|"
    )?;
    let mut cost = String::new();
    writeln!(
        cost,
        "\n### What live subscribers cost the writers (100 B events, alternating rounds)\n"
    )?;
    writeln!(
        cost,
        "| writers | round | 0 subscribers | 16 subscribers | ratio | 16 at SCHED_IDLE | ratio | 16 batching 1 ms | ratio |\n|---|---|---|---|---|---|---|---|---|"
    )?;
    let batching = Duration::from_millis(1);
    let runs = [
        (1, Priority::Normal, Duration::ZERO, ""),
        (16, Priority::Normal, Duration::ZERO, ""),
        (16, Priority::Idle, Duration::ZERO, " (SCHED_IDLE)"),
        (16, Priority::Normal, batching, " (batching 1 ms)"),
    ];
    for writers in [1, 32] {
        for round in 0..rounds {
            let without = live(
                &data.join("live"),
                writers,
                0,
                Priority::Normal,
                Duration::ZERO,
                seconds,
            )?;
            let mut with_16 = Vec::new();
            for (subscribers, priority, batching, label) in runs {
                let dir = data.join("live");
                let result = live(&dir, writers, subscribers, priority, batching, seconds)?;
                writeln!(
                    out,
                    "| {writers} | {subscribers}{label} | {round} | {:.0} | {} | {} | {} of {} | {:.2} |",
                    result.appends_per_s,
                    quantile(&result.latencies_us, 0.5),
                    quantile(&result.latencies_us, 0.99),
                    result.early,
                    result.latencies_us.len(),
                    result.cores,
                )?;
                if subscribers == 16 {
                    with_16.push(result.appends_per_s);
                }
            }
            let (normal, idle, batched) = (with_16[0], with_16[1], with_16[2]);
            writeln!(
                cost,
                "| {writers} | {round} | {:.0} ({:.2} cores) | {normal:.0} | {:.3} | {idle:.0} | {:.3} | {batched:.0} | {:.3} |",
                without.appends_per_s,
                without.cores,
                normal / without.appends_per_s,
                idle / without.appends_per_s,
                batched / without.appends_per_s,
            )?;
            eprintln!("follow: {writers} writers, round {round} done");
        }
    }
    let _ = std::fs::remove_dir_all(data.join("live"));
    out.push_str(&cost);
    Ok(out)
}

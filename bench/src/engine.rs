//! durlog-only benchmarks: append on the simulated disk, random reads,
//! Open (the recovery scan) and resident memory per stored event.
//!
//! The logs that reads, Open and memory work on are written directly with
//! durlog's public format functions (`encode_batch`, `append_record`,
//! `segment_name`), the bytes `append` would write, because a million
//! synced appends would take minutes; every such log is then opened with
//! `Log::open`, which checks each record, before anything is timed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use durlog::vfs::SimVfs;
use durlog::{Event, Log, Options, append_record, encode_batch, segment_name};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::harness::{self, Sample, System, Writer};

/// The shape of a generated log.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Shape {
    pub events: u64,
    pub streams: u64,
    pub data_bytes: usize,
    pub segment_bytes: u64,
}

/// Stream `i`'s name.
pub fn stream_name(index: u64) -> String {
    format!("stream-{index:06}")
}

/// Writes a log of `shape.events` one-event records, round-robin over the
/// streams, and makes it durable. Returns the bytes of records written.
pub fn generate(dir: &Path, shape: Shape) -> Result<u64> {
    ensure!(
        shape.events > 0 && shape.streams > 0,
        "empty log shape {shape:?}"
    );
    std::fs::create_dir_all(dir)?;
    ensure!(
        std::fs::read_dir(dir)?.next().is_none(),
        "{} is not empty",
        dir.display()
    );
    let names: Vec<String> = (0..shape.streams).map(stream_name).collect();
    let mut event = Event::new("bench", vec![0xA5u8; shape.data_bytes]);
    event.at = 1_700_000_000_000_000_000;
    let events = [event];
    let mut segment: Option<(BufWriter<File>, u64)> = None;
    let mut record = Vec::new();
    let mut total = 0u64;
    for seq in 1..=shape.events {
        let stream = (seq - 1) % shape.streams;
        let version = (seq - 1) / shape.streams + 1;
        let payload = encode_batch(&names[stream as usize], version, &events);
        record.clear();
        append_record(&mut record, seq, &payload);
        let len = record.len() as u64;
        // A new segment starts before a record that would take the current
        // one past the limit (SPEC 2.4).
        if segment
            .as_ref()
            .is_some_and(|(_, used)| used + len > shape.segment_bytes)
        {
            let (writer, _) = segment.take().expect("checked above");
            finish(writer)?;
        }
        let (writer, used) = match &mut segment {
            Some(open) => open,
            None => {
                let file = File::create(dir.join(segment_name(seq)))?;
                segment.insert((BufWriter::with_capacity(1 << 20, file), 0))
            }
        };
        writer.write_all(&record)?;
        *used += len;
        total += len;
    }
    if let Some((writer, _)) = segment {
        finish(writer)?;
    }
    File::open(dir)?.sync_all()?;
    Ok(total)
}

fn finish(writer: BufWriter<File>) -> Result<()> {
    let file = writer.into_inner().map_err(|error| error.into_error())?;
    file.sync_all()?;
    Ok(())
}

/// Opens a generated log and checks that recovery found all of it.
fn open_checked(dir: &Path, shape: Shape) -> Result<Log> {
    let log = Log::open(
        dir,
        Options {
            segment_bytes: shape.segment_bytes,
            ..Options::default()
        },
    )
    .with_context(|| format!("opening the generated log in {}", dir.display()))?;
    ensure!(
        log.recovery().records == shape.events,
        "recovery of {} found {} records, expected {}",
        dir.display(),
        log.recovery().records,
        shape.events
    );
    Ok(log)
}

/// durlog appending through the simulated disk: no real I/O, so this is
/// the engine's own cost per append (encode, CRC, group commit, index).
pub struct SimAppend {
    log: Log,
}

impl SimAppend {
    pub fn open() -> Result<SimAppend> {
        let vfs = SimVfs::new(1);
        // The trace would grow by several events per append.
        vfs.set_trace_recording(false);
        Ok(SimAppend {
            log: Log::open_with_vfs(vfs, "/bench", Options::default())?,
        })
    }
}

impl System for SimAppend {
    fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
        let stream = format!("writer-{id}");
        let events = [Event::new("bench", vec![0xA5u8; payload_bytes])];
        Ok(Box::new(move || {
            self.log.append(&stream, durlog::Expected::Any, &events)?;
            Ok(())
        }))
    }
}

/// Random single-event reads from a generated log.
pub struct RandomRead {
    log: Log,
    shape: Shape,
}

impl RandomRead {
    pub fn prepare(dir: &Path, shape: Shape) -> Result<RandomRead> {
        generate(dir, shape)?;
        Ok(RandomRead {
            log: open_checked(dir, shape)?,
            shape,
        })
    }
}

impl System for RandomRead {
    fn writer(&self, id: usize, _payload_bytes: usize) -> Result<Writer<'_>> {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5EED + id as u64);
        let names: Vec<String> = (0..self.shape.streams).map(stream_name).collect();
        let per_stream = self.shape.events / self.shape.streams;
        Ok(Box::new(move || {
            let stream = rng.next_u64() % names.len() as u64;
            let version = rng.next_u64() % per_stream + 1;
            let events = self.log.read(&names[stream as usize], version, 1)?;
            if events.len() != 1 || events[0].version != version {
                bail!(
                    "read of {} v{version} returned {} events",
                    names[stream as usize],
                    events.len()
                );
            }
            Ok(())
        }))
    }
}

/// One timed Open of a generated log.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpenRound {
    pub seconds: f64,
    pub record_bytes: u64,
    pub records: u64,
    pub segments: usize,
}

/// Writes a log of about `log_bytes`, opens it once to warm the page cache
/// and check it, then times `rounds` opens.
pub fn open_scan(
    dir: &Path,
    log_bytes: u64,
    data_bytes: usize,
    rounds: usize,
) -> Result<Vec<OpenRound>> {
    let record_bytes = (encoded_record_bytes(data_bytes)) as u64;
    let shape = Shape {
        events: (log_bytes / record_bytes).max(1),
        streams: 64,
        data_bytes,
        segment_bytes: durlog::DEFAULT_SEGMENT_BYTES,
    };
    generate(dir, shape)?;
    open_checked(dir, shape)?.close()?;
    let mut out = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let log = Log::open(dir, Options::default())?;
        let seconds = start.elapsed().as_secs_f64();
        let report = log.recovery().clone();
        ensure!(
            report.records == shape.events,
            "open found {} records",
            report.records
        );
        out.push(OpenRound {
            seconds,
            record_bytes: report.record_bytes,
            records: report.records,
            segments: report.segments,
        });
        log.close()?;
    }
    Ok(out)
}

/// Bytes of the record that one event of `data_bytes` makes in a stream
/// named like [`stream_name`].
pub fn encoded_record_bytes(data_bytes: usize) -> usize {
    let events = [Event::new("bench", vec![0u8; data_bytes])];
    durlog::HEADER_SIZE + encode_batch(&stream_name(0), 1, &events).len()
}

/// What the memory child measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memory {
    pub shape: Option<Shape>,
    pub rss_before_kib: u64,
    pub rss_after_open_kib: u64,
    /// After `malloc_trim(0)`: scan buffers freed by Open handed back, so
    /// what remains is the index (and the allocator's own overhead).
    pub rss_after_trim_kib: u64,
    pub open_seconds: f64,
}

impl Memory {
    pub fn bytes_per_event(&self, kib: u64) -> f64 {
        let events = self.shape.map_or(1, |shape| shape.events) as f64;
        (kib.saturating_sub(self.rss_before_kib) * 1024) as f64 / events
    }
}

/// Writes the log for the memory measurement (few streams, small events,
/// big segments).
pub fn memory_shape(events: u64) -> Shape {
    Shape {
        events,
        streams: 4,
        data_bytes: 8,
        segment_bytes: 256 << 20,
    }
}

/// Runs in a fresh process (`memory-child`), so nothing else has grown the
/// heap: RSS before and after opening the log in `dir`.
pub fn memory_child(dir: &Path, shape: Shape) -> Result<Memory> {
    let rss_before_kib = rss_kib()?;
    let start = Instant::now();
    let log = open_checked(dir, shape)?;
    let open_seconds = start.elapsed().as_secs_f64();
    let rss_after_open_kib = rss_kib()?;
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe { libc::malloc_trim(0) };
    let rss_after_trim_kib = rss_kib()?;
    // The log must still be alive when RSS is read.
    ensure!(log.version(&stream_name(0)) == shape.events.div_ceil(shape.streams));
    drop(log);
    Ok(Memory {
        shape: Some(shape),
        rss_before_kib,
        rss_after_open_kib,
        rss_after_trim_kib,
        open_seconds,
    })
}

pub fn rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}

/// Appends/s of durlog on the simulated disk, one round.
pub fn sim_round(
    threads: usize,
    payload_bytes: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Sample> {
    let system = SimAppend::open()?;
    harness::run(&system, threads, payload_bytes, warmup, duration)
}

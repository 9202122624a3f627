//! What a filter saves: `read_all` of a generated log of about 1 GiB
//! (`--open-bytes`) next to `read_all_filtered` by one event type (an
//! eighth of the events) and by one stream prefix (an eighth of the
//! records), in pages of 10,000 records, the three reads alternating in
//! each round (their order rotating) so that all see the same machine,
//! from the page cache (an untimed read of everything first warms it).
//!
//! The log: records of one event (70%), two (20%) or three or four (10%),
//! each event's type drawn from eight, independently of its stream (one of
//! 1,024 in eight categories: `order-17`, `payment-3`, ...), its data a
//! JSON-like object of a size around its type's mean (90 to 540 bytes,
//! from half to one and a half times it), as an event store's log holds.
//! It is written directly with the engine's format functions, as
//! `engine::generate` writes its logs, and the counts every read returns
//! are checked against what was written.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, ensure};
use durlog::vfs::PosixVfs;
use durlog::{Event, Filter, Log, append_record, encode_batch, segment_name};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Records asked of the log at a time (as `follow`'s catch-up asks).
const PAGE_RECORDS: usize = 10_000;

/// The event types and the mean size of their data.
const TYPES: [(&str, usize); 8] = [
    ("order.created", 420),
    ("order.paid", 160),
    ("order.shipped", 220),
    ("cart.item-added", 120),
    ("cart.checked-out", 300),
    ("user.registered", 260),
    ("user.profile-updated", 540),
    ("audit.logged", 90),
];

/// The stream categories, each with `STREAMS_PER_CATEGORY` streams.
const CATEGORIES: [&str; 8] = [
    "order-",
    "cart-",
    "user-",
    "payment-",
    "shipment-",
    "invoice-",
    "review-",
    "audit-",
];
const STREAMS_PER_CATEGORY: usize = 128;

/// The type the type filter keeps, and the prefix the stream filter keeps.
const TYPE_KEPT: &str = "order.shipped";
const PREFIX_KEPT: &str = "payment-";

/// What the generator wrote, and what each filter must return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    records: u64,
    events: u64,
    data_bytes: u64,
}

struct Written {
    log_bytes: u64,
    all: Counts,
    by_type: Counts,
    by_prefix: Counts,
}

fn stream_name(index: usize) -> String {
    let category = CATEGORIES[index % CATEGORIES.len()];
    format!("{category}{}", index / CATEGORIES.len())
}

/// Writes the log (segments of the default size) and syncs it.
fn generate(dir: &Path, log_bytes: u64) -> Result<Written> {
    std::fs::create_dir_all(dir)?;
    ensure!(
        std::fs::read_dir(dir)?.next().is_none(),
        "{} is not empty",
        dir.display()
    );
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    // Letters to cut event data from: no allocation per byte.
    let letters: Vec<u8> = (0..1 << 16)
        .map(|_| b'a' + (rng.next_u32() % 26) as u8)
        .collect();
    let streams = CATEGORIES.len() * STREAMS_PER_CATEGORY;
    let names: Vec<String> = (0..streams).map(stream_name).collect();
    let mut versions = vec![0u64; streams];
    let mut written = Written {
        log_bytes: 0,
        all: Counts::default(),
        by_type: Counts::default(),
        by_prefix: Counts::default(),
    };
    let segment_bytes = durlog::DEFAULT_SEGMENT_BYTES;
    let mut segment: Option<(BufWriter<File>, u64)> = None;
    let mut record = Vec::new();
    let mut seq = 0u64;
    while written.log_bytes < log_bytes {
        seq += 1;
        let stream = rng.random_range(0..streams);
        let count = match rng.random_range(0..10) {
            0..7 => 1,
            7..9 => 2,
            _ => rng.random_range(3..=4),
        };
        let mut events = Vec::with_capacity(count);
        let mut kept_by_type = Counts::default();
        for _ in 0..count {
            let (event_type, mean) = TYPES[rng.random_range(0..TYPES.len())];
            let len = rng.random_range(mean / 2..=mean * 3 / 2);
            let data = event_data(&mut rng, &letters, seq, len);
            if event_type == TYPE_KEPT {
                kept_by_type.events += 1;
                kept_by_type.data_bytes += data.len() as u64;
            }
            let mut event = Event::new(event_type, data);
            event.at = 1_700_000_000_000_000_000 + seq as i64 * 1_000;
            events.push(event);
        }
        let data_bytes: u64 = events.iter().map(|event| event.data.len() as u64).sum();
        let counts = Counts {
            records: 1,
            events: count as u64,
            data_bytes,
        };
        add(&mut written.all, counts);
        if kept_by_type.events > 0 {
            kept_by_type.records = 1;
            add(&mut written.by_type, kept_by_type);
        }
        if names[stream].starts_with(PREFIX_KEPT) {
            add(&mut written.by_prefix, counts);
        }
        let payload = encode_batch(&names[stream], versions[stream] + 1, &events);
        versions[stream] += count as u64;
        record.clear();
        append_record(&mut record, seq, &payload);
        let len = record.len() as u64;
        // A new segment starts before a record that would take the current
        // one past the limit (SPEC 2.4).
        if segment
            .as_ref()
            .is_some_and(|(_, used)| used + len > segment_bytes)
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
        written.log_bytes += len;
    }
    if let Some((writer, _)) = segment {
        finish(writer)?;
    }
    File::open(dir)?.sync_all()?;
    Ok(written)
}

fn add(total: &mut Counts, counts: Counts) {
    total.records += counts.records;
    total.events += counts.events;
    total.data_bytes += counts.data_bytes;
}

/// `{"id":"SEQ","body":"letters..."}`, `len` bytes (at least the frame).
fn event_data(rng: &mut ChaCha8Rng, letters: &[u8], seq: u64, len: usize) -> Vec<u8> {
    let mut data = format!("{{\"id\":\"{seq:012}\",\"body\":\"").into_bytes();
    let body = len.saturating_sub(data.len() + 2);
    let start = rng.random_range(0..letters.len() - body);
    data.extend_from_slice(&letters[start..start + body]);
    data.extend_from_slice(b"\"}");
    data
}

fn finish(writer: BufWriter<File>) -> Result<()> {
    let file = writer.into_inner().map_err(|error| error.into_error())?;
    file.sync_all()?;
    Ok(())
}

/// The three reads, and Open's scan of the same bytes for reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    All,
    ByType,
    ByPrefix,
    /// `Log::open_read_only`: the recovery scan (every record's CRC, seq
    /// and batch checked, the index built), which copies no event: what
    /// reading every byte costs at the least.
    Open,
}

impl Read {
    const EVERY: [Read; 4] = [Read::All, Read::ByType, Read::ByPrefix, Read::Open];

    fn filter(self) -> Filter {
        match self {
            Read::All => Filter::all(),
            Read::ByType => Filter::all().event_type(TYPE_KEPT),
            Read::ByPrefix => Filter::all().stream_prefix(PREFIX_KEPT),
            Read::Open => unreachable!("Open reads no records"),
        }
    }

    fn name(self) -> String {
        match self {
            Read::All => "read_all".into(),
            Read::ByType => format!("filtered: type {TYPE_KEPT}"),
            Read::ByPrefix => format!("filtered: stream prefix {PREFIX_KEPT}"),
            Read::Open => "Open's scan (reference)".into(),
        }
    }

    fn expected(self, written: &Written) -> Counts {
        match self {
            Read::All => written.all,
            Read::ByType => written.by_type,
            Read::ByPrefix => written.by_prefix,
            Read::Open => Counts::default(),
        }
    }
}

/// Reads the whole log through `read`'s filter, in pages; the seconds it
/// took and what it returned.
fn time_read(dir: &Path, log: &Log, read: Read) -> Result<(f64, Counts)> {
    if read == Read::Open {
        let started = Instant::now();
        let opened = Log::open_read_only(PosixVfs, dir)?;
        let seconds = started.elapsed().as_secs_f64();
        ensure!(opened.size() == log.size(), "Open found another log");
        return Ok((seconds, Counts::default()));
    }
    let filter = read.filter();
    let started = Instant::now();
    let mut next = 1;
    let mut counts = Counts::default();
    loop {
        let page = log.read_all_filtered(next, PAGE_RECORDS, &filter)?;
        let Some(last) = page.last() else { break };
        next = last.seq + 1;
        for commit in &page {
            counts.records += 1;
            counts.events += commit.events.len() as u64;
            counts.data_bytes += commit
                .events
                .iter()
                .map(|event| event.data.len() as u64)
                .sum::<u64>();
        }
    }
    Ok((started.elapsed().as_secs_f64(), counts))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn range(values: &[f64], digits: usize) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.digits$}-{high:.digits$}")
}

/// Generates the log in `dir`, reads it `rounds` times each way, and
/// returns the tables (markdown).
pub fn run(dir: &Path, log_bytes: u64, rounds: usize) -> Result<String> {
    let started = Instant::now();
    let written = generate(dir, log_bytes)?;
    eprintln!(
        "filter: wrote {} records, {} events, {} bytes in {:.1} s",
        written.all.records,
        written.all.events,
        written.log_bytes,
        started.elapsed().as_secs_f64()
    );
    // Read-only: no lock, nothing changed; every record is still checked
    // (CRC, seq, batch) as it is read.
    let log = Log::open_read_only(PosixVfs, dir)?;
    ensure!(
        log.size() == written.log_bytes,
        "the log holds {} bytes",
        log.size()
    );
    let (warm_seconds, _) = time_read(dir, &log, Read::All)?;
    eprintln!("filter: warm-up read_all {warm_seconds:.2} s");
    let gb = written.log_bytes as f64 / 1e9;
    let mut out = String::new();
    let load_before = crate::guard::loadavg();
    writeln!(
        out,
        "Log: {} records, {} events, {:.2} GB of records ({:.0} B of data an event on average) in {} segment files; \
         type {TYPE_KEPT}: {} events in {} records; stream prefix {PREFIX_KEPT}: {} records, {} events. \
         Page cache warm (an untimed read_all first). Pages of {PAGE_RECORDS} records.\n",
        written.all.records,
        written.all.events,
        gb,
        written.all.data_bytes as f64 / written.all.events as f64,
        log.recovery().segments,
        written.by_type.events,
        written.by_type.records,
        written.by_prefix.records,
        written.by_prefix.events,
    )?;
    writeln!(
        out,
        "| round | read | seconds | log scanned | records returned | events returned | data returned |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); Read::EVERY.len()];
    for round in 0..rounds {
        let mut order = Read::EVERY;
        order.rotate_left(round % Read::EVERY.len());
        for read in order {
            let (elapsed, counts) = time_read(dir, &log, read)?;
            ensure!(
                counts == read.expected(&written),
                "{}: returned {counts:?}, expected {:?}",
                read.name(),
                read.expected(&written)
            );
            let index = Read::EVERY.iter().position(|r| *r == read).expect("one of");
            seconds[index].push(elapsed);
            let returned = match read {
                Read::Open => "- | - | -".to_owned(),
                _ => format!(
                    "{:.2} M/s | {:.2} M/s | {:.0} MB/s",
                    counts.records as f64 / elapsed / 1e6,
                    counts.events as f64 / elapsed / 1e6,
                    counts.data_bytes as f64 / elapsed / 1e6,
                ),
            };
            let line = format!(
                "| {} | {} | {elapsed:.3} | {:.2} GB/s | {returned} |",
                round + 1,
                read.name(),
                gb / elapsed,
            );
            eprintln!("{line}");
            writeln!(out, "{line}")?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "Load average before the rounds {load_before}, after {}.\n",
        crate::guard::loadavg()
    )?;
    writeln!(
        out,
        "| read | log scanned, GB/s (median; range) | events returned, M/s (median) | time against read_all in the same round (median; range) |"
    )?;
    writeln!(out, "|---|---|---|---|")?;
    for (index, read) in Read::EVERY.iter().enumerate() {
        let mut rates: Vec<f64> = seconds[index].iter().map(|s| gb / s).collect();
        let range_text = range(&rates, 2);
        let events = read.expected(&written).events as f64;
        let mut event_rates: Vec<f64> = seconds[index].iter().map(|s| events / s / 1e6).collect();
        let mut ratios: Vec<f64> = seconds[index]
            .iter()
            .zip(&seconds[0])
            .map(|(filtered, all)| filtered / all)
            .collect();
        let ratio_range = range(&ratios, 2);
        let events_text = match read {
            Read::Open => "-".to_owned(),
            _ => format!("{:.2}", median(&mut event_rates)),
        };
        writeln!(
            out,
            "| {} | {:.2}; {range_text} | {events_text} | {:.2}; {ratio_range} |",
            read.name(),
            median(&mut rates),
            median(&mut ratios),
        )?;
    }
    drop(log);
    let _ = std::fs::remove_dir_all(dir);
    Ok(out)
}

//! What a consumer's position costs beside an append, on the disk under
//! DIR (never tmpfs: the figures are fsyncs): `cargo run --release -p
//! durlog --example position_cost -- DIR [ROUNDS]`. Each round appends one
//! event, records the writer's consumer position
//! (`Log::record_consumer_position`: a table written, synced and renamed
//! in, the directory synced) and records a `PositionFile`'s (one slot
//! written and synced), taking turns so that the disk's drift touches all
//! three alike; it prints each one's median and the ratios.

use std::time::{Duration, Instant};

use durlog::vfs::PosixVfs;
use durlog::{Event, Expected, Log, Options, PositionFile};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: position_cost DIR [ROUNDS]")?;
    let rounds: usize = args.next().map_or(Ok(200), |rounds| rounds.parse())?;
    let scratch = tempfile::tempdir_in(&dir)?;
    let log = Log::open(scratch.path().join("log"), Options::default())?;
    let mut file = PositionFile::open(&PosixVfs, scratch.path().join("position"))?;
    let (mut appends, mut tables, mut files) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let started = Instant::now();
        let event = Event::new("deposited", round.to_le_bytes().to_vec());
        log.append("account", Expected::Any, &[event])?;
        appends.push(started.elapsed());
        let seq = log.last_seq();
        let started = Instant::now();
        log.record_consumer_position("projection", seq)?;
        tables.push(started.elapsed());
        let started = Instant::now();
        file.record(seq)?;
        files.push(started.elapsed());
    }
    let (append, table, position) = (median(appends), median(tables), median(files));
    println!("{rounds} rounds under {dir}, medians:");
    println!("  append (one event, its fdatasync)        {append:?}");
    println!(
        "  Log::record_consumer_position             {table:?} ({:.2} appends)",
        table.as_secs_f64() / append.as_secs_f64()
    );
    println!(
        "  PositionFile::record                      {position:?} ({:.2} appends)",
        position.as_secs_f64() / append.as_secs_f64()
    );
    Ok(())
}

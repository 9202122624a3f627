//! What the simulated disk costs: small appends (target: at most 150 ns
//! each), appends with a sync each, and a crash, which must cost in
//! proportion to the unsynced pages and not to the size of the disk.
//!
//! Run: `cargo bench -p durlog-vfs --bench simvfs -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use durlog_vfs::{FaultConfig, FaultKind, OpenMode, PAGE_BYTES, SimVfs, Vfs, VfsFile};

/// Appends wrap around here (after a truncate to 0), so a long measurement
/// does not grow the file without bound.
const WRAP_BYTES: u64 = 64 << 20;
const RECORD: [u8; 100] = [0x5a; 100];

/// A disk with one segment being appended to.
struct Appender {
    vfs: SimVfs,
    file: Box<dyn VfsFile>,
    offset: u64,
}

impl Appender {
    fn new(faults: FaultConfig, recording: bool) -> Appender {
        let vfs = SimVfs::with_faults(1, faults);
        vfs.set_trace_recording(recording);
        vfs.create_dir_all(Path::new("/d")).unwrap();
        let file = vfs
            .open(Path::new("/d/segment"), OpenMode::CreateNew)
            .unwrap();
        Appender {
            vfs,
            file,
            offset: 0,
        }
    }

    /// Times `iters` 100-byte appends, each followed by `after_write`.
    fn run(&mut self, iters: u64, after_write: impl Fn(&dyn VfsFile)) -> Duration {
        let start = Instant::now();
        for _ in 0..iters {
            if self.offset + RECORD.len() as u64 > WRAP_BYTES {
                self.file.set_len(0).unwrap();
                self.vfs.clear_trace();
                self.offset = 0;
            }
            // Errors only come from injected faults, which the variant with
            // faults on asks for.
            let _ = self.file.write_at(black_box(&RECORD), self.offset);
            after_write(&*self.file);
            self.offset += RECORD.len() as u64;
        }
        start.elapsed()
    }
}

fn small_writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("write_at_100B");
    // One disk per variant, kept across samples: after the first wrap the
    // file's memory is already there, so this is the steady state.
    let variants = [
        ("append", false, FaultConfig::none()),
        ("append_traced", true, FaultConfig::none()),
        ("append_all_faults", false, FaultConfig::all()),
    ];
    for (name, recording, faults) in variants {
        let mut appender = Appender::new(faults, recording);
        group.bench_function(name, |bencher| {
            bencher.iter_custom(|iters| appender.run(iters, |_| {}));
        });
    }
    // A fresh disk per sample: includes growing the file's memory (page
    // faults), as a simulation that keeps making new segments pays.
    group.bench_function("append_growing_file", |bencher| {
        bencher.iter_custom(|iters| Appender::new(FaultConfig::none(), false).run(iters, |_| {}));
    });
    let mut appender = Appender::new(FaultConfig::none(), false);
    group.bench_function("append_then_sync_data", |bencher| {
        bencher.iter_custom(|iters| appender.run(iters, |file| file.sync_data().unwrap()));
    });
    group.finish();
}

/// A disk of `disk_mib` durable files of 1 MiB each.
fn disk_of(disk_mib: u64) -> (SimVfs, Vec<PathBuf>) {
    let vfs = SimVfs::with_faults(1, FaultConfig::only(&[FaultKind::LostUnsyncedPages]));
    vfs.set_trace_recording(false);
    let content = vec![7u8; 1 << 20];
    let paths: Vec<PathBuf> = (0..disk_mib)
        .map(|index| PathBuf::from(format!("/d/{index:020}.log")))
        .collect();
    for path in &paths {
        vfs.put_durable_file(path, &content);
    }
    (vfs, paths)
}

/// Times crashes, each after dirtying `unsynced_pages` pages spread over the
/// files (a few bytes per page).
fn crashes(vfs: &SimVfs, paths: &[PathBuf], unsynced_pages: u64, iters: u64) -> Duration {
    let pages_per_file = (1 << 20) / PAGE_BYTES;
    assert!(unsynced_pages <= pages_per_file * paths.len() as u64);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let files_touched = unsynced_pages.div_ceil(pages_per_file) as usize;
        let handles: Vec<Box<dyn VfsFile>> = paths[..files_touched]
            .iter()
            .map(|path| vfs.open(path, OpenMode::ReadWrite).unwrap())
            .collect();
        for page in 0..unsynced_pages {
            let file = &handles[(page / pages_per_file) as usize];
            file.write_at(b"dirty", (page % pages_per_file) * PAGE_BYTES + 9)
                .unwrap();
        }
        let start = Instant::now();
        vfs.crash();
        total += start.elapsed();
    }
    total
}

fn crash_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("crash");
    let (vfs, paths) = disk_of(64);
    for unsynced_pages in [1, 16, 256, 4096] {
        let id = BenchmarkId::new("disk_64MiB/unsynced_pages", unsynced_pages);
        group.bench_function(id, |bencher| {
            bencher.iter_custom(|iters| crashes(&vfs, &paths, unsynced_pages, iters));
        });
    }
    drop((vfs, paths));
    for disk_mib in [1, 64, 1024] {
        let (vfs, paths) = disk_of(disk_mib);
        let id = BenchmarkId::new("unsynced_pages_16/disk_MiB", disk_mib);
        group.bench_function(id, |bencher| {
            bencher.iter_custom(|iters| crashes(&vfs, &paths, 16, iters));
        });
    }
    group.finish();
}

criterion_group!(benches, small_writes, crash_cost);
criterion_main!(benches);

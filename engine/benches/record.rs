//! Record encode and parse throughput (SPEC 2.1), and CRC-32C alone.
//!
//! `append_record` writes into one reused buffer, as the log's writer does;
//! `parse_record` includes the CRC check, as recovery and reads do. Targets
//! on the reference machine: parse of a 1 KiB record <= 100 ns, CRC-32C
//! >= 8 GB/s at 64 KiB.
//!
//! Run: `cargo bench -p durlog --bench record -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use durlog::{HEADER_SIZE, append_record, crc32c, parse_record};

/// Payload sizes: a tiny event, a typical one, a page-sized one, a large one.
const PAYLOAD_SIZES: [usize; 4] = [16, 100, 1024, 64 * 1024];

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

fn label(len: usize) -> String {
    if len >= 1024 {
        format!("{} KiB", len / 1024)
    } else {
        format!("{len} B")
    }
}

fn bench_append_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_record");
    for len in PAYLOAD_SIZES {
        let payload = payload(len);
        let mut buffer = Vec::with_capacity(HEADER_SIZE + len);
        group.throughput(Throughput::Bytes((HEADER_SIZE + len) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label(len)), &payload, |b, p| {
            b.iter(|| {
                buffer.clear();
                append_record(&mut buffer, black_box(42), black_box(p));
                black_box(buffer.len())
            })
        });
    }
    group.finish();
}

fn bench_parse_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_record");
    for len in PAYLOAD_SIZES {
        let mut record = Vec::new();
        append_record(&mut record, 42, &payload(len));
        group.throughput(Throughput::Bytes(record.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label(len)), &record, |b, r| {
            b.iter(|| {
                let parsed = parse_record(black_box(r)).expect("a valid record");
                black_box(parsed.len)
            })
        });
    }
    group.finish();
}

fn bench_crc32c(c: &mut Criterion) {
    let mut group = c.benchmark_group("crc32c");
    let bytes = payload(64 * 1024);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("64 KiB", |b| b.iter(|| crc32c(black_box(&bytes))));
    group.finish();
}

criterion_group!(
    benches,
    bench_append_record,
    bench_parse_record,
    bench_crc32c
);
criterion_main!(benches);

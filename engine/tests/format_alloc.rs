//! `append_record` into a buffer with room allocates nothing, and
//! `parse_record` never does: the write path reuses one buffer per append
//! and recovery parses at scan speed. A steady `Log::append` allocates
//! nothing of its own either: its payload buffer, its group's vectors and
//! its wake-up list are all reused.
//!
//! Allocations are counted by `allocation-counter`, whose global allocator
//! counts per thread, so the test harness's own allocations on other
//! threads do not disturb the counts (and this crate needs no `unsafe`).

use durlog::{HEADER_SIZE, append_record, parse_record};

/// Allocations this thread makes while running `f`.
fn allocations_during(f: impl FnOnce()) -> u64 {
    allocation_counter::measure(f).count_total
}

#[test]
fn the_counter_sees_allocations() {
    // Without this, a counter that never counts would pass every test here.
    let counted = allocations_during(|| {
        let mut buffer = std::hint::black_box(Vec::<u8>::with_capacity(8));
        buffer.extend_from_slice(&[0; 64]);
        std::hint::black_box(buffer);
    });
    assert_eq!(counted, 2, "one alloc and one realloc");
}

#[test]
fn append_record_into_a_reused_buffer_allocates_nothing() {
    let payloads: Vec<Vec<u8>> = [0, 1, 16, 100, 1024, 64 * 1024]
        .into_iter()
        .map(|len| vec![0xA5; len])
        .collect();
    let mut buffer = Vec::with_capacity(HEADER_SIZE + 64 * 1024);
    let capacity = buffer.capacity();
    let counted = allocations_during(|| {
        for round in 0..100_u64 {
            for payload in &payloads {
                buffer.clear();
                append_record(&mut buffer, round + 1, payload);
                std::hint::black_box(&buffer);
            }
        }
    });
    assert_eq!(
        counted, 0,
        "append_record allocated into a buffer with room"
    );
    assert_eq!(buffer.capacity(), capacity);
    // Appending several records back to back into room already there
    // allocates nothing either (a group commit's buffer).
    buffer.clear();
    let counted = allocations_during(|| {
        for seq in 1..=3 {
            append_record(&mut buffer, seq, &payloads[4]);
        }
    });
    assert_eq!(counted, 0);
}

#[test]
fn parse_record_allocates_nothing() {
    let mut record = Vec::new();
    append_record(&mut record, 7, &[1; 1000]);
    let counted = allocations_during(|| {
        for cut in [record.len(), record.len() - 1, 3] {
            let _ = std::hint::black_box(parse_record(&record[..cut]));
        }
    });
    assert_eq!(counted, 0);
}

#[test]
fn a_steady_append_allocates_nothing_of_its_own() {
    use durlog::vfs::SimVfs;
    use durlog::{Event, Expected, Log, Options};

    let log = Log::open_with_vfs(SimVfs::new(1), "/log", Options::default()).expect("open");
    let streams = ["a", "b", "c", "d"];
    let batches = [
        vec![Event::new("t", vec![0xA5; 100])],
        vec![Event::new("u", vec![1; 10]), Event::new("v", vec![2; 3000])],
    ];
    let mut append = |i: usize| {
        log.append(streams[i % 4], Expected::Any, &batches[i % 2])
            .expect("append");
    };
    // Warm-up: the streams' index entries, the reused buffers, the disk's
    // pages. After it, only amortised growth may allocate (the index's
    // per-stream vectors double, the simulated file gains pages).
    (0..2_000).for_each(&mut append);
    let appends = 1_000;
    let counted = allocations_during(|| (0..appends).for_each(&mut append));
    assert!(
        counted <= appends as u64 / 100,
        "{counted} allocations in {appends} appends"
    );
}

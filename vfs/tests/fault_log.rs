//! `SimVfs`'s fault log: every injected fault, with the bytes it touched.
//! A simulator's oracle excuses a failed read, a lost record or a refusal
//! only by an event here, so the log must agree with `fault_counts` and
//! `damage` exactly and say precisely which bytes each fault touched.
//! Every randomized test prints the seed that failed.

mod common;

use common::{for_each_seed, open};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use durlog_vfs::{
    Damage, FaultConfig, FaultEvent, FaultKind, OpenMode, PAGE_BYTES, SimVfs, Vfs, VfsFile,
};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn only(kind: FaultKind, weight: f64) -> FaultConfig {
    FaultConfig::none().with(kind, weight)
}

fn events_of(vfs: &SimVfs, kind: FaultKind) -> Vec<FaultEvent> {
    let events = vfs.fault_log();
    events
        .into_iter()
        .filter(|event| event.kind == kind)
        .collect()
}

/// Every fault on, those drawn per operation at rates high enough that a
/// few hundred operations meet each of them.
fn busy_faults(rng: &mut ChaCha8Rng) -> FaultConfig {
    if rng.random_range(0..2u32) == 0 {
        return FaultConfig::swarm(rng);
    }
    FaultConfig::all()
        .with(FaultKind::BitFlipOnRead, 0.05)
        .with(FaultKind::FailedFsync, 0.1)
        .with(FaultKind::ShortWrite, 0.05)
        .with(FaultKind::NoSpace, 0.05)
        .with(FaultKind::MisdirectedWrite, 0.05)
        .with(FaultKind::ReadError, 0.05)
        .with(FaultKind::DuplicatedWrite, 0.5)
}

/// One random operation on files `/d/0` to `/d/3`. Errors are expected
/// (injected faults, missing files, a halted disk) and ignored: only the
/// log is under test here.
fn random_step(vfs: &SimVfs, rng: &mut ChaCha8Rng, handles: &mut [Option<Box<dyn VfsFile>>]) {
    let slot = rng.random_range(0..handles.len());
    let name = PathBuf::from(format!("/d/{slot}"));
    let offset = rng.random_range(0..3 * PAGE_BYTES);
    let mut bytes = vec![0u8; rng.random_range(0..2 * PAGE_BYTES) as usize];
    let choice = rng.random_range(0..16u32);
    if let (2..=9, Some(file)) = (choice, handles[slot].as_deref()) {
        let _ = match choice {
            2..=5 => {
                rng.fill_bytes(&mut bytes);
                file.write_at(&bytes, offset)
            }
            6 | 7 => file.read_at(&mut bytes, offset).map(drop),
            8 => file.set_len(offset),
            _ => file.sync_data(),
        };
    }
    match choice {
        0 => handles[slot] = vfs.open(&name, OpenMode::CreateNew).ok(),
        1 => handles[slot] = vfs.open(&name, OpenMode::ReadWrite).ok(),
        10 => drop(vfs.sync_dir(Path::new("/d"))),
        11 => drop(vfs.remove_file(&name)),
        12 => drop(vfs.rename(&name, Path::new(&format!("/d/{}", (slot + 1) % 4)))),
        13 => drop(vfs.lock_file(&name)),
        14 => vfs.crash_after_ops(rng.random_range(1..4)),
        15 => {
            vfs.crash();
            if rng.random_range(0..2u32) == 0 {
                vfs.flip_random_bit_at_rest();
            }
        }
        _ => {}
    }
    if vfs.is_halted() {
        vfs.reboot();
    }
}

/// What the log must agree with: its positions, its order in time, its
/// tally against `fault_counts`, its damage kinds against `damage`, and a
/// mark taken mid-run against its tail.
fn check_log(vfs: &SimVfs, mark: usize, tail_at_mark: &[FaultEvent]) {
    let log = vfs.fault_log();
    assert_eq!(log.len(), vfs.fault_log_len());
    let mut tally: BTreeMap<FaultKind, u64> = BTreeMap::new();
    for (position, event) in log.iter().enumerate() {
        assert_eq!(event.index, position as u64);
        *tally.entry(event.kind).or_insert(0) += 1;
        assert_eq!(
            event.path.as_os_str().is_empty(),
            event.kind == FaultKind::Crash
        );
    }
    assert!(log.windows(2).all(|pair| pair[0].op <= pair[1].op));
    assert!(log.last().is_none_or(|event| event.op <= vfs.op_count()));
    assert_eq!(tally, vfs.fault_counts());
    let damage: Vec<Damage> = log
        .iter()
        .filter(|event| event.kind.damages_durable_data())
        .map(damage_of)
        .collect();
    assert_eq!(damage, vfs.damage());
    assert_eq!(
        vfs.fault_log_since(mark)[..tail_at_mark.len()],
        *tail_at_mark
    );
    assert_eq!(vfs.fault_log_since(mark), log[mark..]);
}

fn damage_of(event: &FaultEvent) -> Damage {
    Damage {
        path: event.path.clone(),
        offset: event.offset,
        len: event.len,
        intended_offset: event.intended_offset,
        bit: event.bit,
        kind: event.kind,
    }
}

#[test]
fn fault_log_agrees_with_fault_counts_and_damage_over_random_operations() {
    let mut seen = BTreeSet::new();
    for_each_seed(0..300, |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vfs = SimVfs::with_faults(seed, busy_faults(&mut rng));
        vfs.create_dir_all(Path::new("/d")).unwrap();
        let mut handles: Vec<Option<Box<dyn VfsFile>>> = (0..4).map(|_| None).collect();
        for _ in 0..150 {
            random_step(&vfs, &mut rng, &mut handles);
        }
        let mark = vfs.fault_log_len();
        let tail_at_mark = vfs.fault_log_since(mark);
        assert!(tail_at_mark.is_empty());
        for _ in 0..150 {
            random_step(&vfs, &mut rng, &mut handles);
        }
        let tail_at_mark = vfs.fault_log_since(mark);
        check_log(&vfs, mark, &tail_at_mark);
        seen.extend(vfs.fault_counts().into_keys());
    });
    let missing: Vec<&FaultKind> = FaultKind::ALL
        .iter()
        .filter(|k| !seen.contains(k))
        .collect();
    assert!(missing.is_empty(), "no seed injected {missing:?}");
}

#[test]
fn read_flip_event_names_the_file_the_flipped_byte_and_the_bit() {
    let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
    for_each_seed(0..32, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::BitFlipOnRead, 1.0));
        vfs.put_durable_file(Path::new("/d/f"), &data);
        let file = open(&vfs, "/d/f", OpenMode::ReadOnly);
        let mark = vfs.fault_log_len();
        let mut buf = vec![0u8; 2000];
        assert_eq!(file.read_at(&mut buf, 100).unwrap(), 900);
        let flipped: Vec<(usize, u8)> = buf[..900]
            .iter()
            .zip(&data[100..])
            .enumerate()
            .filter(|(_, (got, want))| got != want)
            .map(|(index, (got, want))| (index, got ^ want))
            .collect();
        let [(index, mask)] = flipped[..] else {
            panic!("one byte flipped, saw {flipped:?}");
        };
        let events = vfs.fault_log_since(mark);
        assert_eq!(events.len(), 1, "{events:?}");
        let event = &events[0];
        assert_eq!(event.kind, FaultKind::BitFlipOnRead);
        assert_eq!(event.path, Path::new("/d/f"));
        assert_eq!((event.offset, event.len), (100 + index as u64, 1));
        assert_eq!(event.bit.map(|bit| 1u8 << bit), Some(mask));
        assert_eq!(event.read, Some((100, 900)));
        assert_eq!(event.op, vfs.op_count(), "a read is not counted");
        assert!((100..1000).contains(&event.offset));
        // The file is named as it is named now.
        vfs.rename(Path::new("/d/f"), Path::new("/d/g")).unwrap();
        assert_eq!(vfs.fault_log_since(mark)[0].path, Path::new("/d/g"));
    });
}

#[test]
fn misdirected_write_and_flip_at_rest_events_match_their_damage_records() {
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::MisdirectedWrite, 1.0));
        vfs.put_durable_file(Path::new("/d/f"), &[0xee; 8 * 512]);
        let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
        for sector in 0..8u8 {
            file.write_at(&[sector; 512], u64::from(sector) * 512)
                .unwrap();
        }
        vfs.flip_bit_at_rest(Path::new("/d/f"), 8 * 100 + 5)
            .unwrap();
        vfs.rename(Path::new("/d/f"), Path::new("/d/g")).unwrap();
        let misdirected = events_of(&vfs, FaultKind::MisdirectedWrite);
        let flipped = events_of(&vfs, FaultKind::BitFlipAtRest);
        let damage = vfs.damage();
        assert_eq!(damage.len(), 2, "{damage:?}");
        assert_eq!(misdirected.len(), 1);
        assert_eq!(damage_of(&misdirected[0]), damage[0]);
        assert_eq!(damage_of(&flipped[0]), damage[1]);
        let event = &misdirected[0];
        assert_eq!(event.path, Path::new("/d/g"));
        assert_eq!((event.intended_offset, event.len), (Some(0), 512));
        assert_eq!(event.op, 1, "the first write was misdirected");
        assert_eq!((flipped[0].offset, flipped[0].bit), (100, Some(5)));
    });
}

#[test]
fn failed_fsync_event_says_which_pages_it_dropped() {
    let mut outcomes = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, only(FaultKind::FailedFsync, 1.0));
        vfs.put_durable_file(Path::new("/d/f"), &[0; 5 * 4096]);
        let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
        file.write_at(&[1; 10], 4096 + 5).unwrap();
        file.write_at(&[1; 10], 3 * 4096).unwrap();
        let error = file.sync_data().unwrap_err().to_string();
        let event = &events_of(&vfs, FaultKind::FailedFsync)[0];
        assert_eq!(event.path, Path::new("/d/f"));
        let range = (event.offset, event.len);
        if error.contains(" 0 dirty pages dropped") {
            assert_eq!(range, (0, 0));
        } else {
            // Pages 1 and 3: the span from the first to the end of the last.
            assert_eq!(range, (4096, 3 * 4096), "{error}");
        }
        outcomes.insert(range);
        assert!(vfs.sync_dir(Path::new("/d")).is_err());
        let on_dir = &events_of(&vfs, FaultKind::FailedFsync)[1];
        assert_eq!(
            (on_dir.path.as_path(), on_dir.offset, on_dir.len),
            (Path::new("/d"), 0, 0)
        );
    });
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

fn summary(events: &[FaultEvent]) -> Vec<(FaultKind, &Path, u64, u64)> {
    events
        .iter()
        .map(|event| (event.kind, event.path.as_path(), event.offset, event.len))
        .collect()
}

#[test]
fn crash_events_give_the_bytes_and_names_the_crash_decided() {
    let kept = [
        FaultKind::LostUnsyncedPages,
        FaultKind::UnsyncedSizeChange,
        FaultKind::LostDirEntry,
    ];
    let mut faults = FaultConfig::none();
    for kind in kept {
        faults.set(kind, 1.0);
    }
    let vfs = SimVfs::with_faults(0, faults);
    vfs.put_durable_file(Path::new("/d/grown"), &[7; 100]);
    vfs.put_durable_file(Path::new("/d/cut"), &[7; 10_000]);
    open(&vfs, "/d/grown", OpenMode::ReadWrite)
        .write_at(&[8; 10_000], 100)
        .unwrap();
    open(&vfs, "/d/cut", OpenMode::ReadWrite)
        .set_len(100)
        .unwrap();
    open(&vfs, "/d/new", OpenMode::CreateNew);
    vfs.remove_file(Path::new("/d/cut")).unwrap();
    let (op, mark) = (vfs.op_count(), vfs.fault_log_len());
    vfs.crash();
    let events = vfs.fault_log_since(mark);
    use FaultKind::*;
    let (cut, grown, new, none) = (
        Path::new("/d/cut"),
        Path::new("/d/grown"),
        Path::new("/d/new"),
        Path::new(""),
    );
    assert_eq!(
        summary(&events),
        [
            (Crash, none, 0, 0),
            // Directory entries first, in name order: a removal kept (0), a
            // create kept (1).
            (LostDirEntry, cut, 0, 0),
            (LostDirEntry, new, 0, 1),
            // Then files in creation order: each size change as the bytes
            // between its two sizes, then each surviving page below the
            // new size.
            (UnsyncedSizeChange, grown, 100, 10_000),
            (LostUnsyncedPages, grown, 0, 4096),
            (LostUnsyncedPages, grown, 4096, 4096),
            (LostUnsyncedPages, grown, 8192, 10_100 - 8192),
            (UnsyncedSizeChange, cut, 100, 9_900),
        ]
    );
    assert!(events.iter().all(|event| event.op == op));
}

#[test]
fn write_fault_events_give_the_bytes_written() {
    for_each_seed(0..32, |seed| {
        for kind in [FaultKind::ShortWrite, FaultKind::NoSpace] {
            let vfs = SimVfs::with_faults(seed, only(kind, 1.0));
            vfs.put_durable_file(Path::new("/f"), &[]);
            let file = open(&vfs, "/f", OpenMode::ReadWrite);
            assert!(file.write_at(&[1; 1000], 0).is_err());
            let written = file.len().unwrap();
            let event = &events_of(&vfs, kind)[0];
            assert_eq!((event.offset, event.len), (0, written), "{kind}");
        }
        let vfs = SimVfs::with_faults(seed, only(FaultKind::TornWrite, 1.0));
        vfs.put_durable_file(Path::new("/f"), &[]);
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        file.write_at(&[1; 100], 0).unwrap();
        vfs.crash_after_ops(1);
        assert!(file.write_at(&[2; 3000], 100).is_err());
        let event = &events_of(&vfs, FaultKind::TornWrite)[0];
        assert_eq!(event.offset, 100);
        assert!(event.len <= 3000, "{event:?}");
        assert_eq!(event.op, 2, "the write the crash cut");
    });
}

#[test]
#[should_panic(expected = "past the end of the log")]
fn a_mark_past_the_end_of_the_log_is_a_bug() {
    let vfs = SimVfs::new(0);
    vfs.crash();
    vfs.fault_log_since(2);
}

/// A misdirected write never lands where it was meant to when the file has
/// another sector-aligned place for it: drawn at its own offset, it moves
/// to the next slot. Small files make that draw frequent.
#[test]
fn a_misdirected_write_lands_elsewhere_whenever_it_can() {
    for sectors in 2..=6u64 {
        for intended in 0..sectors {
            for_each_seed(0..32, |seed| {
                let vfs = SimVfs::with_faults(seed, only(FaultKind::MisdirectedWrite, 1.0));
                let size = sectors * 512;
                vfs.put_durable_file(Path::new("/d/f"), &vec![0xee; size as usize]);
                let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
                file.write_at(&[7; 512], intended * 512).unwrap();
                let event = &events_of(&vfs, FaultKind::MisdirectedWrite)[0];
                assert_eq!(event.intended_offset, Some(intended * 512));
                assert!(
                    event.offset != intended * 512
                        && event.offset.is_multiple_of(512)
                        && event.offset + 512 <= size,
                    "{sectors} sectors, meant for sector {intended}: landed at {}",
                    event.offset
                );
                let mut read = vec![0; 512];
                file.read_at(&mut read, intended * 512).unwrap();
                assert_eq!(read, vec![0xee; 512], "the intended sector is untouched");
            });
        }
    }
}

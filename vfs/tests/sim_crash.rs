//! Properties of `SimVfs`'s crash model: what a power loss may leave, and
//! only that. Every randomized test prints the seed that failed.

mod common;

use common::{for_each_seed, open};
use std::collections::BTreeSet;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;

use durlog_vfs::{
    FaultConfig, FaultKind, OpenMode, PAGE_BYTES, SimVfs, TraceKind, Vfs, VfsFile, injected_fault,
};
use proptest::prelude::*;

const PAGE: usize = PAGE_BYTES as usize;

/// With only LostUnsyncedPages on, k overwritten pages come back as every
/// one of the 2^k combinations of old and new pages, and never as anything
/// else (no mixed page, no size change, untouched bytes intact).
#[test]
fn unsynced_pages_reach_every_subset_and_nothing_else() {
    for pages in 1..=4usize {
        let old = vec![b'o'; pages * PAGE];
        let mut new = old.clone();
        for page in 0..pages {
            // Touch a part of each page only: the rest must hold either way.
            new[page * PAGE + 1000..page * PAGE + 1100].fill(b'A' + page as u8);
        }
        let mut seen = BTreeSet::new();
        for_each_seed(0..(64u64 << pages), |seed| {
            let faults = FaultConfig::none().with(FaultKind::LostUnsyncedPages, 0.5);
            let vfs = SimVfs::with_faults(seed, faults);
            vfs.put_durable_file(Path::new("/d/f"), &old);
            let file = open(&vfs, "/d/f", OpenMode::ReadWrite);
            // Dirty the pages in a scrambled order: order must not matter.
            for page in (0..pages).rev() {
                let start = page * PAGE + 1000;
                file.write_at(&new[start..start + 100], start as u64)
                    .unwrap();
            }
            vfs.crash();
            let after = vfs.file_contents(Path::new("/d/f")).unwrap();
            assert_eq!(after.len(), old.len(), "size changed");
            let mut subset = 0u32;
            for page in 0..pages {
                let range = page * PAGE..(page + 1) * PAGE;
                if after[range.clone()] == new[range.clone()] {
                    subset |= 1 << page;
                } else {
                    assert!(
                        after[range.clone()] == old[range],
                        "page {page} is neither old nor new"
                    );
                }
            }
            assert_eq!(vfs.durable_contents(Path::new("/d/f")).unwrap(), after);
            seen.insert(subset);
        });
        assert_eq!(
            seen.len(),
            1 << pages,
            "{pages} pages: subsets seen {seen:?}"
        );
    }
}

/// An unsynced append that grows the file: the size is either the old or
/// the new one, and each appended page is either there or zeros.
#[test]
fn unsynced_append_leaves_old_size_or_new_size_with_any_pages() {
    let old = vec![b'o'; PAGE];
    let mut seen = BTreeSet::new();
    for_each_seed(0..400, |seed| {
        let faults = FaultConfig::none()
            .with(FaultKind::LostUnsyncedPages, 0.5)
            .with(FaultKind::UnsyncedSizeChange, 0.5);
        let vfs = SimVfs::with_faults(seed, faults);
        vfs.put_durable_file(Path::new("/f"), &old);
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        file.write_at(&[b'A'; PAGE], PAGE as u64).unwrap();
        file.write_at(&[b'B'; PAGE], 2 * PAGE as u64).unwrap();
        vfs.crash();
        let after = vfs.file_contents(Path::new("/f")).unwrap();
        assert_eq!(after[..PAGE], old[..], "the durable page changed");
        let state = match after.len() {
            len if len == PAGE => "old size".to_string(),
            len if len == 3 * PAGE => {
                let page_state = |page: usize, byte: u8| {
                    let bytes = &after[page * PAGE..(page + 1) * PAGE];
                    if bytes.iter().all(|&b| b == byte) {
                        "data"
                    } else {
                        assert!(bytes.iter().all(|&b| b == 0), "page {page} mixed");
                        "zeros"
                    }
                };
                format!("{} {}", page_state(1, b'A'), page_state(2, b'B'))
            }
            len => panic!("impossible size {len}"),
        };
        seen.insert(state);
    });
    let expected: BTreeSet<String> = [
        "old size",
        "data data",
        "data zeros",
        "zeros data",
        "zeros zeros",
    ]
    .map(String::from)
    .into();
    assert_eq!(seen, expected);
}

/// An unsynced truncate is undone (old bytes back) or kept, nothing else;
/// with the fault off it is always undone.
#[test]
fn unsynced_truncate_is_kept_or_undone() {
    let old: Vec<u8> = (0..3 * PAGE).map(|i| (i % 251) as u8).collect();
    let mut seen = BTreeSet::new();
    for weight in [0.0, 0.5] {
        for_each_seed(0..64, |seed| {
            let faults = FaultConfig::none().with(FaultKind::UnsyncedSizeChange, weight);
            let vfs = SimVfs::with_faults(seed, faults);
            vfs.put_durable_file(Path::new("/f"), &old);
            let file = open(&vfs, "/f", OpenMode::ReadWrite);
            file.set_len(5000).unwrap();
            file.set_len(6000).unwrap(); // zeros where old bytes were
            vfs.crash();
            let after = vfs.file_contents(Path::new("/f")).unwrap();
            if after == old {
                seen.insert((weight.to_string(), "undone"));
            } else {
                assert!(weight > 0.0, "size change survived with the fault off");
                assert_eq!(after.len(), 6000);
                assert_eq!(after[..5000], old[..5000]);
                // Each page past the cut holds the zeros or the old bytes.
                assert!(
                    after[5000..] == [0; 1000][..] || after[5000..] == old[5000..6000],
                    "bytes past the truncation are neither zeros nor the old ones"
                );
                seen.insert((weight.to_string(), "kept"));
            }
        });
    }
    let expected: BTreeSet<(String, &str)> = [("0", "undone"), ("0.5", "undone"), ("0.5", "kept")]
        .map(|(weight, outcome)| (weight.to_string(), outcome))
        .into();
    assert_eq!(seen, expected);
}

// ----- synced data survives every crash under every fault config -----

/// A file the workload created durably (entry synced), with what it last
/// synced successfully and which bytes were touched since.
struct Tracked {
    path: String,
    handle: Box<dyn VfsFile>,
    synced: Vec<u8>,
    touched: Vec<bool>,
    size_changed: bool,
    /// A sync failed since the last good one: later syncs may lie.
    poisoned: bool,
}

impl Tracked {
    fn touch(&mut self, start: u64, end: u64) {
        let (start, end) = (start as usize, end as usize);
        if self.touched.len() < end {
            self.touched.resize(end, false);
        }
        self.touched[start..end].fill(true);
    }
}

/// A tiny deterministic generator for the workload (separate from the
/// disk's own RNG).
struct Draw(u64);

impl Draw {
    fn below(&mut self, bound: u64) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }
}

/// Checks every tracked file against what it last synced, then takes the
/// post-crash state as the new baseline.
fn verify_after_crash(vfs: &SimVfs, files: &mut [Tracked]) {
    for file in files.iter_mut() {
        let after = vfs
            .file_contents(Path::new(&file.path))
            .unwrap_or_else(|| panic!("{} vanished although its entry was synced", file.path));
        if !file.size_changed {
            assert_eq!(
                after.len(),
                file.synced.len(),
                "{}: size changed",
                file.path
            );
        }
        for (offset, (&now, &was)) in after.iter().zip(&file.synced).enumerate() {
            let touched = file.touched.get(offset).copied().unwrap_or(false);
            assert!(
                touched || now == was,
                "{}: synced byte at offset {offset} changed from {was} to {now}",
                file.path
            );
        }
        file.synced = after;
        file.touched.clear();
        file.size_changed = false;
        file.poisoned = false;
        file.handle = open(vfs, &file.path, OpenMode::ReadWrite);
    }
}

/// A random workload of creates, writes, truncates, syncs, reads, crashes
/// and armed crashes on a few small files, checking after every crash that
/// synced bytes survived. Returns the disk for further inspection.
fn synced_data_workload(seed: u64, faults: FaultConfig, steps: usize) -> SimVfs {
    let vfs = SimVfs::with_faults(seed, faults);
    let mut draw = Draw(seed ^ 0x5eed);
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let mut files: Vec<Tracked> = Vec::new();
    let mut created = 0;
    for _ in 0..steps {
        if vfs.is_halted() {
            vfs.reboot();
            verify_after_crash(&vfs, &mut files);
            continue;
        }
        match draw.below(100) {
            0..6 if files.len() < 3 => {
                let path = format!("/d/f{created}");
                created += 1;
                let Ok(handle) = vfs.open(Path::new(&path), OpenMode::CreateNew) else {
                    continue; // the armed crash fired
                };
                // Retry the directory sync until it holds (a failed one
                // makes nothing durable and changes nothing).
                let durable = (0..100).any(|_| vfs.sync_dir(Path::new("/d")).is_ok());
                if durable {
                    files.push(Tracked {
                        path,
                        handle,
                        synced: Vec::new(),
                        touched: Vec::new(),
                        size_changed: false,
                        poisoned: false,
                    });
                }
            }
            0..50 if !files.is_empty() => {
                let index = draw.below(files.len() as u64) as usize;
                let file = &mut files[index];
                let size = file.handle.len().unwrap();
                let offset = draw.below(size + 300).min(3 * PAGE_BYTES);
                let len = 1 + draw.below(700);
                let byte = draw.below(256) as u8;
                file.touch(offset, offset + len);
                if offset + len > size {
                    file.size_changed = true;
                }
                let damage_before = vfs.damage().len();
                let _ = file.handle.write_at(&vec![byte; len as usize], offset);
                // A misdirected write lands elsewhere: that range is damage
                // the test is told about, not a broken promise.
                for damage in &vfs.damage()[damage_before..] {
                    file.touch(damage.offset, damage.offset + damage.len);
                }
            }
            50..58 if !files.is_empty() => {
                let index = draw.below(files.len() as u64) as usize;
                let file = &mut files[index];
                let size = file.handle.len().unwrap();
                let new_len = draw.below(3 * PAGE_BYTES);
                let lowest = new_len.min(size);
                let highest = size.max(new_len).max(file.synced.len() as u64);
                file.touch(lowest, highest);
                file.size_changed = true;
                let _ = file.handle.set_len(new_len);
            }
            58..80 if !files.is_empty() => {
                let index = draw.below(files.len() as u64) as usize;
                let file = &mut files[index];
                let result = if draw.below(2) == 0 {
                    file.handle.sync_data()
                } else {
                    file.handle.sync_all()
                };
                match result {
                    Ok(()) if !file.poisoned => {
                        file.synced = vfs.file_contents(Path::new(&file.path)).unwrap();
                        file.touched.clear();
                        file.size_changed = false;
                    }
                    Ok(()) => {}
                    Err(error) => {
                        if injected_fault(&error) == Some(FaultKind::FailedFsync) {
                            file.poisoned = true;
                        }
                    }
                }
            }
            80..88 if !files.is_empty() => {
                let index = draw.below(files.len() as u64) as usize;
                let mut buf = vec![0u8; 1 + draw.below(5000) as usize];
                let _ = files[index].handle.read_at(&mut buf, draw.below(10_000));
            }
            88..94 => {
                vfs.crash();
                verify_after_crash(&vfs, &mut files);
            }
            94..100 => vfs.crash_after_ops(1 + draw.below(10)),
            _ => {}
        }
    }
    vfs.crash();
    verify_after_crash(&vfs, &mut files);
    vfs
}

fn every_fault_config() -> Vec<FaultConfig> {
    let mut configs = vec![FaultConfig::none(), FaultConfig::all()];
    configs.extend(
        FaultKind::STANDARD
            .iter()
            .map(|&kind| FaultConfig::only(&[kind])),
    );
    configs.extend(
        FaultKind::STANDARD
            .iter()
            .map(|&kind| FaultConfig::only(&[kind]).with(kind, 1.0)),
    );
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(7);
    configs.extend((0..30).map(|_| FaultConfig::swarm(&mut rng)));
    configs
}

#[test]
fn synced_data_survives_every_crash_under_every_fault_config() {
    for faults in every_fault_config() {
        for_each_seed(0..12, |seed| {
            let result = catch_unwind(AssertUnwindSafe(|| {
                synced_data_workload(seed, faults.clone(), 250);
            }));
            if let Err(panic) = result {
                eprintln!("faults: {faults}");
                resume_unwind(panic);
            }
        });
    }
}

// ----- with every fault off: exactly the durable state, checked against a model -----

#[derive(Clone, Debug)]
enum Op {
    Create(u8),
    Write {
        file: u8,
        offset: u16,
        len: u16,
        byte: u8,
    },
    SetLen {
        file: u8,
        len: u16,
    },
    Sync(u8),
    SyncDir,
    Remove(u8),
    Rename(u8, u8),
    Crash,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..4u8).prop_map(Op::Create),
        6 => (0..4u8, 0..10_000u16, 1..3_000u16, any::<u8>())
            .prop_map(|(file, offset, len, byte)| Op::Write { file, offset, len, byte }),
        1 => (0..4u8, 0..12_000u16).prop_map(|(file, len)| Op::SetLen { file, len }),
        3 => (0..4u8).prop_map(Op::Sync),
        2 => Just(Op::SyncDir),
        1 => (0..4u8).prop_map(Op::Remove),
        1 => (0..4u8, 0..4u8).prop_map(|(from, to)| Op::Rename(from, to)),
        2 => Just(Op::Crash),
    ]
}

/// The reference: files (inodes) with cached and durable bytes, and the
/// visible and durable directory entries.
#[derive(Default)]
struct Model {
    inodes: Vec<(Vec<u8>, Vec<u8>)>,
    visible: std::collections::BTreeMap<u8, usize>,
    durable: std::collections::BTreeMap<u8, usize>,
}

fn name(file: u8) -> String {
    format!("/d/{file}")
}

fn check_against_model(vfs: &SimVfs, model: &Model) {
    let files: Vec<String> = vfs
        .files()
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    let expected: Vec<String> = model.visible.keys().map(|&file| name(file)).collect();
    assert_eq!(files, expected);
    for (&file, &inode) in &model.visible {
        let cached = vfs.file_contents(Path::new(&name(file))).unwrap();
        assert!(cached == model.inodes[inode].0, "cache of {}", name(file));
    }
    for file in 0..4u8 {
        let durable = vfs.durable_contents(Path::new(&name(file)));
        let expected = model
            .durable
            .get(&file)
            .map(|&inode| &model.inodes[inode].1);
        assert!(durable.as_ref() == expected, "durable {}", name(file));
    }
}

fn run_model(ops: &[Op]) {
    let vfs = SimVfs::new(0);
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let mut model = Model::default();
    let mut handles: std::collections::BTreeMap<u8, Box<dyn VfsFile>> = Default::default();
    for op in ops {
        match *op {
            Op::Create(file) => {
                let result = vfs.open(Path::new(&name(file)), OpenMode::CreateNew);
                if model.visible.contains_key(&file) {
                    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
                } else {
                    handles.insert(file, result.unwrap());
                    model.inodes.push(Default::default());
                    model.visible.insert(file, model.inodes.len() - 1);
                }
            }
            Op::Write {
                file,
                offset,
                len,
                byte,
            } => {
                if let (Some(handle), Some(&inode)) = (handles.get(&file), model.visible.get(&file))
                {
                    let (offset, len) = (offset as usize, len as usize);
                    handle.write_at(&vec![byte; len], offset as u64).unwrap();
                    let cached = &mut model.inodes[inode].0;
                    if cached.len() < offset + len {
                        cached.resize(offset + len, 0);
                    }
                    cached[offset..offset + len].fill(byte);
                }
            }
            Op::SetLen { file, len } => {
                if let (Some(handle), Some(&inode)) = (handles.get(&file), model.visible.get(&file))
                {
                    handle.set_len(u64::from(len)).unwrap();
                    model.inodes[inode].0.resize(len as usize, 0);
                }
            }
            Op::Sync(file) => {
                if let (Some(handle), Some(&inode)) = (handles.get(&file), model.visible.get(&file))
                {
                    handle.sync_data().unwrap();
                    model.inodes[inode].1 = model.inodes[inode].0.clone();
                }
            }
            Op::SyncDir => {
                vfs.sync_dir(Path::new("/d")).unwrap();
                model.durable = model.visible.clone();
            }
            Op::Remove(file) => {
                let result = vfs.remove_file(Path::new(&name(file)));
                if model.visible.remove(&file).is_some() {
                    result.unwrap();
                    handles.remove(&file);
                } else {
                    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotFound);
                }
            }
            Op::Rename(from, to) => {
                let result = vfs.rename(Path::new(&name(from)), Path::new(&name(to)));
                match model.visible.remove(&from) {
                    Some(inode) => {
                        result.unwrap();
                        model.visible.insert(to, inode);
                        if from != to {
                            let handle = handles.remove(&from).unwrap();
                            handles.insert(to, handle);
                        }
                    }
                    None => assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotFound),
                }
            }
            Op::Crash => {
                vfs.crash();
                for inode in &mut model.inodes {
                    inode.0 = inode.1.clone();
                }
                model.visible = model.durable.clone();
                handles.clear();
                for &file in model.visible.keys() {
                    let handle = vfs.open(Path::new(&name(file)), OpenMode::ReadWrite);
                    handles.insert(file, handle.unwrap());
                }
            }
        }
        check_against_model(&vfs, &model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// With every fault off, the cache behaves like plain memory and a crash
    /// leaves exactly what was synced (data by file syncs, entries by
    /// directory syncs): a model of both agrees after every operation.
    #[test]
    fn crash_with_every_fault_off_leaves_exactly_the_durable_state(
        ops in proptest::collection::vec(op_strategy(), 1..60)
    ) {
        run_model(&ops);
    }
}

// ----- directory entries -----

/// Creates /d/new, writes and syncs its data, optionally syncs /d, crashes;
/// returns whether the file is there after the crash (checking its data if
/// it is).
fn created_file_survives(seed: u64, faults: FaultConfig, sync_dir: bool) -> bool {
    let vfs = SimVfs::with_faults(seed, faults);
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = open(&vfs, "/d/new", OpenMode::CreateNew);
    file.write_at(b"synced data", 0).unwrap();
    file.sync_data().unwrap();
    if sync_dir {
        vfs.sync_dir(Path::new("/d")).unwrap();
    }
    vfs.crash();
    match vfs.file_contents(Path::new("/d/new")) {
        None => false,
        Some(bytes) => {
            assert_eq!(bytes, b"synced data");
            true
        }
    }
}

/// Every fault that leaves syncs and writes whole, with LostDirEntry at
/// `weight`.
fn faults_with_dir_entries(weight: f64) -> FaultConfig {
    FaultConfig::all()
        .with(FaultKind::FailedFsync, 0.0)
        .with(FaultKind::ShortWrite, 0.0)
        .with(FaultKind::NoSpace, 0.0)
        .with(FaultKind::MisdirectedWrite, 0.0)
        .with(FaultKind::LostDirEntry, weight)
}

#[test]
fn created_file_without_dir_sync_always_vanishes_with_lost_dir_entry_off() {
    for_each_seed(0..64, |seed| {
        assert!(!created_file_survives(
            seed,
            faults_with_dir_entries(0.0),
            false
        ));
    });
}

#[test]
fn created_file_without_dir_sync_sometimes_vanishes_with_lost_dir_entry_on() {
    let mut outcomes = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        outcomes.insert(created_file_survives(
            seed,
            faults_with_dir_entries(0.5),
            false,
        ));
    });
    assert_eq!(outcomes, BTreeSet::from([false, true]));
}

#[test]
fn created_file_with_dir_sync_never_vanishes() {
    for weight in [0.0, 0.5, 1.0] {
        for_each_seed(0..64, |seed| {
            assert!(created_file_survives(
                seed,
                faults_with_dir_entries(weight),
                true
            ));
        });
    }
}

/// Removes the durable file /d/old, optionally syncs /d, crashes; returns
/// whether the file is back (intact).
fn removed_file_comes_back(seed: u64, faults: FaultConfig, sync_dir: bool) -> bool {
    let vfs = SimVfs::with_faults(seed, faults);
    vfs.put_durable_file(Path::new("/d/old"), b"old data");
    vfs.remove_file(Path::new("/d/old")).unwrap();
    assert!(vfs.files().is_empty());
    if sync_dir {
        vfs.sync_dir(Path::new("/d")).unwrap();
    }
    vfs.crash();
    match vfs.file_contents(Path::new("/d/old")) {
        None => false,
        Some(bytes) => {
            assert_eq!(bytes, b"old data");
            true
        }
    }
}

#[test]
fn removed_file_without_dir_sync_comes_back_as_the_model_allows() {
    let mut with_fault_on = BTreeSet::new();
    for_each_seed(0..64, |seed| {
        assert!(removed_file_comes_back(
            seed,
            faults_with_dir_entries(0.0),
            false
        ));
        with_fault_on.insert(removed_file_comes_back(
            seed,
            faults_with_dir_entries(0.5),
            false,
        ));
        assert!(!removed_file_comes_back(
            seed,
            faults_with_dir_entries(0.5),
            true
        ));
    });
    assert_eq!(with_fault_on, BTreeSet::from([false, true]));
}

// ----- handles, halts, armed crashes -----

#[test]
fn dead_handle_errors_after_crash_and_halt_blocks_every_clone() {
    let vfs = SimVfs::new(3);
    let clone = vfs.clone();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = open(&vfs, "/d/a", OpenMode::CreateNew);
    file.write_at(b"abc", 0).unwrap();
    file.sync_data().unwrap();
    vfs.sync_dir(Path::new("/d")).unwrap();
    clone.crash();
    assert!(!vfs.is_halted());
    let mut buf = [0u8; 3];
    let errors = [
        file.read_at(&mut buf, 0).map(drop),
        file.write_at(b"x", 0),
        file.len().map(drop),
        file.set_len(0),
        file.sync_data(),
        file.sync_all(),
    ];
    for error in errors {
        let error = error.expect_err("a handle from before the crash must be dead");
        assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
        assert!(error.to_string().contains("/d/a"), "{error}");
    }
    // New opens, through any clone, see the post-crash disk.
    let reopened = open(&clone, "/d/a", OpenMode::ReadWrite);
    assert_eq!(reopened.len().unwrap(), 3);

    let ops_before_halt = vfs.op_count();
    vfs.halt();
    assert!(clone.is_halted());
    let path_errors = [
        clone.open(Path::new("/d/a"), OpenMode::ReadOnly).map(drop),
        clone.list_dir(Path::new("/d")).map(drop),
        clone.create_dir_all(Path::new("/e")),
        clone.sync_dir(Path::new("/d")),
        clone.remove_file(Path::new("/d/a")),
        clone.rename(Path::new("/d/a"), Path::new("/d/b")),
        reopened.write_at(b"y", 0),
    ];
    for error in path_errors {
        let error = error.expect_err("a halted disk must refuse everything");
        assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
    }
    assert_eq!(
        vfs.op_count(),
        ops_before_halt,
        "refused calls are not counted"
    );
    clone.reboot();
    assert!(!vfs.is_halted());
    assert!(
        reopened.len().is_err(),
        "a handle from before the halt stays dead"
    );
    assert_eq!(open(&vfs, "/d/a", OpenMode::ReadOnly).len().unwrap(), 3);
    assert_eq!(vfs.fault_counts()[&FaultKind::Crash], 2);
}

/// One call per step; says whether it succeeded.
fn counted_script(vfs: &SimVfs) -> Vec<(&'static str, bool)> {
    let d = Path::new("/d");
    let a = Path::new("/d/a");
    let mut log = Vec::new();
    let mut buf = [0u8; 8];
    log.push(("create_dir_all", vfs.create_dir_all(d).is_ok()));
    log.push(("list_dir", vfs.list_dir(d).is_ok()));
    let file = vfs.open(a, OpenMode::CreateNew).ok();
    log.push(("open create", file.is_some()));
    let on_file = |op: &dyn Fn(&dyn VfsFile) -> io::Result<()>| {
        file.as_deref().is_some_and(|f| op(f).is_ok())
    };
    log.push(("write_at", on_file(&|f| f.write_at(b"abcdef", 0))));
    log.push((
        "read_at",
        on_file(&|f| f.read_at(&mut [0u8; 8], 0).map(drop)),
    ));
    log.push(("len", on_file(&|f| f.len().map(drop))));
    log.push(("sync_data", on_file(&|f| f.sync_data())));
    log.push(("set_len", on_file(&|f| f.set_len(3))));
    log.push(("sync_all", on_file(&|f| f.sync_all())));
    log.push(("open read-only", vfs.open(a, OpenMode::ReadOnly).is_ok()));
    let again = vfs.open(a, OpenMode::ReadWrite).ok();
    log.push(("open read-write", again.is_some()));
    log.push(("sync_dir", vfs.sync_dir(d).is_ok()));
    log.push((
        "open create b",
        vfs.open(Path::new("/d/b"), OpenMode::CreateNew).is_ok(),
    ));
    log.push(("remove b", vfs.remove_file(Path::new("/d/b")).is_ok()));
    log.push((
        "open create c",
        vfs.open(Path::new("/d/c"), OpenMode::CreateNew).is_ok(),
    ));
    log.push((
        "rename c to b",
        vfs.rename(Path::new("/d/c"), Path::new("/d/b")).is_ok(),
    ));
    log.push((
        "rename missing",
        vfs.rename(Path::new("/d/zz"), Path::new("/d/b")).is_ok(),
    ));
    log.push((
        "write_at again",
        again
            .as_deref()
            .is_some_and(|f| f.write_at(b"x", 1).is_ok()),
    ));
    log.push((
        "read_at again",
        again
            .as_deref()
            .is_some_and(|f| f.read_at(&mut buf, 0).is_ok()),
    ));
    log.push((
        "open create existing",
        vfs.open(a, OpenMode::CreateNew).is_ok(),
    ));
    log.push((
        "remove missing",
        vfs.remove_file(Path::new("/d/zz")).is_ok(),
    ));
    log.push(("sync_dir again", vfs.sync_dir(d).is_ok()));
    let lock = Path::new("/d/LOCK");
    let guard = vfs.lock_file(lock).ok();
    log.push(("lock_file", guard.is_some()));
    log.push(("lock_file held", vfs.lock_file(lock).is_ok()));
    log
}

/// Which steps of `counted_script` are counted operations.
const COUNTED: &[&str] = &[
    "create_dir_all",
    "open create",
    "write_at",
    "sync_data",
    "set_len",
    "sync_all",
    "sync_dir",
    "open create b",
    "remove b",
    "open create c",
    "rename c to b",
    "rename missing",
    "write_at again",
    "open create existing",
    "remove missing",
    "sync_dir again",
    "lock_file",
    "lock_file held",
];

#[test]
fn crash_after_ops_fires_exactly_at_the_nth_counted_op() {
    // Unarmed: every counted call adds one to op_count, nothing else does.
    let reference = SimVfs::new(0);
    let steps = counted_script(&reference);
    let failing: Vec<&str> = steps
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(
        failing,
        [
            "rename missing",
            "open create existing",
            "remove missing",
            "lock_file held"
        ]
    );
    assert_eq!(reference.op_count(), COUNTED.len() as u64);

    for n in 1..=COUNTED.len() as u64 {
        let vfs = SimVfs::new(n);
        vfs.crash_after_ops(n);
        let steps = counted_script(&vfs);
        let target = COUNTED[n as usize - 1];
        let position = steps.iter().position(|(name, _)| *name == target).unwrap();
        // Everything before the n-th counted call behaves as unarmed,
        // that call and everything after fail.
        for (index, (name, ok)) in steps.iter().enumerate() {
            let unarmed_ok = !failing.contains(name);
            if index < position {
                assert_eq!(*ok, unarmed_ok, "n={n}: step {name} before the crash");
            } else {
                assert!(!ok, "n={n}: step {name} succeeded at or after the crash");
            }
        }
        assert!(vfs.is_halted(), "n={n}");
        assert_eq!(vfs.op_count(), n, "n={n}");
        let trace = vfs.trace();
        let crash = trace
            .iter()
            .position(|event| event.kind == TraceKind::Crash)
            .unwrap();
        assert!(
            !trace[crash - 1].ok,
            "n={n}: the event before the crash is the failed call"
        );
        vfs.reboot();
        assert!(vfs.list_dir(Path::new("/")).is_ok());
    }

    // 0 disarms.
    let vfs = SimVfs::new(0);
    vfs.crash_after_ops(1);
    vfs.crash_after_ops(0);
    assert_eq!(counted_script(&vfs), steps);
    assert!(!vfs.is_halted());
}

/// A write cut by a crash with TornWrite on (and every unsynced page and
/// size kept, so the cache's state is visible): the new bytes form a prefix
/// of the write, followed by at most the rest of one sector of garbage, then
/// the old bytes. Every kind of cut shows up over the seeds.
#[test]
fn torn_writes_leave_only_a_prefix() {
    let old: Vec<u8> = vec![0x11; 3000];
    let mut kinds_seen = BTreeSet::new();
    for_each_seed(0..600, |seed| {
        let faults = FaultConfig::none()
            .with(FaultKind::TornWrite, 1.0)
            .with(FaultKind::LostUnsyncedPages, 1.0)
            .with(FaultKind::UnsyncedSizeChange, 1.0);
        let vfs = SimVfs::with_faults(seed, faults);
        vfs.put_durable_file(Path::new("/f"), &old);
        let mut draw = Draw(seed);
        let offset = draw.below(3000) as usize;
        let len = 1 + draw.below(3000) as usize;
        let new: Vec<u8> = (0..len).map(|i| 0x80 | (i % 127) as u8).collect();
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        vfs.crash_after_ops(1);
        let error = file.write_at(&new, offset as u64).unwrap_err();
        assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
        assert!(vfs.is_halted());
        vfs.reboot();
        let after = vfs.file_contents(Path::new("/f")).unwrap();
        assert_eq!(
            after[..offset.min(after.len())],
            old[..offset.min(after.len())]
        );
        let prefix = (0..len)
            .take_while(|&i| after.get(offset + i) == Some(&new[i]))
            .count();
        let cut = offset + prefix;
        let garbage_end = if prefix == len {
            cut
        } else {
            ((cut / 512 + 1) * 512).min(offset + len)
        };
        for (position, &byte) in after.iter().enumerate().skip(garbage_end) {
            assert_eq!(byte, old[position], "offset {position} after the torn part");
        }
        assert!(after.len() <= old.len().max(garbage_end));
        let torn_len = vfs
            .trace()
            .iter()
            .find(|event| event.kind == TraceKind::Fault(FaultKind::TornWrite))
            .expect("the tear is traced")
            .len as usize;
        kinds_seen.insert(match prefix {
            0 => "empty",
            _ if prefix == len => "whole",
            _ if cut.is_multiple_of(512) => "at a sector",
            _ => "at a byte",
        });
        if torn_len > prefix + 1 {
            kinds_seen.insert("with garbage");
        }
    });
    let expected = BTreeSet::from(["empty", "whole", "at a sector", "at a byte", "with garbage"]);
    assert_eq!(kinds_seen, expected);
}

#[test]
fn write_cut_by_a_crash_without_torn_writes_leaves_nothing() {
    for_each_seed(0..50, |seed| {
        let faults = FaultConfig::all().with(FaultKind::TornWrite, 0.0);
        let vfs = SimVfs::with_faults(seed, faults);
        vfs.put_durable_file(Path::new("/f"), b"old");
        let file = open(&vfs, "/f", OpenMode::ReadWrite);
        vfs.crash_after_ops(1);
        assert!(file.write_at(&[7; 5000], 1).is_err());
        vfs.reboot();
        assert_eq!(vfs.file_contents(Path::new("/f")).unwrap(), b"old");
    });
}

#[test]
fn sync_and_crash_touch_only_dirty_pages() {
    let vfs = SimVfs::new(0);
    vfs.put_durable_file(Path::new("/big"), &vec![1u8; 256 * PAGE]);
    let file = open(&vfs, "/big", OpenMode::ReadWrite);
    file.write_at(&[2; 10], 5).unwrap();
    file.write_at(&[2; 10], 100 * PAGE_BYTES - 5).unwrap();
    assert_eq!(vfs.dirty_page_count(), 3);
    file.sync_data().unwrap();
    assert_eq!(vfs.dirty_page_count(), 0);
    file.write_at(&[3; 10], 0).unwrap();
    assert_eq!(vfs.dirty_page_count(), 1);
    vfs.crash();
    assert_eq!(vfs.dirty_page_count(), 0);
    let after = vfs.file_contents(Path::new("/big")).unwrap();
    assert_eq!(
        after[..20],
        [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1]
    );
}

// ----- determinism -----

/// Everything observable about a finished run, as text.
fn fingerprint(vfs: &SimVfs) -> Vec<String> {
    let mut lines = vec![format!("digest {:016x}", vfs.trace_digest())];
    lines.extend(vfs.trace().iter().map(|event| event.to_string()));
    for path in vfs.files() {
        lines.push(format!("{} {:?}", path.display(), vfs.file_contents(&path)));
    }
    lines.push(format!("{:?}", vfs.fault_counts()));
    lines.push(format!("{:?}", vfs.damage()));
    lines
}

#[test]
fn same_seed_gives_same_states_trace_and_digest() {
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(11);
    let mut configs = vec![FaultConfig::all(), FaultConfig::none()];
    configs.extend((0..4).map(|_| FaultConfig::swarm(&mut rng)));
    for faults in configs {
        let mut digests = BTreeSet::new();
        for_each_seed(0..8, |seed| {
            let first = fingerprint(&synced_data_workload(seed, faults.clone(), 200));
            let second = fingerprint(&synced_data_workload(seed, faults.clone(), 200));
            assert_eq!(first, second, "faults {faults}");
            digests.insert(first[0].clone());
        });
        assert_eq!(
            digests.len(),
            8,
            "different seeds gave equal digests ({faults})"
        );
    }
}

/// The digest of one fixed run, written down: it must not change from one
/// machine or build to the next. (It changes, deliberately, when the trace
/// format, the fault model's draws or the workload change: update it then.)
#[test]
fn trace_digest_is_stable_across_machines() {
    let vfs = synced_data_workload(42, FaultConfig::all(), 250);
    assert_eq!(
        vfs.trace_digest(),
        0xa65a_f479_aece_b67e,
        "digest {:#018x}",
        vfs.trace_digest()
    );
}

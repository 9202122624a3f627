//! `SimVfs` under a `CrashScript`: the outcomes it enumerates are exactly
//! those the random fault model reaches, each once per choice vector, and
//! without a script the disk behaves as before.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{for_each_seed, open};
use durlog_vfs::{
    CrashScript, FaultConfig, FaultKind, OpenMode, PAGE_BYTES, SimVfs, TraceKind, Vfs,
    injected_fault,
};

const PAGE: usize = PAGE_BYTES as usize;

/// A disk with one of each unsynced change a power loss decides: pages
/// overwritten and appended in a synced file, a new file (its entry and
/// its pages), a rename, a removal and an unsynced truncation.
fn unsynced_disk(vfs: &SimVfs) {
    vfs.put_durable_file(Path::new("/d/a"), &vec![b'a'; 2 * PAGE]);
    vfs.put_durable_file(Path::new("/d/c"), b"c");
    vfs.put_durable_file(Path::new("/d/e"), b"e");
    vfs.put_durable_file(Path::new("/d/t"), &vec![b't'; 3 * PAGE]);
    let a = open(vfs, "/d/a", OpenMode::ReadWrite);
    a.write_at(b"overwrite", 100).unwrap();
    a.write_at(&vec![b'A'; PAGE], 2 * PAGE as u64).unwrap();
    let b = vfs.open(Path::new("/d/b"), OpenMode::CreateNew).unwrap();
    b.write_at(b"new file", 0).unwrap();
    vfs.rename(Path::new("/d/c"), Path::new("/d/c2")).unwrap();
    vfs.remove_file(Path::new("/d/e")).unwrap();
    let t = open(vfs, "/d/t", OpenMode::ReadWrite);
    t.set_len(PAGE as u64 + 10).unwrap();
}

/// Every image a scripted power loss can leave on `unsynced_disk`,
/// enumerated depth first, and how many runs that took.
fn enumerated_images() -> (BTreeSet<u128>, usize) {
    let mut images = BTreeSet::new();
    let mut choices = Vec::new();
    let mut runs = 0;
    loop {
        let vfs = SimVfs::new(0);
        unsynced_disk(&vfs);
        vfs.set_crash_script(Some(CrashScript {
            power_losses: 1,
            pages_max: 10,
            choices,
            ..CrashScript::default()
        }));
        vfs.crash();
        runs += 1;
        images.insert(vfs.image_digest());
        let script = vfs.crash_script().unwrap();
        assert!(!script.misfit);
        match CrashScript::next_choices(&script.decisions) {
            Some(next) => choices = next,
            None => return (images, runs),
        }
    }
}

#[test]
fn the_script_reaches_exactly_the_states_the_random_model_reaches() {
    let (enumerated, runs) = enumerated_images();
    // Four names (b, c, c2, e), the size of t, then the pages that matter:
    // two of a, and b's page only if b's entry survived.
    assert!(runs >= 2usize.pow(7), "{runs} runs");
    let mut sampled = BTreeSet::new();
    // The rarest states have a chance of 2^-11 a seed: 30,000 seeds miss
    // one with a chance of about 10^-6.
    for_each_seed(0..30_000, |seed| {
        let faults = FaultConfig::none()
            .with(FaultKind::LostUnsyncedPages, 0.5)
            .with(FaultKind::LostDirEntry, 0.5)
            .with(FaultKind::UnsyncedSizeChange, 0.5);
        let vfs = SimVfs::with_faults(seed, faults);
        unsynced_disk(&vfs);
        vfs.crash();
        let image = vfs.image_digest();
        assert!(
            enumerated.contains(&image),
            "seed {seed} reached a state the script never enumerates"
        );
        sampled.insert(image);
    });
    assert_eq!(
        sampled, enumerated,
        "the script enumerates states the random model never reaches"
    );
}

#[test]
fn option_zero_everywhere_is_the_durable_state() {
    let scripted = SimVfs::new(0);
    unsynced_disk(&scripted);
    scripted.set_crash_script(Some(CrashScript {
        power_losses: 1,
        pages_max: 10,
        ..CrashScript::default()
    }));
    scripted.crash();
    let plain = SimVfs::new(0);
    unsynced_disk(&plain);
    plain.crash();
    assert_eq!(scripted.image_digest(), plain.image_digest());
    assert!(!scripted.crash_script().unwrap().decisions.is_empty());
}

#[test]
fn power_fails_and_operations_fail_where_the_script_says() {
    let vfs = SimVfs::new(0);
    vfs.set_crash_script(Some(CrashScript {
        crash_at_ops: vec![4],
        crash_again_after: Some(2),
        fail_at_op: Some(2),
        power_losses: 2,
        ..CrashScript::default()
    }));
    vfs.create_dir_all(Path::new("/d")).unwrap(); // op 1
    let file = vfs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap(); // op 2
    // A create cannot fail in the fault model: nothing fails at op 2.
    file.write_at(&[1; 1000], 0).unwrap(); // op 3
    let error = file.sync_data().unwrap_err(); // op 4: power fails
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
    vfs.reboot();
    vfs.sync_dir(Path::new("/d")).unwrap(); // op 5
    let error = vfs.sync_dir(Path::new("/d")).unwrap_err(); // op 6: again
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
    let script = vfs.crash_script().unwrap();
    assert_eq!(
        script.ops,
        vec![
            TraceKind::CreateDir,
            TraceKind::Create,
            TraceKind::Write,
            TraceKind::SyncData,
            TraceKind::SyncDir,
            TraceKind::SyncDir,
        ]
    );
    assert_eq!(script.crash_at_ops, vec![4, 6]);

    let vfs = SimVfs::new(0);
    vfs.set_crash_script(Some(CrashScript {
        fail_at_op: Some(3),
        choices: vec![1],
        ..CrashScript::default()
    }));
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = vfs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
    let error = file.write_at(&[7; 1500], 0).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::ShortWrite));
    // Option 1: the prefix up to the first sector boundary.
    assert_eq!(vfs.file_contents(Path::new("/d/f")).unwrap(), vec![7; 512]);
    file.write_at(&[8; 10], 0).unwrap(); // the failure is spent
}

#[test]
fn a_crash_spends_no_choice_on_a_file_left_without_a_name() {
    let vfs = SimVfs::new(0);
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = vfs.open(Path::new("/d/new"), OpenMode::CreateNew).unwrap();
    file.write_at(&vec![1; 3 * PAGE], 0).unwrap();
    // Option 0 for its entry: the file vanishes, and its size and pages
    // are not asked about.
    vfs.set_crash_script(Some(CrashScript {
        power_losses: 1,
        pages_max: 10,
        ..CrashScript::default()
    }));
    vfs.crash();
    let decisions = vfs.crash_script().unwrap().decisions;
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].kind, FaultKind::LostDirEntry);
    assert!(vfs.files().is_empty());
}

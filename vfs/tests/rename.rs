//! `Vfs::rename` on `SimVfs`: what a crash may leave of an unsynced rename
//! (each of the two names independently old or new, and only that), which
//! name a renamed file reports, handles, counting and the trace. The POSIX
//! behaviour is in `conformance.rs`. Every randomized test prints its seed.

mod common;

use common::{for_each_seed, open};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{
    DirEntry, FaultConfig, FaultKind, OpenMode, SimVfs, TraceKind, Vfs, VfsFile, injected_fault,
};

/// Every fault that leaves syncs and writes whole, with LostDirEntry at
/// `weight`: crash outcomes differ only in directory entries and unsynced
/// bytes, never in synced ones.
fn faults_with_dir_entries(weight: f64) -> FaultConfig {
    FaultConfig::all()
        .with(FaultKind::FailedFsync, 0.0)
        .with(FaultKind::ShortWrite, 0.0)
        .with(FaultKind::NoSpace, 0.0)
        .with(FaultKind::MisdirectedWrite, 0.0)
        .with(FaultKind::BitFlipOnRead, 0.0)
        .with(FaultKind::LostDirEntry, weight)
}

fn path(text: &str) -> &Path {
    Path::new(text)
}

fn paths(texts: &[&str]) -> Vec<PathBuf> {
    texts.iter().map(PathBuf::from).collect()
}

/// Which of the names the file may have after a crash it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Names {
    OldOnly,
    NewOnly,
    Both,
    Neither,
}

fn names_visible(vfs: &SimVfs, old: &str, new: &str) -> Names {
    match (vfs.file_contents(path(old)), vfs.file_contents(path(new))) {
        (Some(_), None) => Names::OldOnly,
        (None, Some(_)) => Names::NewOnly,
        (Some(_), Some(_)) => Names::Both,
        (None, None) => Names::Neither,
    }
}

#[test]
fn synced_rename_leaves_only_the_new_name_under_every_fault() {
    for weight in [0.0, 0.5, 1.0] {
        for_each_seed(0..64, |seed| {
            let vfs = SimVfs::with_faults(seed, faults_with_dir_entries(weight));
            vfs.put_durable_file(path("/d/old"), b"first");
            let file = open(&vfs, "/d/old", OpenMode::ReadWrite);
            file.write_at(b"FIRST, synced", 0).unwrap();
            file.sync_data().unwrap();
            vfs.rename(path("/d/old"), path("/d/new")).unwrap();
            vfs.sync_dir(path("/d")).unwrap();
            vfs.crash();
            assert_eq!(vfs.files(), paths(&["/d/new"]), "weight {weight}");
            assert_eq!(vfs.file_contents(path("/d/new")).unwrap(), b"FIRST, synced");
            assert_eq!(
                vfs.durable_contents(path("/d/new")).unwrap(),
                b"FIRST, synced"
            );
            assert_eq!(vfs.durable_contents(path("/d/old")), None);
        });
    }
}

#[test]
fn unsynced_rename_is_undone_with_lost_dir_entry_off() {
    for_each_seed(0..64, |seed| {
        let vfs = SimVfs::with_faults(seed, faults_with_dir_entries(0.0));
        vfs.put_durable_file(path("/d/old"), b"durable");
        vfs.put_durable_file(path("/d/target"), b"replaced");
        vfs.rename(path("/d/old"), path("/d/target")).unwrap();
        assert_eq!(vfs.files(), paths(&["/d/target"]));
        // Before the crash the new entries are visible but not durable.
        assert_eq!(vfs.durable_contents(path("/d/old")).unwrap(), b"durable");
        vfs.crash();
        assert_eq!(vfs.files(), paths(&["/d/old", "/d/target"]));
        assert_eq!(vfs.file_contents(path("/d/old")).unwrap(), b"durable");
        assert_eq!(vfs.file_contents(path("/d/target")).unwrap(), b"replaced");
    });
}

/// A rename across directories is durable per directory: syncing only the
/// target's directory keeps both names (LostDirEntry off), syncing only the
/// source's keeps neither. The file the names lead to stays the same.
#[test]
fn rename_across_directories_is_durable_per_directory() {
    let cases = [("/b", Names::Both), ("/a", Names::Neither)];
    for (synced_dir, expected) in cases {
        let vfs = SimVfs::new(1);
        vfs.put_durable_file(path("/a/f"), b"data");
        vfs.create_dir_all(path("/b")).unwrap();
        vfs.rename(path("/a/f"), path("/b/g")).unwrap();
        vfs.sync_dir(path(synced_dir)).unwrap();
        vfs.crash();
        assert_eq!(
            names_visible(&vfs, "/a/f", "/b/g"),
            expected,
            "{synced_dir}"
        );
        if expected == Names::Both {
            // One file under two names: a write through one shows in the
            // other, and removing one leaves the other.
            open(&vfs, "/a/f", OpenMode::ReadWrite)
                .write_at(b"D", 0)
                .unwrap();
            assert_eq!(vfs.file_contents(path("/b/g")).unwrap(), b"Data");
            vfs.remove_file(path("/b/g")).unwrap();
            assert_eq!(vfs.files(), paths(&["/a/f"]));
        }
    }
}

/// Renames /d/old (synced data, durable entry) to /d/new without a
/// directory sync and crashes, with LostDirEntry at 0.5: every outcome is
/// one of the four per-name combinations, each visible name holds the
/// synced data, and whatever names the file afterwards (Damage, the trace)
/// is a name it is visible under, the newest if it has two.
/// Returns the outcome, and whether the crash kept (and traced) the page.
fn unsynced_rename_outcome(seed: u64) -> (Names, bool) {
    let vfs = SimVfs::with_faults(seed, faults_with_dir_entries(0.5));
    vfs.put_durable_file(path("/d/old"), b"synced");
    let file = open(&vfs, "/d/old", OpenMode::ReadWrite);
    vfs.rename(path("/d/old"), path("/d/new")).unwrap();
    // An unsynced write: the crash may keep its page, and traces it if so.
    file.write_at(b"S", 0).unwrap();
    vfs.crash();
    let outcome = names_visible(&vfs, "/d/old", "/d/new");
    let visible = vfs.files();
    for name in &visible {
        let bytes = vfs.file_contents(name).unwrap();
        assert!(
            bytes == b"synced" || bytes == b"Synced",
            "{name:?}: {bytes:?}"
        );
    }
    // The pages the crash kept are traced under a name the file is visible
    // under (the file has none left in the outcome Neither).
    let trace = vfs.trace();
    let crash = trace
        .iter()
        .position(|event| event.kind == TraceKind::Crash)
        .unwrap();
    let page_kept = trace[crash + 1..]
        .iter()
        .find(|event| event.kind == TraceKind::Fault(FaultKind::LostUnsyncedPages));
    if let Some(event) = page_kept
        && outcome != Names::Neither
    {
        assert!(visible.contains(&event.path.to_path_buf()), "{event}");
    }
    if outcome == Names::Neither {
        return (outcome, false);
    }
    // Damage to the file names its newest visible name.
    let newest = if outcome == Names::OldOnly {
        "/d/old"
    } else {
        "/d/new"
    };
    let reopened = open(&vfs, newest, OpenMode::ReadWrite);
    vfs.set_faults(FaultConfig::none().with(FaultKind::MisdirectedWrite, 1.0));
    reopened.write_at(&[7u8; 100], 1024).unwrap();
    let flipped = vfs
        .flip_random_bit_at_rest()
        .expect("the file has durable bytes");
    let damage = vfs.damage();
    assert_eq!(damage.len(), 2);
    assert_eq!(damage[0].kind, FaultKind::MisdirectedWrite);
    assert_eq!(damage[0].path, path(newest), "{}", damage[0]);
    assert_eq!(flipped.path, path(newest));
    assert_eq!(damage[1], flipped);
    (outcome, page_kept.is_some())
}

#[test]
fn unsynced_rename_leaves_each_name_old_or_new_independently() {
    let mut seen = BTreeSet::new();
    let mut pages_kept = 0;
    for_each_seed(0..200, |seed| {
        let (outcome, page_kept) = unsynced_rename_outcome(seed);
        seen.insert(outcome);
        pages_kept += usize::from(page_kept);
    });
    assert!(pages_kept > 0, "no crash kept the unsynced page");
    assert_eq!(
        seen,
        BTreeSet::from([Names::OldOnly, Names::NewOnly, Names::Both, Names::Neither])
    );
}

#[test]
fn damage_follows_a_later_rename() {
    let vfs = SimVfs::new(0);
    vfs.put_durable_file(path("/d/a"), &[0u8; 64]);
    vfs.flip_bit_at_rest(path("/d/a"), 9).unwrap();
    assert_eq!(vfs.damage()[0].path, path("/d/a"));
    vfs.rename(path("/d/a"), path("/d/b")).unwrap();
    let damage = vfs.damage();
    assert_eq!(damage[0].path, path("/d/b"));
    assert_eq!((damage[0].offset, damage[0].bit), (1, Some(1)));
    // Undone by a crash: back to the old name.
    vfs.crash();
    assert_eq!(vfs.damage()[0].path, path("/d/a"));
}

#[test]
fn open_handles_follow_the_rename_until_a_crash() {
    let vfs = SimVfs::new(2);
    vfs.create_dir_all(path("/d")).unwrap();
    let writer = open(&vfs, "/d/a", OpenMode::CreateNew);
    let reader = open(&vfs, "/d/a", OpenMode::ReadOnly);
    writer.write_at(b"before", 0).unwrap();
    let victim = open(&vfs, "/d/b", OpenMode::CreateNew);
    victim.write_at(b"victim", 0).unwrap();
    vfs.rename(path("/d/a"), path("/d/b")).unwrap();

    writer.write_at(b"after!", 0).unwrap();
    writer.sync_data().unwrap();
    let mut buf = [0u8; 6];
    reader.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"after!");
    assert_eq!(vfs.file_contents(path("/d/b")).unwrap(), b"after!");
    // The replaced file lives on in its handle.
    victim.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"victim");
    // Errors through the handle name the file's new path.
    let error = reader.write_at(b"x", 0).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::PermissionDenied);
    assert!(error.to_string().contains("/d/b"), "{error}");
    assert_eq!(
        vfs.open(path("/d/a"), OpenMode::ReadOnly)
            .unwrap_err()
            .kind(),
        io::ErrorKind::NotFound
    );

    vfs.sync_dir(path("/d")).unwrap();
    vfs.crash();
    for error in [
        writer.write_at(b"x", 0),
        reader.read_at(&mut buf, 0).map(drop),
    ] {
        let error = error.expect_err("a handle from before the crash is dead");
        assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
        assert!(error.to_string().contains("/d/b"), "{error}");
    }
    assert_eq!(vfs.file_contents(path("/d/b")).unwrap(), b"after!");
}

#[test]
fn crash_after_ops_can_fire_at_the_rename() {
    // Weight 0: the interrupted rename is undone; 1: both of its names
    // reach the platter.
    for (weight, expected) in [(0.0, Names::OldOnly), (1.0, Names::NewOnly)] {
        let vfs = SimVfs::with_faults(3, FaultConfig::none().with(FaultKind::LostDirEntry, weight));
        vfs.put_durable_file(path("/d/old"), b"data");
        vfs.crash_after_ops(1);
        let error = vfs.rename(path("/d/old"), path("/d/new")).unwrap_err();
        assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
        let message = error.to_string();
        assert!(
            message.contains("/d/old") && message.contains("/d/new"),
            "{message}"
        );
        assert!(vfs.is_halted());
        assert_eq!(vfs.op_count(), 1);
        // Refused while down, and not counted.
        let refused = vfs.rename(path("/d/old"), path("/d/new")).unwrap_err();
        assert_eq!(injected_fault(&refused), Some(FaultKind::Crash));
        assert_eq!(vfs.op_count(), 1);
        vfs.reboot();
        assert_eq!(
            names_visible(&vfs, "/d/old", "/d/new"),
            expected,
            "weight {weight}"
        );
        let trace: Vec<String> = vfs.trace().iter().map(ToString::to_string).collect();
        let rename_then_crash = ["rename /d/new ERR", "crash"];
        assert!(
            trace.windows(2).any(|pair| pair == rename_then_crash),
            "{trace:?}"
        );
    }
}

#[test]
fn rename_errors_change_nothing_and_rename_onto_itself_is_a_no_op() {
    let vfs = SimVfs::new(4);
    vfs.put_durable_file(path("/d/f"), b"f");
    vfs.create_dir_all(path("/d/sub")).unwrap();
    let kinds: Vec<io::ErrorKind> = [
        ("/d/missing", "/d/x"),
        ("/d/sub", "/d/x"),
        ("/d/f", "/d/sub"),
        ("/d/f", "/nowhere/x"),
        ("/d/f", "/"),
    ]
    .iter()
    .map(|(from, to)| vfs.rename(path(from), path(to)).unwrap_err().kind())
    .collect();
    assert_eq!(
        kinds,
        [
            io::ErrorKind::NotFound,
            io::ErrorKind::IsADirectory,
            io::ErrorKind::IsADirectory,
            io::ErrorKind::NotFound,
            io::ErrorKind::InvalidInput,
        ]
    );
    vfs.rename(path("/d/f"), path("/d/./f")).unwrap();
    assert_eq!(
        vfs.list_dir(path("/d")).unwrap(),
        [
            DirEntry {
                name: "f".into(),
                is_dir: false
            },
            DirEntry {
                name: "sub".into(),
                is_dir: true
            },
        ]
    );
    // Nothing was pending: a crash changes nothing.
    vfs.crash();
    assert_eq!(vfs.files(), paths(&["/d/f"]));
    assert_eq!(vfs.op_count(), 7, "every rename is counted, failed or not");
}

#[test]
fn trace_records_renames_and_the_digest_covers_the_source() {
    let vfs = SimVfs::new(0);
    vfs.put_durable_file(path("/d/a"), b"a");
    vfs.put_durable_file(path("/d/c"), b"c");
    vfs.rename(path("/d/a"), path("/d/b")).unwrap();
    vfs.rename(path("/d/b"), path("/d/c")).unwrap();
    let _ = vfs.rename(path("/d/a"), path("/d/c"));
    let lines: Vec<String> = vfs.trace().iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "rename /d/b",
            "rename /d/c (replaced a file)",
            "rename /d/c ERR"
        ]
    );
    assert_eq!(vfs.trace()[1].kind, TraceKind::Rename);
    assert_eq!(vfs.trace()[1].len, 1);

    // Two failed renames that differ only in their source: same events,
    // different digests.
    let digest_of = |from: &str| {
        let vfs = SimVfs::new(0);
        let _ = vfs.rename(path(from), path("/t"));
        (vfs.trace(), vfs.trace_digest())
    };
    let (x, y) = (digest_of("/x"), digest_of("/y"));
    assert_eq!(x.0, y.0);
    assert_ne!(x.1, y.1);
}

/// A `Vfs` written before `rename` existed: it still compiles, and refuses.
#[derive(Debug)]
struct Minimal;

impl Vfs for Minimal {
    fn open(&self, path: &Path, _mode: OpenMode) -> io::Result<Box<dyn VfsFile>> {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            path.display().to_string(),
        ))
    }
    fn list_dir(&self, _dir: &Path) -> io::Result<Vec<DirEntry>> {
        Ok(Vec::new())
    }
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn remove_file(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn default_rename_is_unsupported_and_wrappers_forward() {
    let error = Minimal.rename(path("/a"), path("/b")).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::Unsupported);
    assert_eq!(error.to_string(), "rename /a to /b: this Vfs cannot rename");

    let vfs = SimVfs::new(0);
    vfs.put_durable_file(path("/a"), b"x");
    let boxed: Box<dyn Vfs> = Box::new(std::sync::Arc::new(vfs.clone()));
    boxed.rename(path("/a"), path("/b")).unwrap();
    assert_eq!(vfs.files(), paths(&["/b"]));
}

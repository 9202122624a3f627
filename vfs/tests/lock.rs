//! `Vfs::lock_file` on `SimVfs`, beyond what the conformance suite checks
//! on both backends: a power loss releases every lock (the processes died),
//! a guard from before a crash never releases a lock taken after it, a
//! crash may land on `lock_file` itself, and creating the lock file follows
//! the crash rules of any unsynced create. Plus the trait's default body.

use std::io;
use std::path::Path;
use std::sync::Arc;

use durlog_vfs::{
    DirEntry, FaultConfig, FaultKind, OpenMode, SimVfs, Vfs, VfsFile, injected_fault,
};

const LOCK: &str = "/d/LOCK";

fn path(text: &str) -> &Path {
    Path::new(text)
}

/// A disk with the directory `/d` and every fault off.
fn empty_disk() -> SimVfs {
    let vfs = SimVfs::new(0);
    vfs.create_dir_all(path("/d")).unwrap();
    vfs
}

/// A disk whose lock files exist durably, as a log's do once its directory
/// is synced: a crash cannot make them vanish, which would free the lock
/// by itself (a new file is a new lock).
fn disk() -> SimVfs {
    let vfs = empty_disk();
    vfs.put_durable_file(path(LOCK), b"");
    vfs.put_durable_file(path("/d/OTHER"), b"");
    vfs
}

fn is_locked(vfs: &SimVfs) -> bool {
    match vfs.lock_file(path(LOCK)) {
        Ok(_guard) => false,
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => true,
        Err(error) => panic!("lock {LOCK}: {error}"),
    }
}

#[test]
fn a_power_loss_releases_every_lock() {
    let vfs = disk();
    let _before_crash = vfs.lock_file(path(LOCK)).unwrap();
    let _other = vfs.lock_file(path("/d/OTHER")).unwrap();
    assert!(is_locked(&vfs));
    vfs.crash();
    assert!(!is_locked(&vfs), "a crash releases the lock");
    assert!(vfs.lock_file(path("/d/OTHER")).is_ok());

    let _before_halt = vfs.lock_file(path(LOCK)).unwrap();
    vfs.halt();
    vfs.reboot();
    assert!(!is_locked(&vfs), "a halt releases the lock");
}

#[test]
fn a_guard_from_before_a_crash_does_not_release_the_new_holders_lock() {
    let vfs = disk();
    let stale = vfs.lock_file(path(LOCK)).unwrap();
    vfs.crash();
    let holder = vfs.lock_file(path(LOCK)).unwrap();
    drop(stale);
    assert!(is_locked(&vfs), "the stale guard released the new lock");
    drop(holder);
    assert!(!is_locked(&vfs));
}

#[test]
fn a_crash_during_lock_file_fails_it_and_takes_no_lock() {
    let vfs = empty_disk();
    let ops = vfs.op_count();
    vfs.crash_after_ops(1);
    let error = vfs.lock_file(path(LOCK)).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash), "{error}");
    assert!(error.to_string().contains(LOCK), "{error}");
    assert_eq!(vfs.op_count(), ops + 1, "lock_file is a counted operation");
    assert!(vfs.is_halted());
    vfs.reboot();
    // The create was never synced: with LostDirEntry off it is undone.
    assert!(vfs.files().is_empty(), "{:?}", vfs.files());
    assert!(!is_locked(&vfs));

    // On a file someone holds (made durable, so that the crash keeps it): the crash, not WouldBlock, decides the call,
    // and the holder's lock dies with the power too.
    let holder = vfs.lock_file(path(LOCK)).unwrap();
    vfs.sync_dir(path("/d")).unwrap();
    vfs.crash_after_ops(1);
    let error = vfs.lock_file(path(LOCK)).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash), "{error}");
    vfs.reboot();
    let new_holder = vfs.lock_file(path(LOCK)).unwrap();
    drop(holder);
    assert!(is_locked(&vfs));
    drop(new_holder);
}

#[test]
fn creating_the_lock_file_is_durable_only_after_sync_dir() {
    let vfs = empty_disk();
    drop(vfs.lock_file(path(LOCK)).unwrap());
    assert_eq!(vfs.files(), [path(LOCK)]);
    vfs.crash();
    assert!(vfs.files().is_empty(), "an unsynced create vanishes");

    drop(vfs.lock_file(path(LOCK)).unwrap());
    vfs.sync_dir(path("/d")).unwrap();
    vfs.crash();
    assert_eq!(vfs.files(), [path(LOCK)]);

    // With LostDirEntry always on, the unsynced create always survives.
    let kept = SimVfs::with_faults(0, FaultConfig::none().with(FaultKind::LostDirEntry, 1.0));
    kept.create_dir_all(path("/d")).unwrap();
    drop(kept.lock_file(path(LOCK)).unwrap());
    kept.crash();
    assert_eq!(kept.files(), [path(LOCK)]);
    assert_eq!(kept.fault_counts().get(&FaultKind::LostDirEntry), Some(&1));
}

#[test]
fn lock_file_is_counted_and_traced_and_fails_on_a_halted_disk() {
    let vfs = empty_disk();
    vfs.clear_trace();
    let ops = vfs.op_count();
    let guard = vfs.lock_file(path("/d/./LOCK")).unwrap();
    assert!(vfs.lock_file(path(LOCK)).is_err());
    assert_eq!(vfs.op_count(), ops + 2, "a refused lock is counted too");
    let lines: Vec<String> = vfs.trace().iter().map(ToString::to_string).collect();
    assert_eq!(lines, ["lock /d/LOCK", "lock /d/LOCK ERR"]);
    vfs.halt();
    let error = vfs.lock_file(path(LOCK)).unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash), "{error}");
    assert_eq!(vfs.op_count(), ops + 2, "nothing is counted while down");
    assert!(format!("{guard:?}").contains("LOCK"), "{guard:?}");
}

#[test]
fn a_guard_outlives_every_handle_of_its_disk() {
    let vfs = disk();
    let guard = vfs.lock_file(path(LOCK)).unwrap();
    drop(vfs);
    drop(guard);
}

/// A `Vfs` written before `lock_file` existed: it still compiles, and
/// refuses.
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
fn default_lock_file_is_unsupported_and_wrappers_forward() {
    let error = Minimal.lock_file(path("/d/LOCK")).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::Unsupported);
    assert_eq!(
        error.to_string(),
        "lock /d/LOCK: this Vfs cannot lock files"
    );

    let vfs = disk();
    let boxed: Box<dyn Vfs> = Box::new(Arc::new(vfs.clone()));
    let _guard = boxed.lock_file(path(LOCK)).unwrap();
    assert!(is_locked(&vfs));
}

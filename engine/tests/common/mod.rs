//! Shared helpers for the engine's tests: one log directory on either
//! backend (a real temporary directory, or a simulated disk), a Vfs
//! wrapper that records every operation so tests can check their order,
//! and a time limit for the tests that run threads or processes.

#![allow(dead_code)] // each test binary uses a different subset

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use durlog::vfs::{DirEntry, OpenMode, PosixVfs, SimVfs, Vfs, VfsFile};
use durlog::{Error, Event, Log, Options};

/// Where a test's log lives.
pub enum Backend {
    Posix { root: tempfile::TempDir },
    Sim { vfs: SimVfs },
}

impl Backend {
    /// One of each backend, for tests that must hold on both.
    pub fn all() -> Vec<Backend> {
        vec![Backend::posix(), Backend::sim(0x5eed)]
    }

    pub fn posix() -> Backend {
        Backend::Posix {
            root: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn sim(seed: u64) -> Backend {
        Backend::Sim {
            vfs: SimVfs::new(seed),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Posix { .. } => "posix",
            Backend::Sim { .. } => "sim",
        }
    }

    pub fn dir(&self) -> PathBuf {
        match self {
            Backend::Posix { root } => root.path().join("log"),
            Backend::Sim { .. } => PathBuf::from("/data/log"),
        }
    }

    pub fn vfs(&self) -> Arc<dyn Vfs> {
        match self {
            Backend::Posix { .. } => Arc::new(PosixVfs),
            Backend::Sim { vfs } => Arc::new(vfs.clone()),
        }
    }

    pub fn open(&self, options: Options) -> Result<Log, Error> {
        Log::open_with_vfs(self.vfs(), self.dir(), options)
    }

    /// Opens through a recording wrapper.
    pub fn open_recorded(&self, options: Options) -> Result<(Log, Recorder), Error> {
        let recorder = Recorder::new(self.vfs());
        let log = Log::open_with_vfs(recorder.clone(), self.dir(), options)?;
        Ok((log, recorder))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// A file's bytes as a reader after a restart would see them.
    pub fn read_file(&self, name: &str) -> Vec<u8> {
        let path = self.path(name);
        match self {
            Backend::Posix { .. } => std::fs::read(&path).expect("read file"),
            Backend::Sim { vfs } => vfs.file_contents(&path).expect("file exists"),
        }
    }

    /// Replaces a file's bytes, durably (damage done between runs).
    pub fn write_file(&self, name: &str, bytes: &[u8]) {
        let path = self.path(name);
        match self {
            Backend::Posix { .. } => std::fs::write(&path, bytes).expect("write file"),
            Backend::Sim { vfs } => vfs.put_durable_file(&path, bytes),
        }
    }

    pub fn remove_file(&self, name: &str) {
        let path = self.path(name);
        match self {
            Backend::Posix { .. } => std::fs::remove_file(&path).expect("remove file"),
            Backend::Sim { vfs } => {
                vfs.remove_file(&path).expect("remove file");
                vfs.sync_dir(&self.dir()).expect("sync dir");
            }
        }
    }

    /// Names of the files in the log directory, sorted, but for the lock
    /// file: a writer's bookkeeping, empty, and there from its first open.
    pub fn files(&self) -> Vec<String> {
        self.vfs()
            .list_dir(&self.dir())
            .expect("list log directory")
            .into_iter()
            .map(|entry| entry.name)
            .filter(|name| name != durlog::format::LOCK_FILE_NAME)
            .collect()
    }

    /// Every file's name and bytes, for "nothing changed" checks.
    pub fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        self.files()
            .into_iter()
            .map(|name| (name.clone(), self.read_file(&name)))
            .collect()
    }

    /// A power loss on the simulated disk (no faults are enabled, so every
    /// synced byte survives and nothing unsynced does); on the real disk
    /// the dropped `Log` is the crash of the process.
    pub fn crash(&self) {
        if let Backend::Sim { vfs } = self {
            vfs.crash();
        }
    }
}

/// CRC-32C one bit at a time, as SPEC 2.1 defines it, independent of the
/// `crc32c` crate the engine uses.
pub fn crc32c_bitwise(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFF_u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Event with type and data, the way the tests append them.
pub fn event(event_type: &str, data: &[u8]) -> Event {
    Event::new(event_type, data.to_vec())
}

/// A simulated disk whose only faults are what a power loss does: lose
/// unsynced pages, tear the write under way, undo an unsynced directory
/// entry or size change. The disk of the tests that crash at every step.
pub fn crash_only_disk(seed: u64) -> SimVfs {
    SimVfs::with_faults(
        seed,
        durlog::vfs::FaultConfig::only(&[
            durlog::vfs::FaultKind::LostUnsyncedPages,
            durlog::vfs::FaultKind::TornWrite,
            durlog::vfs::FaultKind::LostDirEntry,
            durlog::vfs::FaultKind::UnsyncedSizeChange,
        ]),
    )
}

/// A fixed clock, so records are byte-for-byte predictable.
pub fn clock(at: i64) -> Options {
    Options {
        now: Some(Arc::new(move || at)),
        ..Options::default()
    }
}

/// How long a test that runs threads or processes may take (see
/// [`within`]). The slowest of them, the 20 kills of
/// `killed_while_preparing_keeps_every_printed_version`, take about 1 s,
/// and the 32-thread tests 0.2 s; a minute leaves room for a loaded
/// machine.
pub const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Runs `body` on a thread of its own and returns what it returns, or
/// fails the test, naming `name` and `limit`, if it has not finished within
/// `limit`. `cargo test` has no time limit per test: a test whose threads
/// deadlock would hang the run, and no line would say which test it was.
/// On a timeout the hung thread is left behind; the harness ends the
/// process once every test has finished. A panic in `body` is the test's
/// own and goes on unchanged.
pub fn within<T: Send + 'static>(
    name: &str,
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (finished, finished_in_time) = mpsc::channel();
    let body = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = body();
            let _ = finished.send(());
            result
        })
        .expect("spawn the test's thread");
    match finished_in_time.recv_timeout(limit) {
        // Disconnected: the body panicked; join hands over its panic.
        Ok(()) | Err(RecvTimeoutError::Disconnected) => body
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(RecvTimeoutError::Timeout) => panic!(
            "test {name} did not finish within its limit of {limit:?}: a hang? (its thread is left running)"
        ),
    }
}

/// One operation seen by [`Recorder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Open(String),
    Write {
        file: String,
        offset: u64,
        len: usize,
    },
    SetLen {
        file: String,
        len: u64,
    },
    SyncData(String),
    SyncAll(String),
    SyncDir(String),
    Remove(String),
    Rename {
        from: String,
        to: String,
    },
}

/// A Vfs wrapper that records mutating and syncing operations, with an
/// optional injected failure.
#[derive(Clone, Debug)]
pub struct Recorder {
    inner: Arc<dyn Vfs>,
    state: Arc<Mutex<RecorderState>>,
}

#[derive(Debug, Default)]
struct RecorderState {
    ops: Vec<Op>,
    /// Fail the next write with this many bytes written first.
    fail_next_write: Option<usize>,
    /// File syncs seen so far, and which ones (by that count) fail.
    syncs: usize,
    failing_syncs: Vec<usize>,
    fail_next_set_len: bool,
}

impl Recorder {
    pub fn new(inner: Arc<dyn Vfs>) -> Recorder {
        Recorder {
            inner,
            state: Arc::default(),
        }
    }

    pub fn ops(&self) -> Vec<Op> {
        self.state.lock().unwrap().ops.clone()
    }

    pub fn clear(&self) {
        self.state.lock().unwrap().ops.clear();
    }

    pub fn fail_next_write(&self, after_bytes: usize) {
        self.state.lock().unwrap().fail_next_write = Some(after_bytes);
    }

    pub fn fail_next_sync(&self) {
        self.fail_nth_sync(0);
    }

    /// Fails the `n`-th file sync from now (0: the next one) and no other.
    pub fn fail_nth_sync(&self, n: usize) {
        let mut state = self.state.lock().unwrap();
        let at = state.syncs + n;
        state.failing_syncs.push(at);
    }

    pub fn fail_next_set_len(&self) {
        self.state.lock().unwrap().fail_next_set_len = true;
    }

    fn push(&self, op: Op) {
        self.state.lock().unwrap().ops.push(op);
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Vfs for Recorder {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn VfsFile>> {
        let inner = self.inner.open(path, mode)?;
        if mode == OpenMode::CreateNew {
            self.push(Op::Open(file_name(path)));
        }
        Ok(Box::new(RecordedFile {
            inner,
            name: file_name(path),
            recorder: self.clone(),
        }))
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn lock_file(&self, path: &Path) -> io::Result<Box<dyn durlog::vfs::FileLock>> {
        self.inner.lock_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.push(Op::SyncDir(file_name(dir)));
        self.inner.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.push(Op::Remove(file_name(path)));
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.push(Op::Rename {
            from: file_name(from),
            to: file_name(to),
        });
        self.inner.rename(from, to)
    }
}

#[derive(Debug)]
struct RecordedFile {
    inner: Box<dyn VfsFile>,
    name: String,
    recorder: Recorder,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} failure"))
}

impl VfsFile for RecordedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.recorder.push(Op::Write {
            file: self.name.clone(),
            offset,
            len: buf.len(),
        });
        let fail = self.recorder.state.lock().unwrap().fail_next_write.take();
        if let Some(prefix) = fail {
            self.inner.write_at(&buf[..prefix.min(buf.len())], offset)?;
            return Err(injected("write"));
        }
        self.inner.write_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.recorder.push(Op::SetLen {
            file: self.name.clone(),
            len,
        });
        if std::mem::take(&mut self.recorder.state.lock().unwrap().fail_next_set_len) {
            return Err(injected("truncate"));
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.recorder.push(Op::SyncData(self.name.clone()));
        let fails = {
            let mut state = self.recorder.state.lock().unwrap();
            let this = state.syncs;
            state.syncs += 1;
            state.failing_syncs.contains(&this)
        };
        if fails {
            return Err(injected("fdatasync"));
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.recorder.push(Op::SyncAll(self.name.clone()));
        self.inner.sync_all()
    }
}

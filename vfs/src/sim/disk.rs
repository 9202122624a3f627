//! The state of one simulated disk behind `SimVfs`'s lock: the directory
//! tree, the files, power, the fault RNG, the counters and the trace. Every
//! operation of the `Vfs` and `VfsFile` traits is one method here, which
//! checks power and handle, counts the operation, injects faults and traces.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fault::{Damage, FaultConfig, FaultKind, injected};
use super::file::{FILE_BYTES_MAX, FileData, FileNode, PAGE_BYTES, SECTOR_BYTES, chance};
use super::trace::{Trace, TraceEvent, TraceKind, path_hash};
use crate::{DirEntry, OpenMode};

/// A directory entry: a file, or a subdirectory (whose content lives in
/// `Disk::dirs` under its full path).
#[derive(Clone, Debug)]
enum Node {
    File(Arc<FileNode>),
    Dir,
}

impl Node {
    fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
        match (a, b) {
            (None, None) | (Some(Node::Dir), Some(Node::Dir)) => true,
            (Some(Node::File(a)), Some(Node::File(b))) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// One directory: what listings see, what is on the platter, and the names
/// where the two may differ.
#[derive(Debug, Default)]
struct Dir {
    entries: BTreeMap<OsString, Node>,
    durable: BTreeMap<OsString, Node>,
    pending: BTreeSet<OsString>,
}

impl Dir {
    /// Makes every pending create and remove durable (a directory fsync).
    fn sync(&mut self) {
        for name in std::mem::take(&mut self.pending) {
            match self.entries.get(&name) {
                Some(node) => self.durable.insert(name, node.clone()),
                None => self.durable.remove(&name),
            };
        }
    }
}

/// Lexical normalisation: drops `.` components (so `./a/b` and `a/./b` are
/// `a/b`) and nothing else; `..` stays a literal name.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|component| !matches!(component, Component::CurDir))
        .collect()
}

fn split<'p>(path: &'p Path, what: &str) -> io::Result<(&'p Path, &'p OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {}: the path names no file", path.display()),
        )),
    }
}

fn error(kind: io::ErrorKind, what: &str, path: &Path, detail: &str) -> io::Error {
    io::Error::new(kind, format!("{what} {}: {detail}", path.display()))
}

fn not_found(what: &str, path: &Path) -> io::Error {
    error(
        io::ErrorKind::NotFound,
        what,
        path,
        "no such file or directory",
    )
}

fn eio(what: &str, path: &Path, fault: FaultKind, detail: &str) -> io::Error {
    injected(
        io::ErrorKind::Other,
        fault,
        format!(
            "{what} {}: input/output error (os error 5): {detail}",
            path.display()
        ),
    )
}

fn crash_error(what: &str, path: &Path) -> io::Error {
    injected(
        io::ErrorKind::Other,
        FaultKind::Crash,
        format!(
            "{what} {}: power lost during the call (crash_after_ops)",
            path.display()
        ),
    )
}

/// A file operation's view of the handle it came through.
pub(crate) struct Handle<'h> {
    pub(crate) node: &'h Arc<FileNode>,
    pub(crate) generation: u64,
    pub(crate) writable: bool,
}

/// What a call's trace event and errors name: a path, or the file behind
/// a handle (by its name at the time).
#[derive(Clone, Copy)]
enum Target<'t> {
    Path(&'t Path),
    File(&'t Arc<FileNode>),
}

/// One call of the `Vfs` or `VfsFile` traits, as the trace records it when
/// it fails before doing its work.
#[derive(Clone, Copy)]
struct Call<'c> {
    kind: TraceKind,
    what: &'c str,
    target: Target<'c>,
    offset: u64,
    len: u64,
}

impl Target<'_> {
    /// The name an error gives (a file's, looked up only for an error).
    fn name(self) -> Arc<Path> {
        match self {
            Target::Path(path) => Arc::from(path),
            Target::File(node) => node.path(),
        }
    }
}

impl<'c> Call<'c> {
    fn on_path(kind: TraceKind, what: &'c str, path: &'c Path) -> Call<'c> {
        let target = Target::Path(path);
        Call {
            kind,
            what,
            target,
            offset: 0,
            len: 0,
        }
    }

    fn on_file(
        kind: TraceKind,
        what: &'c str,
        node: &'c Arc<FileNode>,
        offset: u64,
        len: u64,
    ) -> Call<'c> {
        let target = Target::File(node);
        Call {
            kind,
            what,
            target,
            offset,
            len,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Disk {
    rng: ChaCha8Rng,
    faults: FaultConfig,
    weights: [f64; FaultKind::COUNT],
    dirs: BTreeMap<PathBuf, Dir>,
    /// Files a crash may change (dirty or dropped pages, unsynced size), by
    /// creation order. A crash visits only these.
    dirty_files: BTreeMap<u64, Arc<FileNode>>,
    /// Directories with pending creates or removes.
    dirty_dirs: BTreeSet<PathBuf>,
    next_file_id: u64,
    /// Bumped at every power loss; a handle opened under another generation
    /// is dead.
    generation: u64,
    halted: bool,
    op_count: u64,
    crash_at_op: Option<u64>,
    misdirected_done: bool,
    /// With the file each hit: `damage()` names it by its path then, so a
    /// rename after the damage is followed. Weak, so a removed file's
    /// content is not kept alive for this.
    damage: Vec<(Damage, Weak<FileNode>)>,
    fault_counts: BTreeMap<FaultKind, u64>,
    trace: Trace,
    /// The path of events that have none (crash, reboot).
    no_path: Arc<Path>,
}

impl Disk {
    pub(crate) fn new(seed: u64, faults: FaultConfig) -> Disk {
        let mut dirs = BTreeMap::new();
        // The two roots: absolute paths hang off "/", relative ones off "".
        dirs.insert(PathBuf::from("/"), Dir::default());
        dirs.insert(PathBuf::new(), Dir::default());
        Disk {
            rng: ChaCha8Rng::seed_from_u64(seed),
            weights: faults.weight_table(),
            faults,
            dirs,
            dirty_files: BTreeMap::new(),
            dirty_dirs: BTreeSet::new(),
            next_file_id: 0,
            generation: 0,
            halted: false,
            op_count: 0,
            crash_at_op: None,
            misdirected_done: false,
            damage: Vec::new(),
            fault_counts: BTreeMap::new(),
            trace: Trace::new(),
            no_path: Arc::from(Path::new("")),
        }
    }

    // ----- power, counting, faults, tracing -----

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn is_halted(&self) -> bool {
        self.halted
    }

    pub(crate) fn op_count(&self) -> u64 {
        self.op_count
    }

    pub(crate) fn crash_after_ops(&mut self, n: u64) {
        self.crash_at_op = (n > 0).then(|| self.op_count + n);
    }

    pub(crate) fn faults(&self) -> FaultConfig {
        self.faults.clone()
    }

    pub(crate) fn set_faults(&mut self, faults: FaultConfig) {
        self.weights = faults.weight_table();
        self.faults = faults;
    }

    /// Runs a counted call (one that mutates or syncs): counts it, then
    /// runs `effect`, which is told whether the armed crash fires during
    /// this call. What `effect` leaves in the cache stays there either way.
    /// If the crash fires, the call is traced as failed, power is lost (the
    /// crash resolves what `effect` did like any other unsynced change) and
    /// the crash error is returned instead of `effect`'s result.
    fn counted<T>(
        &mut self,
        call: Call<'_>,
        effect: impl FnOnce(&mut Disk, bool) -> T,
    ) -> io::Result<T> {
        self.op_count += 1;
        let crashing = self.crash_at_op == Some(self.op_count);
        if crashing {
            self.crash_at_op = None;
        }
        let value = effect(self, crashing);
        if !crashing {
            return Ok(value);
        }
        self.trace_call(call, false);
        self.power_loss();
        // A file is named as the crash left it.
        Err(crash_error(call.what, &call.target.name()))
    }

    /// Draws whether `kind` fires now. Draws nothing when it is off, so a
    /// fault-free run never touches the RNG.
    fn fires(&mut self, kind: FaultKind) -> bool {
        let weight = self.weights[kind.index()];
        weight > 0.0 && chance(&mut self.rng, weight)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.rng.random_range(0..bound)
    }

    fn coin(&mut self) -> bool {
        self.rng.next_u64() & 1 == 1
    }

    fn count_fault(&mut self, kind: FaultKind) {
        *self.fault_counts.entry(kind).or_insert(0) += 1;
    }

    fn record(
        &mut self,
        kind: TraceKind,
        path: &Arc<Path>,
        hash: u64,
        offset: u64,
        len: u64,
        ok: bool,
    ) {
        self.trace.record(kind, path, hash, offset, len, ok);
    }

    /// Traces an event on a path that has no precomputed hash.
    fn record_path(&mut self, kind: TraceKind, path: &Path, offset: u64, len: u64, ok: bool) {
        let hash = path_hash(path);
        let path: Arc<Path> = if self.trace.recording {
            Arc::from(path)
        } else {
            Arc::clone(&self.no_path)
        };
        self.trace.record(kind, &path, hash, offset, len, ok);
    }

    fn record_file(
        &mut self,
        kind: TraceKind,
        node: &Arc<FileNode>,
        offset: u64,
        len: u64,
        ok: bool,
    ) {
        let hash = node.path_hash();
        if self.trace.recording {
            node.with_path(|path| self.trace.record(kind, path, hash, offset, len, ok));
        } else {
            // Only the digest: no lock, no reference count touched.
            self.trace
                .record(kind, &self.no_path, hash, offset, len, ok);
        }
    }

    fn trace_call(&mut self, call: Call<'_>, ok: bool) {
        let Call {
            kind, offset, len, ..
        } = call;
        match call.target {
            Target::Path(path) => self.record_path(kind, path, offset, len, ok),
            Target::File(node) => self.record_file(kind, node, offset, len, ok),
        }
    }

    fn fault_on_file(&mut self, fault: FaultKind, node: &Arc<FileNode>, offset: u64, len: u64) {
        self.count_fault(fault);
        self.record_file(TraceKind::Fault(fault), node, offset, len, true);
    }

    /// Fails (and traces the failed call) if the disk is down.
    fn check_up(&mut self, call: Call<'_>) -> io::Result<()> {
        if self.halted {
            self.trace_call(call, false);
            return Err(injected(
                io::ErrorKind::Other,
                FaultKind::Crash,
                format!(
                    "{} {}: the disk is down (halted, not rebooted)",
                    call.what,
                    call.target.name().display()
                ),
            ));
        }
        Ok(())
    }

    /// The error for an operation through `handle` if the disk is down or
    /// the handle died in a crash.
    fn handle_error(&self, what: &str, handle: &Handle<'_>) -> Option<io::Error> {
        let detail = if self.halted {
            "the disk is down (halted, not rebooted)"
        } else if handle.generation != self.generation {
            "the handle died in a crash; open the file again"
        } else {
            return None;
        };
        Some(injected(
            io::ErrorKind::Other,
            FaultKind::Crash,
            format!("{what} {}: {detail}", handle.node.path().display()),
        ))
    }

    /// Fails (and traces the failed call) if the disk is down or the
    /// handle dead.
    fn check_handle(&mut self, call: Call<'_>, handle: &Handle<'_>) -> io::Result<()> {
        match self.handle_error(call.what, handle) {
            None => Ok(()),
            Some(error) => {
                self.trace_call(call, false);
                Err(error)
            }
        }
    }

    fn note_dirty_file(&mut self, node: &Arc<FileNode>, data: &mut FileData) {
        if !data.in_dirty_files {
            data.in_dirty_files = true;
            self.dirty_files.insert(node.id, Arc::clone(node));
        }
    }

    /// Power is lost: resolves the page cache per the fault model, kills
    /// every handle, and leaves the disk down.
    pub(crate) fn power_loss(&mut self) {
        if self.halted {
            return;
        }
        self.halted = true;
        self.generation += 1;
        self.count_fault(FaultKind::Crash);
        let no_path = Arc::clone(&self.no_path);
        self.record(TraceKind::Crash, &no_path, 0, 0, 0, true);
        self.resolve_dirs();
        self.resolve_files();
    }

    fn resolve_dirs(&mut self) {
        let weight = self.weights[FaultKind::LostDirEntry.index()];
        for dir_path in std::mem::take(&mut self.dirty_dirs) {
            let mut dir = self.dirs.remove(&dir_path).expect("dirty dir exists");
            for name in std::mem::take(&mut dir.pending) {
                let current = dir.entries.get(&name).cloned();
                if Node::same(current.as_ref(), dir.durable.get(&name)) {
                    continue;
                }
                if weight > 0.0 && chance(&mut self.rng, weight) {
                    self.count_fault(FaultKind::LostDirEntry);
                    let created = u64::from(current.is_some());
                    self.record_path(
                        TraceKind::Fault(FaultKind::LostDirEntry),
                        &dir_path.join(&name),
                        0,
                        created,
                        true,
                    );
                    match current {
                        Some(node) => dir.durable.insert(name, node),
                        None => dir.durable.remove(&name),
                    };
                } else {
                    // The visible change is undone: the files involved
                    // learn which names they are visible under now.
                    let full: Arc<Path> = Arc::from(dir_path.join(&name));
                    if let Some(Node::File(node)) = &current {
                        node.unlink(&full);
                    }
                    match dir.durable.get(&name) {
                        Some(node) => {
                            if let Node::File(file) = node {
                                file.link(Arc::clone(&full), false);
                            }
                            dir.entries.insert(name, node.clone())
                        }
                        None => dir.entries.remove(&name),
                    };
                }
            }
            self.dirs.insert(dir_path, dir);
        }
    }

    fn resolve_files(&mut self) {
        let page_weight = self.weights[FaultKind::LostUnsyncedPages.index()];
        let size_weight = self.weights[FaultKind::UnsyncedSizeChange.index()];
        let mut outcomes = Vec::new();
        for node in std::mem::take(&mut self.dirty_files).into_values() {
            let mut data = node.lock();
            data.resolve_crash(&mut self.rng, page_weight, size_weight, &mut outcomes);
            data.in_dirty_files = false;
            drop(data);
            for outcome in outcomes.drain(..) {
                self.fault_on_file(outcome.fault, &node, outcome.offset, outcome.len);
            }
        }
    }

    pub(crate) fn reboot(&mut self) {
        if self.halted {
            self.halted = false;
            let no_path = Arc::clone(&self.no_path);
            self.record(TraceKind::Reboot, &no_path, 0, 0, 0, true);
        }
    }

    // ----- directory operations -----

    fn lookup(&self, path: &Path) -> Option<&Node> {
        let (parent, name) = split(path, "").ok()?;
        self.dirs.get(parent)?.entries.get(name)
    }

    pub(crate) fn open(&mut self, path: &Path, mode: OpenMode) -> io::Result<Arc<FileNode>> {
        let path = normalize(path);
        let kind = match mode {
            OpenMode::CreateNew => TraceKind::Create,
            OpenMode::ReadOnly | OpenMode::ReadWrite => TraceKind::Open,
        };
        let call = Call::on_path(kind, "open", &path);
        self.check_up(call)?;
        let result = match mode {
            // The create may reach the directory cache before power fails:
            // the crash decides its fate like any other unsynced create.
            OpenMode::CreateNew => {
                let call = Call::on_path(kind, "create", &path);
                self.counted(call, |disk, _| disk.create_file(&path))?
            }
            OpenMode::ReadOnly | OpenMode::ReadWrite => self.existing_file(&path),
        };
        self.trace_call(call, result.is_ok());
        result
    }

    fn create_file(&mut self, path: &Path) -> io::Result<Arc<FileNode>> {
        let (parent, name) = split(path, "create")?;
        let Some(dir) = self.dirs.get_mut(parent) else {
            return Err(error(
                io::ErrorKind::NotFound,
                "create",
                path,
                "the parent directory does not exist",
            ));
        };
        if dir.entries.contains_key(name) {
            return Err(error(
                io::ErrorKind::AlreadyExists,
                "create",
                path,
                "the path already exists",
            ));
        }
        let node = Arc::new(FileNode::new(
            self.next_file_id,
            Arc::from(path),
            FileData::default(),
        ));
        self.next_file_id += 1;
        dir.entries
            .insert(name.to_owned(), Node::File(Arc::clone(&node)));
        dir.pending.insert(name.to_owned());
        self.dirty_dirs.insert(parent.to_path_buf());
        Ok(node)
    }

    fn existing_file(&self, path: &Path) -> io::Result<Arc<FileNode>> {
        match self.lookup(path) {
            Some(Node::File(node)) => Ok(Arc::clone(node)),
            Some(Node::Dir) => Err(error(
                io::ErrorKind::IsADirectory,
                "open",
                path,
                "is a directory",
            )),
            None => Err(not_found("open", path)),
        }
    }

    pub(crate) fn list_dir(&mut self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let dir = normalize(dir);
        self.check_up(Call::on_path(TraceKind::ListDir, "list", &dir))?;
        let result = match self.dirs.get(&dir) {
            Some(node) => {
                let mut entries: Vec<DirEntry> = node
                    .entries
                    .iter()
                    .map(|(name, node)| DirEntry {
                        name: name.to_string_lossy().into_owned(),
                        is_dir: matches!(node, Node::Dir),
                    })
                    .collect();
                entries.sort();
                Ok(entries)
            }
            None => Err(self.not_a_dir("list", &dir)),
        };
        let count = result.as_ref().map_or(0, |entries| entries.len() as u64);
        self.record_path(TraceKind::ListDir, &dir, 0, count, result.is_ok());
        result
    }

    fn not_a_dir(&self, what: &str, path: &Path) -> io::Error {
        match self.lookup(path) {
            Some(_) => error(io::ErrorKind::NotADirectory, what, path, "not a directory"),
            None => not_found(what, path),
        }
    }

    pub(crate) fn create_dir_all(&mut self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let call = Call::on_path(TraceKind::CreateDir, "create directory", &dir);
        self.check_up(call)?;
        self.counted(call, |_, _| ())?;
        let result = self.create_dirs(&dir);
        self.trace_call(call, result.is_ok());
        result
    }

    /// Creates `dir` and its missing ancestors, each made durable at once
    /// together with everything else pending in its parent (PosixVfs syncs
    /// the parent after each level, which does exactly that).
    fn create_dirs(&mut self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains_key(dir) {
            return Ok(());
        }
        let (parent, name) = split(dir, "create directory")?;
        self.create_dirs(parent)?;
        let parent_dir = self.dirs.get_mut(parent).expect("parent was just created");
        if parent_dir.entries.contains_key(name) {
            return Err(error(
                io::ErrorKind::AlreadyExists,
                "create directory",
                dir,
                "a file exists at this path",
            ));
        }
        parent_dir.entries.insert(name.to_owned(), Node::Dir);
        parent_dir.pending.insert(name.to_owned());
        parent_dir.sync();
        self.dirty_dirs.remove(parent);
        self.dirs.insert(dir.to_path_buf(), Dir::default());
        Ok(())
    }

    pub(crate) fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let call = Call::on_path(TraceKind::SyncDir, "sync directory", &dir);
        self.check_up(call)?;
        self.counted(call, |_, _| ())?;
        if !self.dirs.contains_key(&dir) {
            let error = self.not_a_dir("sync directory", &dir);
            self.trace_call(call, false);
            return Err(error);
        }
        if self.fires(FaultKind::FailedFsync) {
            // Nothing of the directory reaches the platter; entries stay
            // pending, so a later successful sync_dir makes them durable.
            self.count_fault(FaultKind::FailedFsync);
            self.record_path(TraceKind::Fault(FaultKind::FailedFsync), &dir, 0, 0, true);
            self.trace_call(call, false);
            return Err(eio(
                "sync directory",
                &dir,
                FaultKind::FailedFsync,
                "fsync failed",
            ));
        }
        self.dirs.get_mut(&dir).expect("checked above").sync();
        self.dirty_dirs.remove(&dir);
        self.trace_call(call, true);
        Ok(())
    }

    pub(crate) fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        let path = normalize(path);
        let call = Call::on_path(TraceKind::Remove, "remove", &path);
        self.check_up(call)?;
        let result = self.counted(call, |disk, _| disk.unlink(&path))?;
        self.trace_call(call, result.is_ok());
        result
    }

    fn unlink(&mut self, path: &Path) -> io::Result<()> {
        let node = match self.lookup(path) {
            Some(Node::File(node)) => Arc::clone(node),
            Some(Node::Dir) => {
                return Err(error(
                    io::ErrorKind::IsADirectory,
                    "remove",
                    path,
                    "is a directory",
                ));
            }
            None => return Err(not_found("remove", path)),
        };
        let (parent, name) = split(path, "remove")?;
        let dir = self.dirs.get_mut(parent).expect("lookup found the parent");
        dir.entries.remove(name);
        dir.pending.insert(name.to_owned());
        self.dirty_dirs.insert(parent.to_path_buf());
        node.unlink(path);
        Ok(())
    }

    pub(crate) fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let from = normalize(from);
        let to = normalize(to);
        let what = format!("rename {} to", from.display());
        // The event names `to`; the source enters the digest here.
        self.trace.mix_in(path_hash(&from));
        let call = Call::on_path(TraceKind::Rename, &what, &to);
        self.check_up(call)?;
        // The rename may reach the directory cache before power fails: the
        // crash decides the fate of each of its two names like any other
        // unsynced create or remove.
        let result = self.counted(call, |disk, _| disk.move_entry(&what, &from, &to))?;
        let replaced = result.as_ref().map_or(0, |&replaced| u64::from(replaced));
        self.record_path(TraceKind::Rename, &to, 0, replaced, result.is_ok());
        result.map(|_| ())
    }

    /// Moves the file at `from` to `to` in the directory cache, replacing a
    /// file at `to`; true if it replaced one. Both names become pending, so
    /// at a crash each independently gets its durable or its visible entry.
    fn move_entry(&mut self, what: &str, from: &Path, to: &Path) -> io::Result<bool> {
        let node = match self.lookup(from) {
            Some(Node::File(node)) => Arc::clone(node),
            Some(Node::Dir) => {
                let detail = "the source is a directory (only files are renamed)";
                return Err(error(io::ErrorKind::IsADirectory, what, to, detail));
            }
            None => {
                let detail = "the source does not exist";
                return Err(error(io::ErrorKind::NotFound, what, to, detail));
            }
        };
        let (to_parent, to_name) = split(to, what)?;
        let Some(to_dir) = self.dirs.get(to_parent) else {
            let detail = "the target's parent directory does not exist";
            return Err(error(io::ErrorKind::NotFound, what, to, detail));
        };
        let replaced = match to_dir.entries.get(to_name) {
            Some(Node::Dir) => {
                let detail = "the target is a directory";
                return Err(error(io::ErrorKind::IsADirectory, what, to, detail));
            }
            // Two names of one file (or one name twice): POSIX does nothing.
            Some(Node::File(existing)) if Arc::ptr_eq(existing, &node) => return Ok(false),
            Some(Node::File(existing)) => Some(Arc::clone(existing)),
            None => None,
        };
        let (from_parent, from_name) = split(from, what)?;
        let from_dir = self.dirs.get_mut(from_parent).expect("lookup found it");
        from_dir.entries.remove(from_name);
        from_dir.pending.insert(from_name.to_owned());
        self.dirty_dirs.insert(from_parent.to_path_buf());
        let to_dir = self.dirs.get_mut(to_parent).expect("checked above");
        to_dir
            .entries
            .insert(to_name.to_owned(), Node::File(Arc::clone(&node)));
        to_dir.pending.insert(to_name.to_owned());
        self.dirty_dirs.insert(to_parent.to_path_buf());
        if let Some(existing) = &replaced {
            existing.unlink(to);
        }
        node.unlink(from);
        node.link(Arc::from(to), true);
        Ok(replaced.is_some())
    }

    // ----- file operations -----

    pub(crate) fn read(
        &mut self,
        handle: &Handle<'_>,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        let call = Call::on_file(
            TraceKind::Read,
            "read",
            handle.node,
            offset,
            buf.len() as u64,
        );
        self.check_handle(call, handle)?;
        let count = handle.node.lock().read(buf, offset);
        if count > 0 && self.fires(FaultKind::BitFlipOnRead) {
            let bit = self.below(count as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.fault_on_file(FaultKind::BitFlipOnRead, handle.node, offset + bit / 8, 1);
        }
        self.record_file(TraceKind::Read, handle.node, offset, count as u64, true);
        Ok(count)
    }

    /// Not traced: asking the size is no event of its own.
    pub(crate) fn len(&self, handle: &Handle<'_>) -> io::Result<u64> {
        match self.handle_error("len", handle) {
            None => Ok(handle.node.lock().len()),
            Some(error) => Err(error),
        }
    }

    /// Checks what every mutating file operation checks, after counting it:
    /// the handle may write, and the new end stays within the size limit.
    fn check_mutation(&self, what: &str, handle: &Handle<'_>, end: Option<u64>) -> io::Result<()> {
        // The path is looked up only for an error: this runs on every write.
        if !handle.writable {
            return Err(error(
                io::ErrorKind::PermissionDenied,
                what,
                &handle.node.path(),
                "the file was opened read-only",
            ));
        }
        match end {
            Some(end) if end <= FILE_BYTES_MAX => Ok(()),
            _ => Err(error(
                io::ErrorKind::FileTooLarge,
                what,
                &handle.node.path(),
                &format!("the file would pass the simulator's limit of {FILE_BYTES_MAX} bytes"),
            )),
        }
    }

    pub(crate) fn write(&mut self, handle: &Handle<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        let call = Call::on_file(TraceKind::Write, "write", handle.node, offset, len);
        self.check_handle(call, handle)?;
        let checked = self.counted(call, |disk, crashing| {
            let checked = disk.check_mutation("write", handle, offset.checked_add(len));
            if crashing && checked.is_ok() {
                disk.tear_write(handle.node, buf, offset);
            }
            checked
        })?;
        if let Err(error) = checked {
            self.trace_call(call, false);
            return Err(error);
        }
        if let Some(error) = self.failed_write(handle.node, buf, offset) {
            self.trace_call(call, false);
            return Err(error);
        }
        if len > 0 && !self.misdirected_done && self.fires(FaultKind::MisdirectedWrite) {
            self.misdirect(handle.node, buf, offset);
        } else if len > 0 {
            let mut data = handle.node.lock();
            data.write(buf, offset);
            self.note_dirty_file(handle.node, &mut data);
        }
        self.trace_call(call, true);
        Ok(())
    }

    /// ENOSPC or a short write, if either fires: writes a prefix and returns
    /// the error.
    fn failed_write(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) -> Option<io::Error> {
        let len = buf.len() as u64;
        let (fault, prefix, error) = if self.fires(FaultKind::NoSpace) {
            let prefix = if len == 0 || self.coin() {
                0
            } else {
                self.below(len)
            };
            let error = injected(
                io::ErrorKind::StorageFull,
                FaultKind::NoSpace,
                format!(
                    "write {} at offset {offset}: no space left on device (os error 28) after {prefix} of {len} bytes",
                    node.path().display()
                ),
            );
            (FaultKind::NoSpace, prefix, error)
        } else if len > 0 && self.fires(FaultKind::ShortWrite) {
            let prefix = self.below(len);
            let detail = format!("short write: {prefix} of {len} bytes at offset {offset}");
            let error = eio("write", &node.path(), FaultKind::ShortWrite, &detail);
            (FaultKind::ShortWrite, prefix, error)
        } else {
            return None;
        };
        let mut data = node.lock();
        if prefix > 0 {
            data.write(&buf[..prefix as usize], offset);
            self.note_dirty_file(node, &mut data);
        }
        drop(data);
        self.fault_on_file(fault, node, offset, prefix);
        Some(error)
    }

    /// The crash fires during this write: with TornWrite, a prefix (cut at
    /// a sector boundary or any byte, maybe followed by a garbage sector
    /// tail) reaches the cache; otherwise nothing does.
    fn tear_write(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) {
        let len = buf.len() as u64;
        if len == 0 || !self.fires(FaultKind::TornWrite) {
            return;
        }
        let end = offset + len;
        let cut = if self.coin() {
            // Candidates: the start, every sector boundary inside, the end.
            let first_boundary = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
            let inner = if first_boundary < end {
                (end - 1 - first_boundary) / SECTOR_BYTES + 1
            } else {
                0
            };
            match self.below(inner + 2) {
                0 => offset,
                choice if choice == inner + 1 => end,
                choice => first_boundary + (choice - 1) * SECTOR_BYTES,
            }
        } else {
            offset + self.below(len + 1)
        };
        let prefix = cut - offset;
        let mut torn = buf[..prefix as usize].to_vec();
        if prefix < len && self.coin() {
            // The sector being written when power went holds garbage.
            let sector_end = ((cut / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
            let mut garbage = vec![0u8; (sector_end - cut) as usize];
            self.rng.fill_bytes(&mut garbage);
            torn.extend_from_slice(&garbage);
        }
        let mut data = node.lock();
        data.write(&torn, offset);
        if !torn.is_empty() {
            self.note_dirty_file(node, &mut data);
        }
        drop(data);
        self.fault_on_file(FaultKind::TornWrite, node, offset, torn.len() as u64);
    }

    /// The whole write lands at another sector-aligned offset inside the
    /// file's new size; the size grows as if it had landed right.
    fn misdirect(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) {
        let len = buf.len() as u64;
        let mut data = node.lock();
        let size = data.len().max(offset + len);
        let slots = (size - len) / SECTOR_BYTES + 1;
        let mut landing = self.below(slots) * SECTOR_BYTES;
        if landing == offset {
            landing = if slots > 1 {
                (landing / SECTOR_BYTES + 1) % slots * SECTOR_BYTES
            } else {
                // Nowhere else to go: the write lands where it should.
                data.write(buf, offset);
                self.note_dirty_file(node, &mut data);
                return;
            };
        }
        data.set_len(size);
        data.write(buf, landing);
        self.note_dirty_file(node, &mut data);
        drop(data);
        self.misdirected_done = true;
        let damage = Damage {
            path: node.path().to_path_buf(),
            offset: landing,
            len,
            intended_offset: Some(offset),
            bit: None,
            kind: FaultKind::MisdirectedWrite,
        };
        self.damage.push((damage, Arc::downgrade(node)));
        self.fault_on_file(FaultKind::MisdirectedWrite, node, landing, len);
    }

    pub(crate) fn set_len(&mut self, handle: &Handle<'_>, len: u64) -> io::Result<()> {
        let call = Call::on_file(TraceKind::SetLen, "set_len", handle.node, 0, len);
        self.check_handle(call, handle)?;
        let checked = self.counted(call, |disk, _| {
            let checked = disk.check_mutation("set_len", handle, Some(len));
            if checked.is_ok() {
                // Applied even when the crash fires now: the size change is
                // in the cache and the crash decides whether it survives.
                let mut data = handle.node.lock();
                if data.len() != len {
                    data.set_len(len);
                    disk.note_dirty_file(handle.node, &mut data);
                }
            }
            checked
        })?;
        self.trace_call(call, checked.is_ok());
        checked
    }

    pub(crate) fn sync(&mut self, handle: &Handle<'_>, kind: TraceKind) -> io::Result<()> {
        let what = kind.name();
        let call = Call::on_file(kind, what, handle.node, 0, 0);
        self.check_handle(call, handle)?;
        self.counted(call, |_, _| ())?;
        if self.fires(FaultKind::FailedFsync) {
            let dropped = if self.coin() {
                handle.node.lock().drop_dirty_pages() as u64
            } else {
                0
            };
            self.fault_on_file(FaultKind::FailedFsync, handle.node, 0, dropped * PAGE_BYTES);
            self.trace_call(call, false);
            let detail = format!("fsync failed, {dropped} dirty pages dropped unwritten");
            return Err(eio(
                what,
                &handle.node.path(),
                FaultKind::FailedFsync,
                &detail,
            ));
        }
        let mut data = handle.node.lock();
        data.sync();
        if data.in_dirty_files && data.is_clean() {
            data.in_dirty_files = false;
            self.dirty_files.remove(&handle.node.id);
        }
        drop(data);
        self.trace_call(call, true);
        Ok(())
    }

    // ----- faults at rest, inspection and setup (not counted) -----

    fn visible_file(&self, path: &Path) -> Option<&Arc<FileNode>> {
        match self.lookup(&normalize(path)) {
            Some(Node::File(node)) => Some(node),
            _ => None,
        }
    }

    pub(crate) fn flip_bit_at_rest(&mut self, path: &Path, bit: u64) -> io::Result<Damage> {
        let normal = normalize(path);
        let Some(node) = self.visible_file(&normal).cloned() else {
            return Err(not_found("flip bit in", &normal));
        };
        let mut data = node.lock();
        let durable_bits = data.durable_bytes().len() as u64 * 8;
        if bit >= durable_bits {
            return Err(error(
                io::ErrorKind::InvalidInput,
                "flip bit in",
                &normal,
                &format!("bit {bit} is beyond the {durable_bits} durable bits"),
            ));
        }
        data.flip_durable_bit(bit);
        drop(data);
        let damage = Damage {
            // The name the file reports, which is `normal` unless the file
            // has two names (see `FileNode`): as `damage()` will say.
            path: node.path().to_path_buf(),
            offset: bit / 8,
            len: 1,
            intended_offset: None,
            bit: Some((bit % 8) as u8),
            kind: FaultKind::BitFlipAtRest,
        };
        self.damage.push((damage.clone(), Arc::downgrade(&node)));
        self.fault_on_file(FaultKind::BitFlipAtRest, &node, bit / 8, 1);
        Ok(damage)
    }

    pub(crate) fn flip_random_bit_at_rest(&mut self) -> Option<Damage> {
        let candidates: Vec<PathBuf> = self
            .files()
            .into_iter()
            .filter(|path| {
                self.visible_file(path)
                    .is_some_and(|node| !node.lock().durable_bytes().is_empty())
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let path = candidates[self.below(candidates.len() as u64) as usize].clone();
        let durable_bits = self.visible_file(&path)?.lock().durable_bytes().len() as u64 * 8;
        let bit = self.below(durable_bits);
        self.flip_bit_at_rest(&path, bit).ok()
    }

    pub(crate) fn damage(&self) -> Vec<Damage> {
        self.damage
            .iter()
            .map(|(damage, node)| match node.upgrade() {
                Some(node) => Damage {
                    path: node.path().to_path_buf(),
                    ..damage.clone()
                },
                None => damage.clone(),
            })
            .collect()
    }

    pub(crate) fn fault_counts(&self) -> BTreeMap<FaultKind, u64> {
        self.fault_counts.clone()
    }

    pub(crate) fn trace(&self) -> Vec<TraceEvent> {
        self.trace.events.clone()
    }

    pub(crate) fn clear_trace(&mut self) {
        self.trace.events.clear();
    }

    pub(crate) fn trace_digest(&self) -> u64 {
        self.trace.digest
    }

    pub(crate) fn set_trace_recording(&mut self, on: bool) {
        self.trace.recording = on;
    }

    pub(crate) fn file_contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.visible_file(path)
            .map(|node| node.lock().cached().to_vec())
    }

    pub(crate) fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let path = normalize(path);
        let (parent, name) = split(&path, "").ok()?;
        match self.dirs.get(parent)?.durable.get(name)? {
            Node::File(node) => Some(node.lock().durable_bytes().to_vec()),
            Node::Dir => None,
        }
    }

    pub(crate) fn put_durable_file(&mut self, path: &Path, bytes: &[u8]) {
        let path = normalize(path);
        let (parent, name) = split(&path, "put_durable_file").expect("a file path");
        self.create_dirs(parent)
            .unwrap_or_else(|error| panic!("put_durable_file: {error}"));
        let node = Arc::new(FileNode::new(
            self.next_file_id,
            Arc::from(path.as_path()),
            FileData::durable(bytes),
        ));
        self.next_file_id += 1;
        let dir = self.dirs.get_mut(parent).expect("created above");
        assert!(
            !matches!(dir.entries.get(name), Some(Node::Dir)),
            "put_durable_file: {} is a directory",
            path.display()
        );
        let old = dir
            .entries
            .insert(name.to_owned(), Node::File(Arc::clone(&node)));
        dir.durable.insert(name.to_owned(), Node::File(node));
        dir.pending.remove(name);
        if let Some(Node::File(old)) = old {
            old.unlink(&path);
        }
    }

    pub(crate) fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .dirs
            .iter()
            .flat_map(|(dir_path, dir)| {
                dir.entries
                    .iter()
                    .filter_map(move |(name, node)| match node {
                        Node::File(_) => Some(dir_path.join(name)),
                        Node::Dir => None,
                    })
            })
            .collect();
        files.sort();
        files
    }

    pub(crate) fn dirty_page_count(&self) -> u64 {
        self.dirty_files
            .values()
            .map(|node| node.lock().dirty_page_count() as u64)
            .sum()
    }
}

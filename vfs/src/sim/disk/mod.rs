//! The state of one simulated disk behind `SimVfs`'s lock: the directory
//! tree, the files, power, the fault RNG, the counters and the trace. Every
//! operation of the `Vfs` and `VfsFile` traits is one method of [`Disk`],
//! which checks power and handle, counts the operation, injects faults and
//! traces.
//!
//! This file holds the state and what every operation shares: power, the
//! count of operations with the crash armed to fire during one of them
//! ([`Disk::counted`]), fault draws, the fault log, tracing and errors. The
//! operations live by what they change: `dirs.rs` names (directories and
//! their entries), `files.rs` file contents, `locks.rs` file locks,
//! `crash.rs` what a power loss resolves, and `inspect.rs` faults at rest,
//! inspection and setup.

mod crash;
mod dirs;
mod files;
mod inspect;
mod locks;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fault::{FaultConfig, FaultKind, injected};
use super::fault_log::{FaultEvent, FaultLog};
use super::file::{FileData, FileNode, chance};
use super::script::{CrashScript, Scripted};
use super::trace::{Trace, TraceKind, path_hash};
use dirs::Dir;
pub(crate) use locks::LockTicket;

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

/// One call of the `Vfs` or `VfsFile` traits, as its trace event and its
/// errors name it.
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
    /// Every directory by its normal path's bytes, looked up in every
    /// operation on a name. Ordered, not hashed: a disk holds a handful of
    /// directories, and a few comparisons of their bytes cost less than
    /// hashing a path with SipHash. Not by `PathBuf`: a path compares
    /// component by component, and these are normal already, so their
    /// bytes name them alike.
    dirs: BTreeMap<OsString, Dir>,
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
    duplicated_done: bool,
    /// Every injected fault; also their count and the damage list.
    fault_log: FaultLog,
    /// Held file locks: the locked file's id to the id of the lock taking
    /// it. By file, not by name, as `flock` locks an inode: a lock file
    /// removed and created again is a new, unlocked file.
    locks: BTreeMap<u64, u64>,
    next_lock_id: u64,
    trace: Trace,
    /// The path of events that have none (crash, reboot).
    no_path: Arc<Path>,
    /// Crash outcomes from a script instead of the RNG (`script.rs`).
    script: Option<Scripted>,
    /// The code under test says it is recovering (for the script).
    recovering: bool,
}

impl Disk {
    pub(crate) fn new(seed: u64, faults: FaultConfig) -> Disk {
        let mut dirs = BTreeMap::new();
        // The two roots: absolute paths hang off "/", relative ones off "".
        dirs.insert(OsString::from("/"), Dir::default());
        dirs.insert(OsString::new(), Dir::default());
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
            duplicated_done: false,
            fault_log: FaultLog::default(),
            locks: BTreeMap::new(),
            next_lock_id: 0,
            trace: Trace::new(),
            no_path: Arc::from(Path::new("")),
            script: None,
            recovering: false,
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

    pub(crate) fn set_crash_script(&mut self, script: Option<CrashScript>) {
        self.script = script.map(Scripted::new);
    }

    pub(crate) fn crash_script(&self) -> Option<CrashScript> {
        self.script.as_ref().map(|scripted| scripted.script.clone())
    }

    pub(crate) fn set_recovering(&mut self, recovering: bool) {
        self.recovering = recovering;
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
        let armed = self.crash_at_op == Some(self.op_count);
        if armed {
            self.crash_at_op = None;
        }
        let (op, recovering) = (self.op_count, self.recovering);
        let crashing = armed
            || (self.script.as_mut())
                .is_some_and(|scripted| scripted.counted(op, call.kind, recovering));
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
    /// fault-free run never touches the RNG. Under a script, only the
    /// scripted failure fires.
    fn fires(&mut self, kind: FaultKind) -> bool {
        if let Some(scripted) = &mut self.script {
            return scripted.fails(kind, self.op_count);
        }
        let weight = self.weights[kind.index()];
        weight > 0.0 && chance(&mut self.rng, weight)
    }

    /// At a power loss: whether an unsynced change of `kind` reaches the
    /// platter, drawn with `weight` (or taken from the script).
    fn crash_keeps(&mut self, kind: FaultKind, weight: f64) -> bool {
        match &mut self.script {
            Some(scripted) => scripted.crash_keeps(kind),
            None => weight > 0.0 && chance(&mut self.rng, weight),
        }
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.rng.random_range(0..bound)
    }

    fn coin(&mut self) -> bool {
        self.rng.next_u64() & 1 == 1
    }

    /// Logs (and so counts) a fault that struck a path, not a file: a
    /// power loss (the empty path), a failed directory sync, a directory
    /// entry a crash decided. Its trace event, if any, is the caller's.
    fn fault_on_path(&mut self, event: FaultEvent, path: &Path) -> usize {
        self.fault_log.record(event, self.op_count, path, None)
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

    /// Logs (and so counts) a fault that struck the file `node`, and traces
    /// it with the bytes it touched.
    fn fault_on_file(&mut self, event: FaultEvent, node: &Arc<FileNode>) -> usize {
        let (offset, len) = (event.offset, event.len);
        self.fault_on_file_traced_as(event, node, offset, len)
    }

    /// As `fault_on_file`, for the faults whose trace event holds other
    /// numbers than the bytes touched (a failed fsync: the bytes dropped;
    /// a size change: both sizes): the trace digest pins what it holds.
    fn fault_on_file_traced_as(
        &mut self,
        event: FaultEvent,
        node: &Arc<FileNode>,
        offset: u64,
        len: u64,
    ) -> usize {
        let kind = event.kind;
        let op = self.op_count;
        let log = &mut self.fault_log;
        let position = node.with_path(|path| log.record(event, op, path, Some(node)));
        self.record_file(TraceKind::Fault(kind), node, offset, len, true);
        position
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
}

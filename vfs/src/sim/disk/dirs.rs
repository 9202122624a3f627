//! Directory state and the operations on names: each directory's visible
//! entries, its durable ones and the names where the two may differ;
//! `open`, `list_dir`, `create_dir_all`, `sync_dir`, `remove_file` and
//! `rename`. A change to a name is visible at once and durable only after
//! `sync_dir` on its directory; `crash.rs` decides what a power loss makes
//! of the names still pending.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::{Call, Disk, eio, error, not_found};
use crate::sim::fault::{FaultKind, injected};
use crate::sim::fault_log::FaultEvent;
use crate::sim::file::{FileData, FileNode};
use crate::sim::trace::{TraceKind, path_hash};
use crate::{DirEntry, OpenMode};

/// A directory entry: a file, or a subdirectory (whose content lives in
/// `Disk::dirs` under its full path).
#[derive(Clone, Debug)]
pub(super) enum Node {
    File(Arc<FileNode>),
    Dir,
}

impl Node {
    pub(super) fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
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
pub(super) struct Dir {
    pub(super) entries: BTreeMap<OsString, Node>,
    pub(super) durable: BTreeMap<OsString, Node>,
    pub(super) pending: BTreeSet<OsString>,
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
/// `a/b`) and nothing else; `..` stays a literal name. A path already in
/// that form (every path the engine builds) is borrowed, not rebuilt: the
/// simulator calls this in every operation on a name.
pub(super) fn normalize(path: &Path) -> Cow<'_, Path> {
    if is_normal(path) {
        debug_assert_eq!(path, rebuilt(path), "is_normal agrees with components()");
        return Cow::Borrowed(path);
    }
    Cow::Owned(rebuilt(path))
}

fn rebuilt(path: &Path) -> PathBuf {
    path.components()
        .filter(|component| !matches!(component, Component::CurDir))
        .collect()
}

/// Whether `components()` leaves `path` as it is, byte for byte: no `.`
/// component, no doubled separator, no separator at the end (but the
/// root's own).
fn is_normal(path: &Path) -> bool {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes == b"/" || bytes.is_empty() {
        return true;
    }
    if bytes.ends_with(b"/") || bytes == b"." || bytes.starts_with(b"./") || bytes.ends_with(b"/.")
    {
        return false;
    }
    // One pass, separator to separator (every name goes through here):
    // no "//" and no "/./".
    let mut rest = bytes;
    while let Some(at) = rest.iter().position(|&byte| byte == b'/') {
        rest = &rest[at + 1..];
        if rest.first() == Some(&b'/') || rest.starts_with(b"./") {
            return false;
        }
    }
    true
}

pub(super) fn split<'p>(path: &'p Path, what: &str) -> io::Result<(&'p Path, &'p OsStr)> {
    if let Some(split) = split_normal(path) {
        debug_assert_eq!(Some(split), path.parent().zip(path.file_name()));
        return Ok(split);
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {}: the path names no file", path.display()),
        )),
    }
}

/// `path.parent()` and `path.file_name()` of a normal path, by its last
/// separator instead of parsing components from the back; `None` where
/// that could differ from them (a last component `..`, no name). On the
/// bytes: a name need not be UTF-8, and checking that it is took a third
/// of this.
fn split_normal(path: &Path) -> Option<(&Path, &OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let (parent, name) = match bytes.iter().rposition(|&byte| byte == b'/') {
        Some(0) => (&b"/"[..], &bytes[1..]),
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (&b""[..], bytes),
    };
    if name.is_empty() || name == b".." || name == b"." {
        return None;
    }
    Some((
        Path::new(OsStr::from_bytes(parent)),
        OsStr::from_bytes(name),
    ))
}

impl Disk {
    pub(super) fn lookup(&self, path: &Path) -> Option<&Node> {
        let (parent, name) = split(path, "").ok()?;
        self.dirs.get(parent.as_os_str())?.entries.get(name)
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
                self.counted(call, |disk, _| disk.create_file("create", &path))?
            }
            OpenMode::ReadOnly | OpenMode::ReadWrite => {
                let found = self.existing_file(&path);
                if found.is_ok() && self.fires(FaultKind::ReadError) {
                    let event = FaultEvent::touching(FaultKind::ReadError, 0, 0);
                    self.fault_on_path(event, &path);
                    Err(injected(
                        io::ErrorKind::Other,
                        FaultKind::ReadError,
                        format!("open of {}: EIO", path.display()),
                    ))
                } else {
                    found
                }
            }
        };
        self.trace_call(call, result.is_ok());
        result
    }

    /// Creates an empty file at `path`: visible at once, durable after
    /// `sync_dir`. `what` names the call in errors.
    pub(super) fn create_file(&mut self, what: &str, path: &Path) -> io::Result<Arc<FileNode>> {
        let (parent, name) = split(path, what)?;
        let Some(dir) = self.dirs.get_mut(parent.as_os_str()) else {
            return Err(error(
                io::ErrorKind::NotFound,
                what,
                path,
                "the parent directory does not exist",
            ));
        };
        if dir.entries.contains_key(name) {
            return Err(error(
                io::ErrorKind::AlreadyExists,
                what,
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
        let result = match self.dirs.get(dir.as_os_str()) {
            Some(node) => {
                let mut entries: Vec<DirEntry> = node
                    .entries
                    .iter()
                    .map(|(name, node)| DirEntry {
                        name: name_text(name).into_owned(),
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
    pub(super) fn create_dirs(&mut self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains_key(dir.as_os_str()) {
            return Ok(());
        }
        let (parent, name) = split(dir, "create directory")?;
        self.create_dirs(parent)?;
        let parent_dir = (self.dirs.get_mut(parent.as_os_str())).expect("parent was just created");
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
        self.dirs.insert(dir.as_os_str().to_owned(), Dir::default());
        Ok(())
    }

    pub(crate) fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let call = Call::on_path(TraceKind::SyncDir, "sync directory", &dir);
        self.check_up(call)?;
        self.counted(call, |_, _| ())?;
        if !self.dirs.contains_key(dir.as_os_str()) {
            let error = self.not_a_dir("sync directory", &dir);
            self.trace_call(call, false);
            return Err(error);
        }
        if self.fires(FaultKind::FailedFsync) {
            // Nothing of the directory reaches the platter; entries stay
            // pending, so a later successful sync_dir makes them durable.
            let event = FaultEvent::touching(FaultKind::FailedFsync, 0, 0);
            self.fault_on_path(event, &dir);
            self.record_path(TraceKind::Fault(FaultKind::FailedFsync), &dir, 0, 0, true);
            self.trace_call(call, false);
            return Err(eio(
                "sync directory",
                &dir,
                FaultKind::FailedFsync,
                "fsync failed",
            ));
        }
        self.dirs
            .get_mut(dir.as_os_str())
            .expect("checked above")
            .sync();
        self.dirty_dirs.remove(dir.as_ref());
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
        let dir = (self.dirs.get_mut(parent.as_os_str())).expect("lookup found the parent");
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
        let Some(to_dir) = self.dirs.get(to_parent.as_os_str()) else {
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
        let from_dir = (self.dirs.get_mut(from_parent.as_os_str())).expect("lookup found it");
        from_dir.entries.remove(from_name);
        from_dir.pending.insert(from_name.to_owned());
        self.dirty_dirs.insert(from_parent.to_path_buf());
        let to_dir = (self.dirs.get_mut(to_parent.as_os_str())).expect("checked above");
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
}

/// A name as text. `to_str` first: its check of valid UTF-8 takes a word
/// at a time, `to_string_lossy`'s a byte (the simulator lists a directory
/// at every reopen and every check of the layout).
pub(crate) fn name_text(name: &std::ffi::OsStr) -> std::borrow::Cow<'_, str> {
    name.to_str()
        .map_or_else(|| name.to_string_lossy(), std::borrow::Cow::Borrowed)
}

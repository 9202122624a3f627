//! `lock_file`: `flock`'s rule inside one simulated disk. A file is locked
//! by at most one guard at a time; dropping the guard releases it, and so
//! does a power loss (`crash.rs`), since the processes that held the locks
//! died with it.
//!
//! Each lock taken gets a new id, and a guard releases its file only while
//! the file is still locked under that id: a guard from before a crash,
//! dropped after another process locked the file again, must not unlock
//! the new holder.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::dirs::{Node, normalize};
use super::{Call, Disk, error};
use crate::sim::file::FileNode;
use crate::sim::trace::TraceKind;

/// What a guard needs to release its lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockTicket {
    pub(crate) file_id: u64,
    pub(crate) lock_id: u64,
}

impl Disk {
    pub(crate) fn lock_file(&mut self, path: &Path) -> io::Result<LockTicket> {
        let path = normalize(path);
        let call = Call::on_path(TraceKind::Lock, "lock", &path);
        self.check_up(call)?;
        // A create may reach the directory cache before power fails, as
        // with `OpenMode::CreateNew`; the lock never outlives the power.
        let found = self.counted(call, |disk, _| disk.lock_target(&path))?;
        let result = found.and_then(|node| self.take_lock(&node, &path));
        self.trace_call(call, result.is_ok());
        result
    }

    /// The file at `path`, created empty if the name is free.
    fn lock_target(&mut self, path: &Path) -> io::Result<Arc<FileNode>> {
        match self.lookup(path) {
            Some(Node::File(node)) => Ok(Arc::clone(node)),
            Some(Node::Dir) => Err(error(
                io::ErrorKind::IsADirectory,
                "lock",
                path,
                "is a directory",
            )),
            None => self.create_file("lock", path),
        }
    }

    fn take_lock(&mut self, node: &Arc<FileNode>, path: &Path) -> io::Result<LockTicket> {
        if self.locks.contains_key(&node.id) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another process or handle", path.display()),
            ));
        }
        let ticket = LockTicket {
            file_id: node.id,
            lock_id: self.next_lock_id,
        };
        self.next_lock_id += 1;
        self.locks.insert(ticket.file_id, ticket.lock_id);
        Ok(ticket)
    }

    /// A guard was dropped. Not counted and not traced: dropping is no call
    /// a crash can interrupt, and nothing on the disk changes.
    pub(crate) fn unlock(&mut self, ticket: LockTicket) {
        if self.locks.get(&ticket.file_id) == Some(&ticket.lock_id) {
            self.locks.remove(&ticket.file_id);
        }
    }
}

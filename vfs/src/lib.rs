//! The file-system boundary of durlog.
//!
//! The engine performs every file operation through [`Vfs`] and [`VfsFile`],
//! never through `std::fs`, so the same code runs on a real disk
//! ([`PosixVfs`]) and on a simulated one that injects the faults of real
//! disks and kernels (`SimVfs`, with the `sim` feature; the `sim` module's
//! documentation is its fault model, kind by kind).
//!
//! The trait is deliberately small: it holds exactly the operations a
//! segmented log needs, and each method states what is durable when it
//! returns. Nothing written through [`VfsFile::write_at`] is durable until a
//! later [`VfsFile::sync_data`] (or [`VfsFile::sync_all`]) on the same file
//! returns `Ok`; a create, a removal or a rename of a directory entry is
//! durable only after [`Vfs::sync_dir`] on its directory (for a rename, on
//! the directories of both names) returns `Ok`.
//!
//! [`Vfs::lock_file`] lets one writer claim a directory, because two
//! processes appending to one log would interleave records and lose
//! acknowledged ones: an exclusive, non-blocking lock on a file, released
//! when its [`FileLock`] guard is dropped or its process dies.
//!
//! [`fs::Fs`] wraps any [`Vfs`] in a facade shaped like `std::fs` (`open`,
//! `create`, `read`, `write`, `rename`, ... and a `File` with a cursor that
//! implements `Read`, `Write` and `Seek`), so code written for `std::fs`
//! runs on the simulated disk with few changes, under the same durability
//! contract.

use std::fmt;
use std::io;
use std::path::Path;

pub mod fs;
pub mod marks;
mod posix;
/// The simulated disk: its model of a page cache, power loss and every
/// fault it injects (the module's documentation), and its types, which the
/// crate root re-exports.
#[cfg(feature = "sim")]
pub mod sim;

pub use posix::PosixVfs;
#[cfg(feature = "sim")]
pub use sim::{
    CrashScript, Damage, Decision, FILE_BYTES_MAX, FaultConfig, FaultEvent, FaultKind,
    ParseFaultError, SimVfs, TraceEvent, TraceKind, injected_fault,
};

/// The unit in which the page cache writes a file back, and in which a
/// power loss keeps or loses unsynced data: a 4 KiB page of a file reaches
/// the disk whole or not at all. The simulated disk injects its faults
/// by it, and recovery reasons by it (FORMAT.md, "Assumptions about the
/// medium"): one definition for both.
pub const PAGE_BYTES: u64 = 4096;

/// The unit a torn write tears in: a write cut inside a sector leaves
/// garbage at most to that sector's end, and the old bytes after it.
pub const SECTOR_BYTES: u64 = 512;

/// How [`Vfs::open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// Open an existing file for reading only; writes fail.
    ReadOnly,
    /// Open an existing file for reading and writing.
    ReadWrite,
    /// Create a new file for reading and writing; fails with
    /// `AlreadyExists` if the path exists. The new directory entry is not
    /// durable until [`Vfs::sync_dir`] on the parent.
    CreateNew,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirEntry {
    /// The entry's file name (lossily converted to UTF-8 on POSIX).
    pub name: String,
    /// True for a directory, false for a regular file (or anything else).
    pub is_dir: bool,
}

/// A file system: the operations on paths.
///
/// Implementations are cheap handles (`Clone` where they can be) and usable
/// from many threads.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Opens `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn VfsFile>>;

    /// Lists the entries of directory `dir`, sorted by name.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;

    /// Creates `dir` and any missing ancestors, and makes each entry it
    /// created durable (by syncing the directory that holds it) before
    /// returning. Succeeds without effect if `dir` is already a directory.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Makes the entries of directory `dir` durable: every create, remove
    /// and rename in it that happened before the call survives a crash
    /// after it.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Removes the file at `path`. The removal is durable only after
    /// [`Vfs::sync_dir`] on its directory.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Renames the file `from` to `to`, replacing `to` if it is a file, with
    /// POSIX `rename` semantics: handles open on `from` stay valid and now
    /// refer to `to`; handles open on a replaced `to` keep the old file;
    /// renaming a name onto itself (or onto another name of the same file)
    /// does nothing. Fails if `from` does not exist or either path is a
    /// directory (directories are never renamed); the error names both
    /// paths.
    ///
    /// The change of both entries is durable only after [`Vfs::sync_dir`]
    /// on their directory (both directories if they differ). After a crash
    /// before that, each of the two names independently may show its old or
    /// its new state: `from` only, `to` only, both (one file under two
    /// names) or neither. `SimVfs` models exactly that; on ext4 a rename is
    /// atomic, which is one of those outcomes.
    ///
    /// The default body fails with `Unsupported`, so implementations written
    /// before this method keep compiling.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rename {} to {}: this Vfs cannot rename",
                from.display(),
                to.display()
            ),
        ))
    }

    /// Creates the file at `path` if it is missing and takes an exclusive
    /// lock on it without waiting: fails with `io::ErrorKind::WouldBlock`
    /// (the message names the path) if another process, or another lock
    /// taken through any handle in this one, holds it. The lock lasts until
    /// the returned guard is dropped, or the process dies (POSIX `flock`
    /// semantics: the kernel releases it). Creating the file is not made
    /// durable; nothing relies on the file surviving a crash.
    ///
    /// The default body fails with `Unsupported`, so implementations written
    /// before this method keep compiling.
    fn lock_file(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("lock {}: this Vfs cannot lock files", path.display()),
        ))
    }
}

/// An exclusive lock taken by [`Vfs::lock_file`]; dropping it releases the
/// lock. It has no methods: holding it is the point.
pub trait FileLock: Send + Sync + fmt::Debug {}

/// An open file.
///
/// Positional reads and writes only: there is no cursor, so one handle can be
/// shared by a writer and many readers.
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read,
    /// which is less than `buf.len()` only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Reads up to `len` bytes at `offset` onto the end of `buf`; returns
    /// how many, as `read_at` does (on an error `buf` holds what it held).
    /// The same read as `read_at` into zeroed room at the end of `buf`, but
    /// a file whose bytes are in memory copies them without zeroing the
    /// room first: zeroing read buffers was 6% of a simulator run.
    fn read_at_onto(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        let start = buf.len();
        buf.resize(start + len, 0);
        let read = self.read_at(&mut buf[start..], offset);
        buf.truncate(start + read.as_ref().map_or(0, |&count| count));
        read
    }

    /// Writes all of `buf` at `offset`, extending the file if needed. On an
    /// error, any prefix of `buf` may have been written.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// The file's current size in bytes (as the page cache sees it).
    fn len(&self) -> io::Result<u64>;

    /// True if the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends (with zeros) the file to `len` bytes. Not
    /// durable until the next sync of this file.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// `fdatasync`: makes the file's data and size durable.
    fn sync_data(&self) -> io::Result<()>;

    /// `fsync`: makes the file's data, size and other metadata durable.
    fn sync_all(&self) -> io::Result<()>;
}

/// Reads exactly `buf.len()` bytes at `offset`, or fails with
/// `UnexpectedEof` naming the offset.
pub fn read_exact_at(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "end of file after {} of {} bytes read at offset {offset}",
                    done,
                    buf.len()
                ),
            ));
        }
        done += n;
    }
    Ok(())
}

/// Reads up to `len` bytes at `offset` onto the end of `buf`, fewer only
/// where the file ends; returns how many (on an error, `buf` may hold
/// part of them).
pub fn read_up_to_onto(
    file: &dyn VfsFile,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    let start = buf.len();
    while buf.len() - start < len {
        let done = buf.len() - start;
        if file.read_at_onto(buf, len - done, offset + done as u64)? == 0 {
            break;
        }
    }
    debug_assert!(buf.len() - start <= len, "a read past the length asked for");
    Ok(buf.len() - start)
}

/// [`read_exact_at`] onto the end of `buf`: exactly `len` bytes at
/// `offset`, or an error (`UnexpectedEof` naming the offset) and `buf` as
/// it was.
pub fn read_exact_at_onto(
    file: &dyn VfsFile,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> io::Result<()> {
    let start = buf.len();
    let error = match read_up_to_onto(file, buf, len, offset) {
        Ok(done) if done == len => return Ok(()),
        Ok(done) => io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("end of file after {done} of {len} bytes read at offset {offset}"),
        ),
        Err(error) => error,
    };
    buf.truncate(start);
    Err(error)
}

/// A `Vfs` behind a pointer is that `Vfs`: every method forwarded, written
/// once for each pointer.
macro_rules! forward_vfs {
    ($($pointer:ident)::+) => {
        impl<V: Vfs + ?Sized> Vfs for $($pointer)::+<V> {
            fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn VfsFile>> {
                (**self).open(path, mode)
            }
            fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
                (**self).list_dir(dir)
            }
            fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
                (**self).create_dir_all(dir)
            }
            fn sync_dir(&self, dir: &Path) -> io::Result<()> {
                (**self).sync_dir(dir)
            }
            fn remove_file(&self, path: &Path) -> io::Result<()> {
                (**self).remove_file(path)
            }
            fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
                (**self).rename(from, to)
            }
            fn lock_file(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
                (**self).lock_file(path)
            }
        }
    };
}

forward_vfs!(std::sync::Arc);
forward_vfs!(Box);

//! [`Fs`]: a file-system facade shaped like `std::fs`, over any [`Vfs`].
//!
//! Code written against `std::fs` moves to a [`Fs`] value by swapping
//! `std::fs::write(path, bytes)` for `fs.write(path, bytes)`,
//! `File::open(path)` for `fs.open(path)`, `OpenOptions::new()` for
//! `fs.options()`, and so on; the returned [`File`] implements
//! [`io::Read`], [`io::Write`] and [`io::Seek`] with a cursor like a
//! `std::fs::File`. In production the value is [`Fs::os`] (the real disk,
//! through [`PosixVfs`]); under test it wraps a `SimVfs`
//! (`Fs::from(SimVfs::new(seed))`), whose power losses, torn writes and
//! lost pages then strike the same code.
//!
//! ```
//! use std::io::Write;
//!
//! use durlog_vfs::SimVfs;
//! use durlog_vfs::fs::Fs;
//!
//! # fn main() -> std::io::Result<()> {
//! let disk = SimVfs::new(42);
//! let fs = Fs::from(disk.clone()); // Fs::os() in production
//! fs.create_dir_all("/db")?;
//! let mut log = fs.create("/db/log")?;
//! log.write_all(b"record")?;
//! log.sync_all()?; // the bytes
//! fs.sync_dir("/db")?; // the name
//! fs.write("/db/scratch", b"never synced")?;
//! disk.crash();
//! assert_eq!(fs.read("/db/log")?, b"record");
//! assert!(!fs.exists("/db/scratch")?);
//! # Ok(())
//! # }
//! ```
//!
//! # The durability contract
//!
//! Exactly the [`Vfs`] trait's, which is also what a careful user of
//! `std::fs` must assume of a real disk:
//! - nothing written through a [`File`] (or [`Fs::write`]) is durable until
//!   a later [`File::sync_data`] or [`File::sync_all`] on that file returns
//!   `Ok`;
//! - a create, a removal or a rename of a directory entry is durable only
//!   after [`Fs::sync_dir`] on its directory (for a rename, on the
//!   directories of both names) returns `Ok`. Until then a crash may undo
//!   it, even if the file's data was synced.
//!
//! [`Fs::create_dir_all`] is the exception: like [`Vfs::create_dir_all`] it
//! makes each directory it creates durable before returning.
//!
//! # Differences from `std::fs`
//!
//! - [`Fs::create`] opens for reading as well as writing. Every writable
//!   handle is opened read-write underneath (a [`Vfs`] has no write-only
//!   mode); the facade refuses reads through a handle not opened for
//!   reading itself.
//! - Truncating on open is an open followed by `set_len(0)`, not one atomic
//!   `O_TRUNC`; neither is durable before a sync, so a crash cannot tell.
//! - Reading a handle not opened for reading, or writing one not opened for
//!   writing, fails with `PermissionDenied` (Linux says `EBADF`, whose
//!   `io::ErrorKind` cannot be constructed outside std).
//! - A [`File`] keeps its cursor itself, so it is read and written through
//!   `&mut File` (no `impl Read for &File`), and it has no `metadata`:
//!   [`File::len`] is `metadata()?.len()`.
//! - There is no removal of directories, no symlinks and no permissions:
//!   the facade holds what the [`Vfs`] trait holds.
//!
//! Errors name the path: those of the [`Vfs`] already do, and the facade's
//! own ones (a refused read, an invalid option set, a bad seek, invalid
//! UTF-8) do too.

use std::ffi::OsString;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::vec;

use crate::{OpenMode, PosixVfs, Vfs, VfsFile};

/// A file system: the `std::fs` functions as methods, over one [`Vfs`].
///
/// Cheap to clone: clones share the backend.
#[derive(Clone, Debug)]
pub struct Fs {
    vfs: Arc<dyn Vfs>,
}

impl Fs {
    /// A facade over `vfs`, any backend.
    pub fn new(vfs: impl Vfs + 'static) -> Fs {
        Fs { vfs: Arc::new(vfs) }
    }

    /// The real disk: [`PosixVfs`], which is `std::fs` with real `fsync`.
    pub fn os() -> Fs {
        Fs::new(PosixVfs::new())
    }

    /// The backend, for code written against [`Vfs`] directly.
    pub fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.vfs
    }

    /// Like `std::fs::File::create`: creates the file, or truncates it if it
    /// exists, and opens it for writing (and, unlike std, for reading).
    /// Neither the new entry nor the truncation is durable before a sync
    /// (see the module doc).
    pub fn create(&self, path: impl AsRef<Path>) -> io::Result<File> {
        self.options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Like `std::fs::File::open`: opens an existing file for reading only.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        self.options().read(true).open(path)
    }

    /// Like `std::fs::OpenOptions::new()`: every option off.
    pub fn options(&self) -> OpenOptions {
        OpenOptions {
            fs: self.clone(),
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
        }
    }

    /// Like `std::fs::read`: the whole content of the file at `path`.
    pub fn read(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let mut file = self.open(path)?;
        // The size is only a hint: the file may change while it is read.
        let hint = usize::try_from(file.len()?).unwrap_or(0);
        let mut bytes = Vec::with_capacity(hint);
        file.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Like `std::fs::read_to_string`: the file's content as UTF-8, or
    /// `InvalidData` if it is not.
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> io::Result<String> {
        let path = path.as_ref();
        String::from_utf8(self.read(path)?).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("read {}: not valid UTF-8: {error}", path.display()),
            )
        })
    }

    /// Like `std::fs::write`: creates or truncates the file and writes
    /// `contents`. Nothing is synced: the data and the entry are not
    /// durable until [`File::sync_all`] and [`Fs::sync_dir`].
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
        self.create(path)?.write_all(contents.as_ref())
    }

    /// Like `std::fs::rename`, for files only ([`Vfs::rename`]): replaces
    /// a file at `to`. Durable only after [`Fs::sync_dir`] on the
    /// directories of both names.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        self.vfs.rename(from.as_ref(), to.as_ref())
    }

    /// Like `std::fs::remove_file`. Durable only after [`Fs::sync_dir`] on
    /// its directory.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.vfs.remove_file(path.as_ref())
    }

    /// Like `std::fs::create_dir_all`, and also makes every directory it
    /// creates durable before returning ([`Vfs::create_dir_all`]).
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.vfs.create_dir_all(path.as_ref())
    }

    /// Like `std::fs::read_dir`, but sorted by name, and read at once (so
    /// every item is `Ok`; the listing is taken when this is called).
    pub fn read_dir(&self, path: impl AsRef<Path>) -> io::Result<ReadDir> {
        let dir = path.as_ref();
        let entries: Vec<DirEntry> = self
            .vfs
            .list_dir(dir)?
            .into_iter()
            .map(|entry| DirEntry {
                path: dir.join(&entry.name),
                name: OsString::from(entry.name),
                is_dir: entry.is_dir,
            })
            .collect();
        Ok(ReadDir {
            entries: entries.into_iter(),
        })
    }

    /// Like `std::fs::exists`: `Ok(true)` for a file or a directory,
    /// `Ok(false)` if it (or a directory on the way) is missing, and `Err`
    /// for any other failure (an I/O error is no proof of absence).
    ///
    /// Looks the name up in a listing of its parent, so it costs a
    /// directory listing and needs no permission on the file itself. An
    /// error of that listing is returned as the [`Vfs`] made it (naming the
    /// parent directory), so that `injected_fault` still recognises one
    /// that `SimVfs` injected.
    pub fn exists(&self, path: impl AsRef<Path>) -> io::Result<bool> {
        let path = path.as_ref();
        // std stats "" and gets NotFound; SimVfs would call it the root.
        if path.as_os_str().is_empty() {
            return Ok(false);
        }
        let Some(name) = path.file_name() else {
            // "/" or a path ending in "..": no entry to look for in a
            // parent, so ask the directory itself.
            return match self.vfs.list_dir(path) {
                Ok(_) => Ok(true),
                Err(error) if error.kind() == io::ErrorKind::NotADirectory => Ok(true),
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(error) => Err(error),
            };
        };
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let entries = match self.vfs.list_dir(parent) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        };
        let name = name.to_string_lossy();
        let Some(entry) = entries.iter().find(|entry| entry.name == name) else {
            return Ok(false);
        };
        // "file/" names a directory that is not there: stat says ENOTDIR.
        if !entry.is_dir && path.as_os_str().as_encoded_bytes().ends_with(b"/") {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("exists {}: not a directory", path.display()),
            ));
        }
        Ok(true)
    }

    /// Makes the entries of directory `path` durable ([`Vfs::sync_dir`]):
    /// what std spells `File::open(dir)?.sync_all()`.
    pub fn sync_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.vfs.sync_dir(path.as_ref())
    }
}

impl From<Arc<dyn Vfs>> for Fs {
    /// Shares `vfs` as it is (no second `Arc`).
    fn from(vfs: Arc<dyn Vfs>) -> Fs {
        Fs { vfs }
    }
}

impl From<PosixVfs> for Fs {
    /// The real disk, as [`Fs::os`].
    fn from(vfs: PosixVfs) -> Fs {
        Fs::new(vfs)
    }
}

#[cfg(feature = "sim")]
impl From<crate::SimVfs> for Fs {
    /// A facade over the simulated disk `vfs` is a handle to: keep a clone
    /// of the `SimVfs` to crash it, inspect it or change its faults.
    fn from(vfs: crate::SimVfs) -> Fs {
        Fs::new(vfs)
    }
}

/// Like `std::fs::OpenOptions`, made by [`Fs::options`]: set the options,
/// then [`OpenOptions::open`].
#[derive(Clone, Debug)]
pub struct OpenOptions {
    fs: Fs,
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
}

impl OpenOptions {
    /// Open for reading.
    pub fn read(&mut self, read: bool) -> &mut Self {
        self.read = read;
        self
    }

    /// Open for writing (at the cursor).
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }

    /// Open for appending: every write goes to the end of the file, wherever
    /// the cursor is, and leaves the cursor there. Implies writing.
    pub fn append(&mut self, append: bool) -> &mut Self {
        self.append = append;
        self
    }

    /// Truncate an existing file to length 0. Needs `write`; not allowed
    /// with `append` (unless `create_new`).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }

    /// Create the file if it is missing. Needs `write` or `append`.
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if the path exists
    /// ([`OpenMode::CreateNew`]); `create` and `truncate` are then ignored.
    /// Needs `write` or `append`.
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.create_new = create_new;
        self
    }

    /// Opens `path` with these options. An invalid combination fails with
    /// `InvalidInput`, as std's does, before touching the disk.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        self.check(path)?;
        let writable = self.write || self.append;
        let vfs = &self.fs.vfs;
        let file = if self.create_new {
            vfs.open(path, OpenMode::CreateNew)?
        } else if writable {
            self.open_writable(path)?
        } else {
            vfs.open(path, OpenMode::ReadOnly)?
        };
        Ok(File {
            file,
            pos: 0,
            readable: self.read,
            writable,
            append: self.append,
            path: path.to_path_buf(),
        })
    }

    /// The combinations std refuses (its Unix `get_access_mode` and
    /// `get_creation_mode`), in the same order, so the same call fails the
    /// same way on both.
    fn check(&self, path: &Path) -> io::Result<()> {
        let writable = self.write || self.append;
        let problem = if !self.read && !writable {
            "no access mode: set read, write or append"
        } else if !writable && (self.create || self.create_new || self.truncate) {
            "creating or truncating a file needs write or append access"
        } else if self.append && self.truncate && !self.create_new {
            "truncate and append together are not allowed"
        } else {
            return Ok(());
        };
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("open {}: {problem}", path.display()),
        ))
    }

    /// Opens an existing file read-write, or creates it if `create` allows;
    /// truncates an existing one if `truncate` says so.
    fn open_writable(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let vfs = &self.fs.vfs;
        let existing = match vfs.open(path, OpenMode::ReadWrite) {
            Err(error) if error.kind() == io::ErrorKind::NotFound && self.create => {
                match vfs.open(path, OpenMode::CreateNew) {
                    // Someone created it between the two opens: open theirs,
                    // as O_CREAT without O_EXCL would have.
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                        vfs.open(path, OpenMode::ReadWrite)?
                    }
                    // A file we just created is empty: nothing to truncate.
                    created => return created,
                }
            }
            opened => opened?,
        };
        if self.truncate {
            existing.set_len(0)?;
        }
        Ok(existing)
    }
}

/// An open file, like `std::fs::File`: a [`VfsFile`] with a cursor, read
/// and written through [`io::Read`], [`io::Write`] and [`io::Seek`].
///
/// Dropping it closes it; closing syncs nothing.
#[derive(Debug)]
pub struct File {
    file: Box<dyn VfsFile>,
    /// The cursor: where the next read (and non-append write) starts.
    pos: u64,
    readable: bool,
    writable: bool,
    append: bool,
    /// For the facade's own errors: the Vfs's already name the file.
    path: PathBuf,
}

impl File {
    /// `fsync`: makes the file's data, size and metadata durable. Does not
    /// make its directory entry durable: that is [`Fs::sync_dir`].
    pub fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// `fdatasync`: makes the file's data and size durable.
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Truncates or extends (with zeros) the file to `size` bytes; the
    /// cursor stays where it is. Needs a handle opened for writing
    /// (`InvalidInput` otherwise, as on Linux). Not durable until a sync.
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("set_len {}: not opened for writing", self.path.display()),
            ));
        }
        self.file.set_len(size)
    }

    /// The file's size in bytes: what std spells `metadata()?.len()`.
    pub fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    /// True if the file is empty.
    pub fn is_empty(&self) -> io::Result<bool> {
        self.file.is_empty()
    }

    fn refused(&self, what: &str, mode: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{what} {}: not opened for {mode}", self.path.display()),
        )
    }
}

impl Read for File {
    /// Reads at the cursor and advances it; `Ok(0)` at the end of the file.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.readable {
            return Err(self.refused("read", "reading"));
        }
        let count = self.file.read_at(buf, self.pos)?;
        self.pos += count as u64;
        Ok(count)
    }
}

impl Write for File {
    /// Writes all of `buf` at the cursor (at the end of the file in append
    /// mode) and moves the cursor past it. A write past the end extends the
    /// file, with zeros in any gap. Not durable until a sync.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.writable {
            return Err(self.refused("write", "writing"));
        }
        // Append asks the size each time: another handle may have grown it.
        let offset = if self.append {
            self.file.len()?
        } else {
            self.pos
        };
        self.file.write_at(buf, offset)?;
        self.pos = offset.saturating_add(buf.len() as u64);
        Ok(buf.len())
    }

    /// Does nothing: there is no user-space buffer. Durability is
    /// [`File::sync_data`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    /// Moves the cursor, which may go past the end; a position before 0 or
    /// past `i64::MAX` fails with `InvalidInput` (as `lseek` does).
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(offset) => Some(offset),
            SeekFrom::End(delta) => self.file.len()?.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        match target.filter(|&target| i64::try_from(target).is_ok()) {
            Some(target) => {
                self.pos = target;
                Ok(target)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "seek {}: {pos:?} from {} is out of range",
                    self.path.display(),
                    self.pos
                ),
            )),
        }
    }
}

/// The entries of a directory, sorted by name, from [`Fs::read_dir`].
#[derive(Debug)]
pub struct ReadDir {
    entries: vec::IntoIter<DirEntry>,
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<io::Result<DirEntry>> {
        self.entries.next().map(Ok)
    }
}

/// One entry of a [`ReadDir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    path: PathBuf,
    name: OsString,
    is_dir: bool,
}

impl DirEntry {
    /// The directory's path (as given to [`Fs::read_dir`]) joined with the
    /// entry's name.
    pub fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The entry's name, without its directory (lossily converted to UTF-8
    /// by the [`Vfs`]).
    pub fn file_name(&self) -> OsString {
        self.name.clone()
    }

    /// True for a directory, false for a file.
    pub fn is_dir(&self) -> bool {
        self.is_dir
    }
}

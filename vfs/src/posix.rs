//! [`PosixVfs`]: the real file system through `std::fs`, with real
//! `fdatasync`/`fsync` of files and `fsync` of directories, and `rename(2)`
//! for renames, and `flock` (through `File::try_lock`) for locks.

use std::fmt;
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{DirEntry, FileLock, OpenMode, Vfs, VfsFile};

/// The host's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixVfs;

impl PosixVfs {
    /// A handle to the host's file system.
    pub fn new() -> PosixVfs {
        PosixVfs
    }
}

#[derive(Debug)]
struct PosixFile {
    file: File,
    /// For error messages: every error names the file.
    path: PathBuf,
}

/// A held `flock`. Dropping it closes the file, and closing the last
/// descriptor of an open file releases its flock: no explicit unlock.
struct PosixLock {
    _file: File,
    path: PathBuf,
}

impl fmt::Debug for PosixLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixLock")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileLock for PosixLock {}

fn with_path(error: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{what} {}: {error}", path.display()))
}

impl Vfs for PosixVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn VfsFile>> {
        let mut options = fs::OpenOptions::new();
        match mode {
            OpenMode::ReadOnly => options.read(true),
            OpenMode::ReadWrite => options.read(true).write(true),
            OpenMode::CreateNew => options.read(true).write(true).create_new(true),
        };
        let file = options
            .open(path)
            .map_err(|error| with_path(error, "open", path))?;
        Ok(Box::new(PosixFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir).map_err(|error| with_path(error, "list", dir))? {
            let entry = entry.map_err(|error| with_path(error, "list", dir))?;
            let is_dir = entry
                .file_type()
                .map_err(|error| with_path(error, "stat", &entry.path()))?
                .is_dir();
            entries.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir,
            });
        }
        entries.sort();
        Ok(entries)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            self.create_dir_all(parent)?;
        }
        match fs::create_dir(dir) {
            Ok(()) => {}
            // Another process may have made it in the meantime.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(error) => return Err(with_path(error, "create directory", dir)),
        }
        let parent = match dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        self.sync_dir(parent)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)
            .and_then(|handle| handle.sync_all())
            .map_err(|error| with_path(error, "sync directory", dir))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path).map_err(|error| with_path(error, "remove", path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let what = format!("rename {} to", from.display());
        // rename(2) moves directories too; the trait renames only files, as
        // remove_file removes only files. (A race with another process can
        // slip a directory in after this check; the engine owns its
        // directory, so that is not worth an openat dance.)
        if fs::symlink_metadata(from).is_ok_and(|metadata| metadata.is_dir()) {
            let error = io::Error::new(
                io::ErrorKind::IsADirectory,
                "the source is a directory (only files are renamed)",
            );
            return Err(with_path(error, &what, to));
        }
        fs::rename(from, to).map_err(|error| with_path(error, &what, to))
    }

    fn lock_file(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        // Never truncate: the file may be another process's, held right now.
        let file = fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|error| with_path(error, "lock", path))?;
        // flock(LOCK_EX | LOCK_NB) on Linux: per open file description, so
        // a second open of the same file in this process conflicts too.
        match file.try_lock() {
            Ok(()) => Ok(Box::new(PosixLock {
                _file: file,
                path: path.to_path_buf(),
            })),
            Err(TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another process or handle", path.display()),
            )),
            Err(TryLockError::Error(error)) => Err(with_path(error, "lock", path)),
        }
    }
}

impl PosixFile {
    fn named(&self, what: &str, error: io::Error) -> io::Error {
        with_path(error, what, &self.path)
    }
}

impl VfsFile for PosixFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, offset) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                result => return result.map_err(|error| self.named("read", error)),
            }
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file
            .write_all_at(buf, offset)
            .map_err(|error| self.named("write", error))
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|error| self.named("stat", error))?
            .len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file
            .set_len(len)
            .map_err(|error| self.named("truncate", error))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file
            .sync_data()
            .map_err(|error| self.named("fdatasync", error))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file
            .sync_all()
            .map_err(|error| self.named("fsync", error))
    }
}

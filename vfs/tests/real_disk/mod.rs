//! Real failing disks for the tests of the POSIX path: a small file system
//! that fills ([`SmallFs`]: a tmpfs, or an ext4 image on a loop device,
//! mounted in a temporary directory and unmounted when the guard drops,
//! also when the test panics), and a child process with a file-size limit
//! ([`run_with_file_size_limit`]: `RLIMIT_FSIZE`, under which the kernel
//! answers a write that crosses the limit with a short write and the next
//! with EFBIG). Every fault the simulator injects goes through `SimVfs`;
//! only these reach `PosixVfs`'s own error handling.
//!
//! Mounting needs root (as it has on a CI machine). Without it, or without
//! the tools (`mount`, `mkfs.ext4`), a test is skipped with one line on
//! stderr, except under `CI=true`, where it fails with the reason: CI must
//! never pass without having run these tests. The file-size limit needs no
//! privilege.
//!
//! Shared by the tests of durlog-vfs, durlog and durlog-cli (the other two
//! include this file by `#[path]`): one copy of the mount code.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The environment variable that makes a test binary, run again by
/// [`run_with_file_size_limit`], run the child's side of a test.
pub const CHILD_ENV: &str = "DURLOG_FILE_SIZE_LIMIT_CHILD";

/// What starts a line the child reports to its parent on stdout (the test
/// harness prints its own lines there too).
pub const CHILD_LINE: &str = "child: ";

/// A file system mounted for one test, with its mount points; dropping it
/// unmounts them (lazily if a plain unmount fails) and removes the
/// temporary directory.
pub struct SmallFs {
    /// Where the file system under test is mounted.
    root: PathBuf,
    /// The ext4 image and the options it is mounted with, to remount it.
    image: Option<(PathBuf, &'static str)>,
    /// Where the tmpfs holding the image is mounted (ext4 only).
    backing: Option<PathBuf>,
    /// Mount points in the order mounted; unmounted in reverse.
    mounted: Vec<PathBuf>,
    /// Removed last, once nothing is mounted inside it.
    base: Option<tempfile::TempDir>,
}

/// How an ext4 image is laid out and backed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext4 {
    /// A journaled ext4 (the default `mkfs.ext4` makes, in ordered data
    /// mode) whose image lives on a tmpfs with room for all of it: the
    /// file system itself fills, and reports ENOSPC at `write`.
    Journaled,
    /// A thin-provisioned device: the image is larger than the tmpfs that
    /// holds it, and that tmpfs is filled until `headroom_bytes` remain.
    /// The file system accepts writes into the page cache (it believes it
    /// has room) and the device fails them at writeback, so the error
    /// comes late, from `fdatasync`. Without a journal, ext4 reports
    /// ENOSPC there and goes on.
    ThinNoJournal { headroom_bytes: u64 },
    /// The same device under a journaled ext4: a journal write the device
    /// refuses aborts the journal, `fdatasync` fails with EIO and the file
    /// system turns read-only (its default `errors=remount-ro`), so that no
    /// cut-back can be made durable.
    ThinJournaled { headroom_bytes: u64 },
}

/// Fails the test under `CI=true`, else says on stderr that it is skipped;
/// returns `None` for the caller to return.
fn skip<T>(test: &str, reason: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|value| value == "true") {
        panic!(
            "{test}: needs root to mount a small file system, and CI=true forbids skipping: {reason}"
        );
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of a passing test, and a skip must be seen.
    let _ = writeln!(
        io::stderr(),
        "{test}: skipped: needs root to mount a small file system ({reason})"
    );
    None
}

/// The effective uid, from /proc (no libc: the workspace forbids `unsafe`).
fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Runs `program args`, returning its stderr (or why it did not start) on
/// failure.
fn run(program: &str, args: &[&str]) -> Result<Output, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("{program}: {error}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "{program} {}: {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn text(path: &Path) -> &str {
    path.to_str().expect("the test's temporary paths are UTF-8")
}

impl SmallFs {
    /// A tmpfs of `size_bytes`.
    pub fn tmpfs(test: &str, size_bytes: u64) -> Option<SmallFs> {
        let mut fs = SmallFs::base(test)?;
        let root = fs.dir("fs");
        if let Err(reason) = fs.mount_tmpfs(&root, size_bytes) {
            return skip(test, &reason);
        }
        fs.root = root;
        Some(fs)
    }

    /// An ext4 file system of `size_bytes` (4 KiB blocks, no blocks
    /// reserved for root, so that it fills the same for every user) on a
    /// loop device, laid out and backed as `kind` says.
    pub fn ext4(test: &str, size_bytes: u64, kind: Ext4) -> Option<SmallFs> {
        let mut fs = SmallFs::base(test)?;
        let backing = fs.dir("backing");
        let root = fs.dir("fs");
        let image = backing.join("ext4.img");
        // The image is sparse: the tmpfs holds only what was written.
        let backing_bytes = size_bytes + (1 << 20);
        let journal = match kind {
            Ext4::Journaled | Ext4::ThinJournaled { .. } => "has_journal",
            Ext4::ThinNoJournal { .. } => "^has_journal",
        };
        let made = fs.mount_tmpfs(&backing, backing_bytes).and_then(|()| {
            fs.backing = Some(backing.clone());
            File::create(&image)
                .and_then(|file| file.set_len(size_bytes))
                .map_err(|error| format!("create {}: {error}", image.display()))?;
            // nodiscard: a discard would punch holes in the image again.
            // Inode tables written now, so that later metadata writes land
            // on blocks the device already holds.
            run(
                "mkfs.ext4",
                &[
                    "-q",
                    "-F",
                    "-b",
                    "4096",
                    "-m",
                    "0",
                    "-O",
                    journal,
                    "-E",
                    "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                    text(&image),
                ],
            )
            .map(drop)
        });
        if let Err(reason) = made {
            return skip(test, &reason);
        }
        fs.image = Some((image, "loop"));
        if let Err(reason) = fs.mount_image(&root) {
            return skip(test, &reason);
        }
        fs.root = root;
        if let Ext4::ThinNoJournal { headroom_bytes } | Ext4::ThinJournaled { headroom_bytes } =
            kind
        {
            fill(&backing.join("filler"), headroom_bytes);
        }
        Some(fs)
    }

    /// The temporary directory, once root is known to be there.
    fn base(test: &str) -> Option<SmallFs> {
        match effective_uid() {
            Some(0) => {}
            Some(uid) => return skip(test, &format!("running as uid {uid}")),
            None => return skip(test, "cannot read the uid from /proc/self/status"),
        }
        let base = tempfile::Builder::new()
            .prefix(&format!("durlog-{test}-"))
            .tempdir()
            .expect("a temporary directory");
        Some(SmallFs {
            root: PathBuf::new(),
            image: None,
            backing: None,
            mounted: Vec::new(),
            base: Some(base),
        })
    }

    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.base.as_ref().expect("not dropped").path().join(name);
        fs::create_dir(&dir).expect("create a mount point");
        dir
    }

    fn mount_tmpfs(&mut self, point: &Path, size_bytes: u64) -> Result<(), String> {
        let options = format!("size={size_bytes},mode=0755");
        run(
            "mount",
            &["-t", "tmpfs", "-o", &options, "durlog-test", text(point)],
        )?;
        self.mounted.push(point.to_path_buf());
        Ok(())
    }

    fn mount_image(&mut self, point: &Path) -> Result<(), String> {
        let (image, options) = self.image.as_ref().expect("an ext4 image");
        run("mount", &["-o", options, text(image), text(point)])?;
        self.mounted.push(point.to_path_buf());
        Ok(())
    }

    /// The root of the file system under test.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Unmounts the ext4 file system and mounts it again, as a reboot
    /// would: what reads back after this came from the device, not from
    /// the page cache. Nothing may hold a file open in it.
    pub fn remount(&mut self) {
        assert!(self.image.is_some(), "only an ext4 image can be remounted");
        let root = self.root.clone();
        run("umount", &[text(&root)]).unwrap_or_else(|reason| panic!("remount: {reason}"));
        self.mounted.retain(|point| *point != root);
        self.mount_image(&root)
            .unwrap_or_else(|reason| panic!("remount: {reason}"));
    }

    /// Fills the file system under test until only about `leave_bytes`
    /// remain (to the block), with a file whose path is returned.
    pub fn fill(&self, leave_bytes: u64) -> PathBuf {
        self.fill_with("filler", leave_bytes)
    }

    /// [`SmallFs::fill`] with a file called `name`.
    pub fn fill_with(&self, name: &str, leave_bytes: u64) -> PathBuf {
        let filler = self.root.join(name);
        fill(&filler, leave_bytes);
        filler
    }

    /// Gives a thin device its room back: removes what fills the tmpfs that
    /// holds the image.
    pub fn free_device(&self) {
        let backing = self.backing.as_ref().expect("a thin ext4 device");
        fs::remove_file(backing.join("filler")).expect("remove the device's filler");
    }

    /// Bytes an unprivileged user may still write on the file system under
    /// test, as `statfs` counts them (from `stat -f`: no libc here).
    pub fn available_bytes(&self) -> u64 {
        let output = run("stat", &["-f", "-c", "%a %S", text(&self.root)])
            .unwrap_or_else(|reason| panic!("{reason}"));
        let output = String::from_utf8_lossy(&output.stdout);
        let numbers: Vec<u64> = output
            .split_whitespace()
            .map(|number| number.parse().expect("stat -f prints numbers"))
            .collect();
        numbers[0] * numbers[1]
    }
}

/// Writes zeros to `path` until the file system refuses more, then gives
/// back `leave_bytes` (cut off the end) and syncs, so that the space is
/// free when this returns.
///
/// ext4 refuses a delayed-allocation write early, while its worst-case
/// reservation for metadata still holds blocks the sync then gives back,
/// and reuses blocks freed by a truncation only once the journal commits:
/// so it writes, syncs and writes again, in smaller pieces, until a write
/// right after a sync takes nothing.
fn fill(path: &Path, leave_bytes: u64) {
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|error| panic!("create {}: {error}", path.display()));
    let chunk = vec![0u8; 1 << 20];
    let mut piece = chunk.len();
    loop {
        let before = file.metadata().expect("stat the filler").len();
        match file.write_all(&chunk[..piece]) {
            Ok(()) => continue,
            Err(error) if error.kind() == io::ErrorKind::StorageFull => {}
            Err(error) => panic!("fill {}: {error}", path.display()),
        }
        file.sync_all()
            .unwrap_or_else(|error| panic!("sync {}: {error}", path.display()));
        let took = file.metadata().expect("stat the filler").len() - before;
        if took == 0 && piece == 4096 {
            break;
        }
        piece = (piece / 4).max(4096);
    }
    let full = file.metadata().expect("stat the filler").len();
    file.set_len(full.saturating_sub(leave_bytes))
        .and_then(|()| file.sync_all())
        .unwrap_or_else(|error| panic!("cut back {}: {error}", path.display()));
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        for point in self.mounted.drain(..).rev() {
            let path = text(&point);
            if let Err(reason) = run("umount", &[path]) {
                // Busy (a file still open in it, after a panic): detach it
                // now; the kernel finishes once the last file closes, and
                // frees the loop device then (mount -o loop sets autoclear).
                eprintln!("{reason}; unmounting lazily");
                if let Err(reason) = run("umount", &["-l", path]) {
                    eprintln!("{reason}: {path} stays mounted");
                    // Removing the directory would remove what is mounted.
                    std::mem::forget(self.base.take());
                    return;
                }
            }
        }
    }
}

/// What a child run by [`run_with_file_size_limit`] reported: its lines
/// (after [`CHILD_LINE`]) and everything it printed.
#[derive(Debug)]
pub struct ChildReport {
    pub lines: Vec<String>,
    pub output: Output,
}

/// Runs the test `test` of this test binary again, in a child process whose
/// files may not grow past `limit_bytes` (a multiple of 512) and which
/// ignores SIGXFSZ, so that the kernel answers a write that crosses the
/// limit with a short write and the next with EFBIG instead of killing the
/// process. The child sees [`CHILD_ENV`] set to `arg`; the test must then
/// run its child's side, call [`assert_file_size_limit`] and report with
/// [`report`]. Fails the test if the child does.
pub fn run_with_file_size_limit(test: &str, limit_bytes: u64, arg: &str) -> ChildReport {
    assert_eq!(limit_bytes % 512, 0, "ulimit -f counts 512-byte blocks");
    let exe = std::env::current_exe().expect("the test binary's path");
    // sh rather than setrlimit and signal from Rust: both need libc and
    // `unsafe`, which the workspace forbids. An ignored signal stays
    // ignored across exec.
    let script = format!(
        "trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"",
        limit_bytes / 512
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, arg)
        .env("DURLOG_FILE_SIZE_LIMIT_BYTES", limit_bytes.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child of {test} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<String> = stdout
        .lines()
        // Anywhere in the line: with --nocapture the harness prints "test
        // NAME ... " and the test's first output follows on its line.
        .filter_map(|line| line.split_once(CHILD_LINE))
        .map(|(_, reported)| reported.to_owned())
        .collect();
    assert!(
        !lines.is_empty(),
        "the child of {test} reported nothing (did it run the test?):\n{stdout}"
    );
    ChildReport { lines, output }
}

/// In the child: checks that the shell set the limit asked for, in bytes
/// (a shell counting `ulimit -f` in other units would test something else).
pub fn assert_file_size_limit() -> u64 {
    let wanted: u64 = std::env::var("DURLOG_FILE_SIZE_LIMIT_BYTES")
        .expect("set by the parent")
        .parse()
        .expect("a number");
    let limits = fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max file size"))
        .expect("/proc/self/limits names the file size limit");
    let soft: u64 = line
        .split_whitespace()
        .nth(3)
        .and_then(|soft| soft.parse().ok())
        .unwrap_or_else(|| panic!("no limit set: {line:?}"));
    assert_eq!(soft, wanted, "the file size limit in bytes: {line:?}");
    wanted
}

/// In the child: one line for the parent.
pub fn report(line: impl AsRef<str>) {
    println!("{CHILD_LINE}{}", line.as_ref());
}

//! Refusing to benchmark where fsync means nothing, and describing the
//! machine a run happened on.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Fails with a clear message if `dir` is on tmpfs or ramfs: an fdatasync
/// there returns at once, so every durable-append figure would be fiction.
pub fn refuse_memory_fs(dir: &Path) -> Result<()> {
    let kind = fs_magic(dir)?;
    if kind == TMPFS_MAGIC || kind == RAMFS_MAGIC {
        bail!(
            "{} is on {} (statfs f_type {kind:#x}): fdatasync is free there, so the \
             figures would be meaningless. Pass --dir on a real disk (ext4, xfs, ...).",
            dir.display(),
            if kind == TMPFS_MAGIC {
                "tmpfs"
            } else {
                "ramfs"
            },
        );
    }
    Ok(())
}

fn fs_magic(dir: &Path) -> Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a valid out-pointer.
    let rc = unsafe { libc::statfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        bail!(
            "statfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(stat.f_type as i64)
}

/// Where and when a run happened.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub date_utc: String,
    pub nproc: usize,
    pub kernel: String,
    pub cpu: String,
    pub memory: String,
    /// `findmnt -T DIR`: source, type and options of the benchmark's mount.
    pub filesystem: String,
    /// `git rev-parse --short HEAD`, with a note if engine/ or vfs/ differ
    /// from it (the binary was built from the working tree).
    pub commit: String,
    pub command: String,
    /// /proc/loadavg when the run started and when it ended: the machine is
    /// shared, and other work on it moves every figure.
    pub loadavg_start: String,
    #[serde(default)]
    pub loadavg_end: String,
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".to_string(), |text| text.trim().to_string())
}

pub fn describe(dir: &Path, repo: &Path) -> Machine {
    let run = |program: &str, args: &[&str]| -> String {
        Command::new(program)
            .args(args)
            .current_dir(repo)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_else(|| "?".to_string())
    };
    let dir_text = dir.to_string_lossy().to_string();
    let mut commit = run("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = run("git", &["status", "--porcelain", "--", "engine", "vfs"]);
    if !dirty.is_empty() && dirty != "?" {
        commit.push_str(" + uncommitted changes in engine/ or vfs/");
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| "?".to_string());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines().next().map(|line| {
                line.split_whitespace()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        })
        .unwrap_or_else(|| "?".to_string());
    Machine {
        date_utc: run("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: run("uname", &["-sr"]),
        cpu,
        memory,
        filesystem: run(
            "findmnt",
            &["-n", "-o", "SOURCE,FSTYPE,OPTIONS", "-T", &dir_text],
        ),
        commit,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        loadavg_start: loadavg(),
        loadavg_end: String::new(),
    }
}

//! Helpers shared by the SimVfs test files.

#![allow(dead_code)] // each test binary uses a different subset

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;

use durlog_vfs::{OpenMode, SimVfs, Vfs, VfsFile};

/// Runs `body` for every seed; on a panic, says which seed to reproduce.
pub fn for_each_seed(seeds: Range<u64>, mut body: impl FnMut(u64)) {
    for seed in seeds {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(seed))) {
            eprintln!("failed: reproduce with seed={seed}");
            resume_unwind(panic);
        }
    }
}

pub fn open(vfs: &SimVfs, path: &str, mode: OpenMode) -> Box<dyn VfsFile> {
    vfs.open(Path::new(path), mode)
        .unwrap_or_else(|error| panic!("open {path}: {error}"))
}

//! The explorer checks every outcome of a power loss during recovery,
//! not only the first. A toy store's recovery writes its page 1, then its
//! page 2, then syncs; the next recovery refuses to find page 2 without
//! page 1 (the planted fault: a store that trusted its second page would
//! misread that disk). Only an outcome that keeps the later page and
//! loses the earlier one, which is never the first outcome enumerated,
//! shows it.

use std::fmt;
use std::io;
use std::path::Path;
use std::str::FromStr;

use durlog_testbed::explore::{
    Exhaustible, ExploreOptions, LossFacts, PAGES_MAX, PowerLossHook, Share, explore,
};
use durlog_testbed::{SimVfs, Violation};
use durlog_vfs::{OpenMode, Vfs, VfsFile};

const DIR: &str = "/store";
const FILE: &str = "/store/pages";
const PAGE: usize = 4096;

/// The one workload: the store made, then a power loss.
#[derive(Clone, Debug)]
struct Once;

impl fmt::Display for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("once")
    }
}

impl FromStr for Once {
    type Err = String;

    fn from_str(text: &str) -> Result<Once, String> {
        (text == "once")
            .then_some(Once)
            .ok_or_else(|| format!("{text:?} is not once"))
    }
}

#[derive(clap::Args, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct NoOptions {}

struct TwoPages;

impl Exhaustible for TwoPages {
    type Workload = Once;
    type Options = NoOptions;

    fn command(&self) -> &str {
        "two-pages"
    }

    fn options(&self) -> &NoOptions {
        &NoOptions {}
    }

    fn workloads(&self, _ops: u32) -> Vec<Once> {
        vec![Once]
    }

    fn run_workload(
        &self,
        _workload: &Once,
        disk: SimVfs,
        _trace: bool,
        hook: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        (run(&disk, hook).err(), Vec::new())
    }

    fn describe(&self, _ops: u32) -> String {
        "two pages".to_string()
    }
}

fn run(disk: &SimVfs, mut hook: Option<PowerLossHook<'_>>) -> Result<(), Violation> {
    let mut goes_on = |in_recovery| {
        hook.as_mut()
            .is_none_or(|hook| hook(disk, LossFacts::new(in_recovery)))
    };
    // Errors are the power loss's: the disk says so.
    let _ = make(disk);
    if disk.is_halted() {
        disk.reboot();
    } else {
        disk.crash();
    }
    if !goes_on(false) {
        return Ok(());
    }
    for _ in 0..10 {
        let recovered = recover(disk);
        if !disk.is_halted() {
            return recovered.map_err(|message| Violation { step: 0, message });
        }
        disk.reboot();
        if !goes_on(true) {
            return Ok(());
        }
    }
    Ok(())
}

fn make(disk: &SimVfs) -> io::Result<()> {
    disk.create_dir_all(Path::new(DIR))?;
    disk.open(Path::new(FILE), OpenMode::CreateNew)?
        .sync_data()?;
    disk.sync_dir(Path::new(DIR))
}

/// Reads both pages back, then writes both and syncs them. `Err` names
/// the planted fault; an I/O error is the power loss's.
fn recover(disk: &SimVfs) -> Result<(), String> {
    let Ok(file) = open(disk) else {
        return Ok(());
    };
    let written = |page: usize| {
        let mut byte = [0];
        file.read_at(&mut byte, (page * PAGE) as u64)
            .is_ok_and(|read| read == 1 && byte[0] != 0)
    };
    if written(1) && !written(0) {
        return Err("page 2 is on disk without page 1".to_string());
    }
    let _ = file
        .write_at(&[1; PAGE], 0)
        .and_then(|()| file.write_at(&[2; PAGE], PAGE as u64))
        .and_then(|()| file.sync_data());
    Ok(())
}

fn open(disk: &SimVfs) -> io::Result<Box<dyn VfsFile>> {
    match disk.open(Path::new(FILE), OpenMode::ReadWrite) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            make(disk)?;
            disk.open(Path::new(FILE), OpenMode::ReadWrite)
        }
        opened => opened,
    }
}

#[test]
fn every_outcome_of_a_crash_during_recovery_is_checked() {
    for share in [Share::EachPoint, Share::AcrossPoints, Share::Verify] {
        let options = ExploreOptions {
            pages_max: PAGES_MAX,
            recovery_crashes: true,
            fail_fast: false,
            share,
        };
        let report = explore(&TwoPages, &Once, options);
        let (id, violation, _) = report
            .first_violation
            .unwrap_or_else(|| panic!("{share:?}: not found in {} states", report.states));
        assert_eq!(violation.message, "page 2 is on disk without page 1");
        assert!(id.recovery_crash.is_some(), "{share:?}: {id}");
        // Found by a choice of the second power loss's that is not its
        // first outcome.
        assert!(
            id.choices.iter().any(|&choice| choice > 0),
            "{share:?}: {id}"
        );
    }
}

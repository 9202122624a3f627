//! Power loss at every disk operation of the snapshot file's save
//! (`durlog_raft::snapshot_file`), on the simulated disk, with every
//! outcome the disk's fault model allows there, through the testbed's
//! exhaustive explorer (as `crash.rs` does for the log store's writes):
//! every subset of the unsynced pages, every unsynced directory entry and
//! size change kept or undone, the interrupted write torn at each sector,
//! and the load after it cut too, at each of its operations.
//!
//! The file is replaced atomically, so the next load must show the
//! snapshot saved before or the one being saved (the new one once the
//! save returned), and never refuse: a refusal keeps a node down for good
//! (the cluster simulation counts it), though no byte of the disk was
//! damaged.
//!
//! Cases: the first save of a store, and a save that replaces a snapshot,
//! of bodies of 0 bytes to several pages.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use durlog::vfs::SimVfs;
use durlog_raft::snapshot_file::{Saved, SnapshotFile};
use durlog_testbed::Violation;
use durlog_testbed::explore::{
    Exhaustible, ExploreOptions, LossFacts, PAGES_MAX, PowerLossHook, StateId, explore, replay,
};
use durlog_testbed::options::NoOptions;
use openraft::{CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership};

const DIR: &str = "/store";

/// A save: whether a snapshot is there before it, and the body's length.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Case {
    replaces: bool,
    body_bytes: usize,
}

const BODY_BYTES: [usize; 3] = [0, 700, 9_000];

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.replaces { "replace" } else { "first" };
        write!(f, "{what}-{}", self.body_bytes)
    }
}

impl std::str::FromStr for Case {
    type Err = String;
    fn from_str(text: &str) -> Result<Case, String> {
        let bad = || format!("{text:?} is no case: first-BYTES or replace-BYTES");
        let (what, bytes) = text.split_once('-').ok_or_else(bad)?;
        let replaces = match what {
            "first" => false,
            "replace" => true,
            _ => return Err(bad()),
        };
        let body_bytes = bytes.parse().map_err(|_| bad())?;
        Ok(Case {
            replaces,
            body_bytes,
        })
    }
}

/// The snapshot of index `index`, its bytes `body_bytes` long (each a
/// function of the index, so two snapshots differ in every byte).
fn snapshot(index: u64, body_bytes: usize) -> Saved {
    let log_id = LogId::new(CommittedLeaderId::new(2, 1), index);
    let membership = Membership::new(vec![BTreeSet::from([1, 2, 3])], ());
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
        snapshot_id: format!("snapshot-{index}"),
    };
    let body = (0..body_bytes)
        .map(|at| (at as u64 * 31 + index) as u8)
        .collect();
    (meta, body)
}

fn file(disk: &SimVfs) -> Result<SnapshotFile, durlog_raft::Error> {
    let vfs: Arc<dyn durlog::vfs::Vfs> = Arc::new(disk.clone());
    SnapshotFile::new(vfs, Path::new(DIR))
}

/// The save, for the explorer.
struct SnapshotSaves;

impl Exhaustible for SnapshotSaves {
    type Workload = Case;
    type Options = NoOptions;

    fn command(&self) -> &str {
        "cargo test -p durlog-raft --test snapshot_crash"
    }

    fn options(&self) -> &NoOptions {
        &NoOptions {}
    }

    fn workloads(&self, _ops: u32) -> Vec<Case> {
        [false, true]
            .into_iter()
            .flat_map(|replaces| {
                BODY_BYTES.map(|body_bytes| Case {
                    replaces,
                    body_bytes,
                })
            })
            .collect()
    }

    fn run_workload(
        &self,
        case: &Case,
        disk: SimVfs,
        _trace: bool,
        on_power_loss: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        let verdict = run_case(*case, &disk, on_power_loss)
            .err()
            .map(|message| Violation { step: 0, message });
        (verdict, Vec::new())
    }

    fn describe(&self, _ops: u32) -> String {
        "the snapshot file's save".to_owned()
    }
}

/// One state: the old snapshot (if any) durable, the save, a power loss
/// at its end (or where the script cut it), then loads until one is not
/// cut, which must show the old snapshot or the new one.
fn run_case(case: Case, disk: &SimVfs, mut hook: Option<PowerLossHook<'_>>) -> Result<(), String> {
    let old = case.replaces.then(|| snapshot(1, case.body_bytes / 2));
    if let Some(old) = &old {
        // The history, saved on a disk of its own and copied durable: the
        // explorer's script counts this disk's every operation.
        let scratch = SimVfs::new(0);
        file(&scratch)
            .and_then(|file| file.save(old))
            .map_err(|error| format!("{case}: the history's save: {error}"))?;
        for path in scratch.files() {
            let bytes = scratch.durable_contents(&path).expect("durable");
            disk.put_durable_file(&path, &bytes);
        }
    }
    let new = snapshot(2, case.body_bytes);
    let mut allowed = vec![old.clone(), Some(new.clone())];
    match file(disk).and_then(|file| file.save(&new)) {
        Ok(()) if !disk.is_halted() => allowed = vec![Some(new.clone())],
        Ok(()) => {}
        // A failure with no fault to explain it is the file's own.
        Err(error) if !disk.is_halted() && disk.fault_log().is_empty() => {
            return Err(format!("{case}: no fault, yet {error}"));
        }
        Err(_) => {}
    }
    let mut power_lost = |in_recovery| {
        hook.as_mut()
            .is_none_or(|hook| hook(disk, LossFacts::new(in_recovery)))
    };
    if !disk.is_halted() {
        disk.halt();
    }
    if !power_lost(false) {
        return Ok(());
    }
    disk.reboot();
    let seen = loop {
        match file(disk).and_then(|file| file.load()) {
            Ok(seen) if !disk.is_halted() => break seen,
            Err(error) if !disk.is_halted() => {
                return Err(format!("{case}: the load refused: {error}"));
            }
            _ => {
                if !power_lost(true) {
                    return Ok(());
                }
                disk.reboot();
            }
        }
    };
    if !allowed.contains(&seen) {
        let id = |saved: &Option<Saved>| saved.as_ref().map(|(meta, _)| meta.snapshot_id.clone());
        return Err(format!(
            "{case}: the load shows {:?}, not one of {:?}",
            id(&seen),
            allowed.iter().map(id).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

#[test]
fn power_loss_at_every_disk_operation_of_a_save_keeps_the_old_snapshot_or_the_new() {
    let options = ExploreOptions {
        pages_max: PAGES_MAX,
        recovery_crashes: true,
        fail_fast: false,
        share: Default::default(),
    };
    let mut total = 0;
    for case in SnapshotSaves.workloads(1) {
        let report = explore(&SnapshotSaves, &case, options);
        if let Some((id, violation, _)) = &report.first_violation {
            let parsed: StateId<Case> = id.to_string().parse().unwrap();
            let (again, _, _) = replay(&SnapshotSaves, &parsed, PAGES_MAX);
            panic!(
                "{id}: {}\n(replays: {:?})",
                violation.message,
                again.map(|violation| violation.message)
            );
        }
        println!(
            "{case}: {} fault points, {} distinct crash states",
            report.crash_points + report.failure_points,
            report.states
        );
        assert!(report.states > 1, "{case}: no crash state");
        total += report.states;
    }
    println!("{total} crash states checked");
}

//! `LogStore::open_for_repair` on a damaged log (durlog_raft::repair): for
//! seeded damage at rest in a sealed or the last segment (a flipped bit, a
//! misdirected write), the plain open refuses; the repair keeps every
//! entry before the damage, moves the damaged bytes aside (never deleting
//! them), waits for a reach at least the last entry the store had
//! acknowledged, and opens the gate, durably, once the entries are back.
//! Each seed prints itself on failure.

use std::path::Path;
use std::sync::Arc;

use durlog::vfs::{FaultConfig, OpenMode, SimVfs, Vfs};
use durlog::{NextSegment, Options, Tuning};
use durlog_raft::LogStore;
use durlog_raft::events::{EventRequest, TypeConfig};
use durlog_raft::repair::Reach;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Store = LogStore<TypeConfig>;

const DIR: &str = "/store";
const ENTRIES: u64 = 40;

fn options() -> (Options, Tuning) {
    let options = Options {
        segment_bytes: 400,
        now: Some(Arc::new(|| 1_700_000_000_000_000_000)),
        ..Options::default()
    };
    let tuning = Tuning::default().with(|tuning| tuning.next_segment = NextSegment::OnCall);
    (options, tuning)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(EventRequest {
            stream: "s".to_owned(),
            event_type: "t".to_owned(),
            data: vec![index as u8; 20],
            expected_version: None,
        }),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn open_for_repair(vfs: &SimVfs) -> Result<Store, durlog_raft::Error> {
    let (options, tuning) = options();
    LogStore::open_for_repair(Arc::new(vfs.clone()), DIR, options, tuning)
}

fn segments(vfs: &SimVfs) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = vfs
        .files()
        .into_iter()
        .filter(|path| path.parent() == Some(Path::new("/store/log")))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    files.sort();
    files
}

/// Damages the closed store as `seed` says; false if it had nothing to
/// damage that way.
fn damage(vfs: &SimVfs, rng: &mut ChaCha8Rng) -> bool {
    let files = segments(vfs);
    let sealed = rng.random_range(0..2u32) == 0 && files.len() > 1;
    let path = if sealed {
        files[rng.random_range(0..files.len() - 1)].clone()
    } else {
        files.last().expect("a segment").clone()
    };
    let bytes = vfs.durable_contents(&path).expect("durable");
    if rng.random_range(0..2u32) == 0 {
        let bit = rng.random_range(0..bytes.len() as u64 * 8);
        vfs.flip_bit_at_rest(&path, bit).expect("flip");
    } else {
        let span = 64.min(bytes.len());
        let from = rng.random_range(0..=bytes.len() - span);
        let to = rng.random_range(0..=bytes.len() - span);
        let file = vfs.open(&path, OpenMode::ReadWrite).expect("open");
        file.write_at(&bytes[from..from + span], to as u64)
            .expect("write");
        file.sync_data().expect("sync");
    }
    true
}

/// True if the seed's damage needed a repair (durlog refused the log).
fn check_seed(seed: u64, rt: &tokio::runtime::Runtime) -> bool {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vfs = SimVfs::with_faults(seed, FaultConfig::none());
    let written: Vec<_> = (0..ENTRIES).map(|index| entry(1, index)).collect();
    {
        let mut store = open_for_repair(&vfs).expect("a fresh store");
        rt.block_on(async {
            store.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
            store.blocking_append(written.clone()).await.unwrap();
        });
    }
    let held = durlog_raft::repair::last_log_id::<TypeConfig>(vfs.clone(), Path::new(DIR));
    assert_eq!(
        held.unwrap_or_else(|e| panic!("seed {seed}: {e}")),
        Some(written.last().unwrap().log_id),
        "seed {seed}: the last entry, read from the files"
    );
    assert!(damage(&vfs, &mut rng));
    let (options, tuning) = options();
    let plain = LogStore::<TypeConfig>::open_with(Arc::new(vfs.clone()), DIR, options, tuning);
    let Err(_) = plain else {
        // durlog took the damage for a torn tail (the last record alone):
        // nothing to repair here (the cluster simulation excuses it).
        return false;
    };
    let store = open_for_repair(&vfs).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let report = store.repair_report().clone();
    let reach = report
        .reach
        .unwrap_or_else(|| panic!("seed {seed}: no reach"));
    assert!(
        reach >= Reach::of(&written.last().unwrap().log_id),
        "seed {seed}: reach {reach} below the last entry acknowledged"
    );
    assert!(!store.repair_gate().allows_elections(), "seed {seed}");
    let kept = store.entries().unwrap();
    assert_eq!(
        kept[..],
        written[..kept.len()],
        "seed {seed}: a prefix kept"
    );
    let moved = &report.quarantined[0];
    assert!(
        vfs.files().iter().any(|path| path.starts_with(&moved.dir)),
        "seed {seed}: the damaged bytes kept in {}",
        moved.dir.display()
    );
    // A power loss in the middle of the repair: the next open resumes it,
    // from raft.meta, with the gate still closed and the same reach.
    drop(store);
    vfs.crash();
    let mut store = open_for_repair(&vfs).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert!(store.repair_report().resumed, "seed {seed}: resumed");
    assert_eq!(store.repair_report().reach, Some(reach), "seed {seed}");
    assert!(
        !store.repair_gate().allows_elections(),
        "seed {seed}: a resumed repair keeps the node out of elections"
    );
    assert_eq!(
        store.entries().unwrap(),
        kept,
        "seed {seed}: the prefix kept"
    );
    // The leader sends the rest again (and more, up to the reach).
    let end = ENTRIES.max(reach.index + 1);
    let again: Vec<_> = (kept.len() as u64..end)
        .map(|index| entry(1, index))
        .collect();
    rt.block_on(store.blocking_append(again)).unwrap();
    assert!(
        store.repair_gate().allows_elections(),
        "seed {seed}: repaired"
    );
    drop(store);
    let store = open_for_repair(&vfs).unwrap();
    assert!(
        store.repair_gate().allows_elections(),
        "seed {seed}: durably"
    );
    assert_eq!(store.entries().unwrap().len() as u64, end, "seed {seed}");
    true
}

#[test]
fn a_damaged_log_is_repaired_not_refused() {
    let rt = runtime();
    let repaired = (0..200).filter(|&seed| check_seed(seed, &rt)).count();
    assert!(
        repaired >= 100,
        "only {repaired} of 200 seeds needed a repair"
    );
}

#[test]
fn a_store_under_repair_is_refused_by_the_plain_open() {
    let rt = runtime();
    let vfs = SimVfs::with_faults(7, FaultConfig::none());
    {
        let mut store = open_for_repair(&vfs).unwrap();
        let entries: Vec<_> = (0..ENTRIES).map(|index| entry(1, index)).collect();
        rt.block_on(store.blocking_append(entries)).unwrap();
    }
    let first = segments(&vfs)[0].clone();
    vfs.flip_bit_at_rest(&first, 8 * 30).unwrap();
    let store = open_for_repair(&vfs).unwrap();
    assert!(!store.repair_gate().allows_elections());
    drop(store);
    let (options, tuning) = options();
    let plain = LogStore::<TypeConfig>::open_with(Arc::new(vfs.clone()), DIR, options, tuning);
    assert!(matches!(plain, Err(durlog_raft::Error::Inconsistent(_))));
}

/// `last_log_id` reads what the store holds from the files alone: nothing
/// in a fresh store, the last entry after an append and after a
/// truncation, nothing once a purge took every entry.
#[test]
fn the_last_log_id_read_from_the_files_is_the_stores() {
    let rt = runtime();
    let vfs = SimVfs::with_faults(3, FaultConfig::none());
    let last = || durlog_raft::repair::last_log_id::<TypeConfig>(vfs.clone(), Path::new(DIR));
    let id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
    let mut store = open_for_repair(&vfs).unwrap();
    assert_eq!(last().unwrap(), None);
    let entries: Vec<_> = (0..ENTRIES).map(|index| entry(1, index)).collect();
    rt.block_on(store.blocking_append(entries)).unwrap();
    assert_eq!(last().unwrap(), Some(id(ENTRIES - 1)));
    rt.block_on(store.truncate(id(30))).unwrap();
    assert_eq!(last().unwrap(), Some(id(29)));
    rt.block_on(store.purge(id(29))).unwrap();
    assert_eq!(last().unwrap(), None, "every entry purged");
}

//! openraft's own storage test suite (`openraft::testing::Suite`), run
//! unchanged on `LogStore`: once on the real disk with durlog's default
//! options, once on the simulated disk with segments of a few entries, so
//! that its purges remove whole segments and reads cross segment bounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use durlog::vfs::SimVfs;
use durlog::{Options, Tuning};
use durlog_raft::LogStore;
use durlog_raft::events::{StateMachine, TypeConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

/// Cases in openraft 0.9.25's `Suite::test_store`; the last one,
/// `transfer_snapshot`, builds two stores.
const SUITE_CASES: usize = 35;
const SUITE_BUILDS: usize = SUITE_CASES + 1;

/// Builds each case's store in a fresh temporary directory, and counts.
struct OnDisk {
    builds: Arc<AtomicUsize>,
}

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, StateMachine, TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<TypeConfig>, StateMachine), StorageError<u64>> {
        self.builds.fetch_add(1, Ordering::SeqCst);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = LogStore::open(dir.path()).expect("open a store");
        Ok((dir, store, StateMachine::new()))
    }
}

/// Builds each case's store on its own simulated disk, with segments of a
/// few records.
struct Simulated {
    builds: Arc<AtomicUsize>,
}

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, StateMachine, ()> for Simulated {
    async fn build(&self) -> Result<((), LogStore<TypeConfig>, StateMachine), StorageError<u64>> {
        let seed = self.builds.fetch_add(1, Ordering::SeqCst) as u64;
        let options = Options {
            segment_bytes: 200,
            ..Options::default()
        };
        let store = LogStore::open_with(
            Arc::new(SimVfs::new(seed)),
            "/store",
            options,
            Tuning::default(),
        )
        .expect("open a store");
        Ok(((), store, StateMachine::new()))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_real_disk() {
    let builds = Arc::new(AtomicUsize::new(0));
    Suite::test_all(OnDisk {
        builds: Arc::clone(&builds),
    })
    .expect("openraft's storage suite");
    assert_eq!(builds.load(Ordering::SeqCst), SUITE_BUILDS);
    println!("openraft storage suite: {SUITE_CASES} cases run and passed on the real disk");
}

#[test]
fn openraft_storage_suite_passes_on_small_simulated_segments() {
    let builds = Arc::new(AtomicUsize::new(0));
    Suite::test_all(Simulated {
        builds: Arc::clone(&builds),
    })
    .expect("openraft's storage suite");
    assert_eq!(builds.load(Ordering::SeqCst), SUITE_BUILDS);
    println!("openraft storage suite: {SUITE_CASES} cases run and passed on simulated segments");
}

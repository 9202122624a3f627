//! Coverage marks: named points in the code under test that a simulation
//! campaign counts, so that a point no seed reached shows as a zero in the
//! summary instead of passing unseen (TigerBeetle's `testing/marks.zig`,
//! FoundationDB's `CODE_PROBE`, Antithesis's "sometimes" assertions).
//!
//! `durlog_vfs::mark!("recovery: a repeated record")` at such a point. With
//! the `sim` feature (the simulators, tests and fuzzing) each hit adds one
//! to a count kept per thread, which a simulation reads and resets around
//! each run ([`take`]): a seed runs on one thread, so the counts are that
//! run's. Without the feature (a production build) a mark compiles to
//! nothing. Antithesis's SDK was the crate to use here, but its local mode
//! appends every hit to one JSONL file per process, which cannot tell one
//! seed's run from another's on the same thread pool, and it would give
//! the engine dependencies a production build does not need.

#[cfg(feature = "sim")]
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Marks `$name` as reached (see the module doc).
#[macro_export]
macro_rules! mark {
    ($name:literal) => {
        $crate::marks::hit($name)
    };
}

#[cfg(feature = "sim")]
thread_local! {
    static HITS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one hit of `name` on this thread.
#[cfg(feature = "sim")]
pub fn hit(name: &'static str) {
    HITS.with(|hits| *hits.borrow_mut().entry(name).or_default() += 1);
}

/// A production build counts nothing.
#[cfg(not(feature = "sim"))]
#[inline(always)]
pub fn hit(_name: &'static str) {}

/// The hits counted on this thread since the last call, by name; the
/// counts start again from zero.
pub fn take() -> BTreeMap<&'static str, u64> {
    #[cfg(feature = "sim")]
    return HITS.with(|hits| std::mem::take(&mut *hits.borrow_mut()));
    #[cfg(not(feature = "sim"))]
    BTreeMap::new()
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    #[test]
    fn hits_are_counted_per_thread_and_taken_once() {
        super::take();
        crate::mark!("a");
        crate::mark!("a");
        crate::mark!("b");
        std::thread::spawn(|| crate::mark!("elsewhere"))
            .join()
            .unwrap();
        let hits = super::take();
        assert_eq!(hits.into_iter().collect::<Vec<_>>(), [("a", 2), ("b", 1)]);
        assert!(super::take().is_empty());
    }
}

//! Sharing states across the fault points of a workload: the keys that
//! tell states apart, what is kept of a state judged, and the check that
//! two states taken for one were judged alike.
//!
//! Two runs of one workload that reach a scripted power loss with the same
//! disk image and the same runner digest ([`LossFacts::runner`]) go on
//! alike: the rest of a run depends on nothing else. The digest is the
//! scenario's promise; [`Share::Verify`] holds it to it.

use std::collections::BTreeMap;
use std::fmt;

#[cfg(doc)]
use super::LossFacts;
use super::{FaultPoint, StateId};
use crate::Violation;

/// Where the explorer looks for a state judged before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Share {
    /// At the same fault point only, by the images and failure decisions.
    EachPoint,
    /// At every fault point of the workload, where the scenario gives
    /// runner digests ([`LossFacts::runner`]).
    #[default]
    AcrossPoints,
    /// As `EachPoint`, and each state that matches one judged at another
    /// point must be judged alike (the same verdict, the same disk at the
    /// end): a check that the runner digests leave out nothing a run
    /// depends on.
    Verify,
}

/// What tells two states at a first power loss apart: the image and the
/// fault point with its failure decisions, or, where states are shared
/// across points, the image and the runner digest.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum FamilyKey {
    AtPoint(FaultPoint, Vec<u32>, u128),
    Shared(u128, u64),
}

/// What the rest of a run depends on at one of its scripted power losses:
/// each loss's image and runner digest so far, and the recovery crash
/// still to come (none at the last scripted loss).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SharedKey {
    pub(super) recovery_crash: Option<u64>,
    pub(super) losses: Vec<(u128, u64)>,
}

/// A state judged: the first run that reached it, and what came of it.
pub(super) struct Judged<W> {
    pub(super) id: StateId<W>,
    /// Its recovery reached the recovery crash.
    pub(super) reached: bool,
    /// With [`Share::Verify`] at the last scripted loss: the verdict and
    /// the image at the end of the run.
    pub(super) verdict: Option<(Option<Violation>, u128)>,
}

/// With [`Share::Verify`], a violation if a run that reached the states
/// `met` was judged unlike them: the runner digests leave out something.
pub(super) fn judged_unlike<W: fmt::Display>(
    judged: &BTreeMap<SharedKey, Judged<W>>,
    met: &[SharedKey],
    reached: bool,
    verdict: Option<&(Option<Violation>, u128)>,
) -> Option<Violation> {
    met.iter().find_map(|key| {
            let before = &judged[key];
            let unlike = if before.reached != reached {
                Some("its recovery reached the recovery crash, or not, unlike")
            } else if before.verdict.is_some() && before.verdict.as_ref() != verdict {
                Some("its verdict or its disk at the end differs from that of")
            } else {
                None
            };
            unlike.map(|what| Violation {
                step: 0,
                message: format!(
                    "shared states judged unlike: {what} {}, which matched it at a power loss (images and runner digests)",
                    before.id
                ),
            })
        })
}

//! Crash outcomes from a script instead of the RNG: what an exhaustive
//! checker needs to visit every state the fault model allows, one by one.
//!
//! A [`CrashScript`] set on a `SimVfs` (with `SimVfs::set_crash_script`)
//! says when power fails (during which counted operations, by their
//! absolute number) and which one counted operation fails instead (a write
//! cut short, a sync that returns EIO), and it takes every decision those
//! faults leave open from its list of `choices` instead of drawing it. Each
//! decision with more than one option consumes the next choice (option 0
//! once the list is exhausted) and is recorded with how many options it
//! had, in `decisions`. So a caller can enumerate every outcome depth
//! first, like an odometer: run with some choices, read the decisions back,
//! increment the last one that has an option left, drop what follows, run
//! again ([`CrashScript::next_choices`]).
//!
//! Option 0 is always what the disk does with every fault off: a page, a
//! size change or a directory entry not yet synced is lost (the durable
//! state stays), a write interrupted by the power loss leaves nothing, a
//! failed write writes nothing and a failed sync drops no page. The other
//! options, decision by decision:
//! - a directory entry created, removed or renamed since the last
//!   directory sync (one decision per name, at a power loss): 1 = the
//!   change reached the platter;
//! - a file whose size differs from its durable size: 1 = the new size
//!   survives;
//! - each dirty page below the resulting size: 1 = it survives. At most
//!   `pages_max` pages per power loss are decided one by one; any further
//!   dirty pages of that power loss are decided together, by one decision
//!   (all lost, or all kept), and the power loss is counted in
//!   `pages_joined`;
//! - the write during which power fails: cut at its start or at a
//!   512-byte sector boundary inside it, each either clean or with the
//!   sector being written then (up to the next boundary or the write's
//!   end) holding garbage, or kept whole: options 2i and 2i + 1 cut at the
//!   i-th of those points (0: its start, so option 0 writes nothing), the
//!   last option keeps it whole. The garbage is a fixed pattern drawn from
//!   the offset, not the RNG. The byte-granular cuts of the random mode
//!   are not enumerated;
//! - the failing write: option i writes the prefix up to its i-th sector
//!   boundary (never the whole write) and fails with EIO (`ShortWrite`);
//! - the failing file sync, if the file has dirty pages: 1 = the kernel
//!   drops them (they turn clean unwritten, `FailedFsync`).
//!
//! Only the first `power_losses` power losses after the script is set are
//! scripted; later ones keep exactly the durable state and decide nothing.
//! While a script is set, no other fault fires: no flipped read, no
//! misdirected write, no failure but the scripted one, whatever the fault
//! configuration says, and the RNG is never drawn.

use super::fault::FaultKind;
use super::file::SECTOR_BYTES;
use super::trace::TraceKind;

/// One decision a scripted disk took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The option taken, `0..options`.
    pub taken: u32,
    /// How many options there were (at least 2: a decision with one option
    /// is no decision and is not recorded).
    pub options: u32,
    /// The fault whose outcome it decided.
    pub kind: FaultKind,
}

/// When power fails, what fails, and the choices that decide the outcomes;
/// filled in with the decisions taken. See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashScript {
    /// Power fails during each of these counted operations, by absolute
    /// number (as `SimVfs::op_count` counts them, from 1).
    pub crash_at_ops: Vec<u64>,
    /// Power fails again during the n-th counted operation after the first
    /// power loss (the recovery that follows it, typically).
    pub crash_again_after: Option<u64>,
    /// This counted operation fails, if it is a write or a sync (a write
    /// cut short at a sector boundary, a sync with EIO); other operations
    /// cannot fail in the fault model and run as usual.
    pub fail_at_op: Option<u64>,
    /// How many power losses from now take their outcomes from `choices`.
    pub power_losses: u32,
    /// Dirty pages decided one by one per power loss; the rest together.
    pub pages_max: u32,
    /// The option each decision takes, in order (0 past the end).
    pub choices: Vec<u32>,
    /// Filled in: every decision taken, in order.
    pub decisions: Vec<Decision>,
    /// Filled in: the kind of each counted operation, in order, from the
    /// one after the script was set.
    pub ops: Vec<TraceKind>,
    /// Filled in: power losses whose dirty pages passed `pages_max`.
    pub pages_joined: u32,
    /// Filled in: for each counted operation (as `ops`), whether the code
    /// under test said it was recovering
    /// ([`SimVfs::set_recovering`](crate::SimVfs::set_recovering)): an
    /// explorer crashes a recovery at its operations only.
    pub recovering: Vec<bool>,
    /// Filled in: the counted operations done when each power loss began,
    /// scripted or not.
    pub losses_at: Vec<u64>,
    /// Filled in: a choice asked for an option the decision did not have
    /// (it took the last one): the choices were made for another run.
    pub misfit: bool,
}

impl CrashScript {
    /// The choices of the next outcome depth first after the one whose
    /// `decisions` were just taken: the last decision with an option left,
    /// incremented, and nothing after it. `None` once every outcome was
    /// visited.
    pub fn next_choices(decisions: &[Decision]) -> Option<Vec<u32>> {
        let last = decisions
            .iter()
            .rposition(|decision| decision.taken + 1 < decision.options)?;
        let mut choices: Vec<u32> = decisions[..=last]
            .iter()
            .map(|decision| decision.taken)
            .collect();
        choices[last] += 1;
        Some(choices)
    }
}

/// A script in use: the script and where the disk is in it.
#[derive(Debug)]
pub(crate) struct Scripted {
    pub(crate) script: CrashScript,
    /// Index of the next choice.
    next: usize,
    /// Scripted power losses left, counting the one under way.
    power_losses_left: u32,
    /// The power loss under way takes its outcomes from the script.
    in_scripted_loss: bool,
    /// Pages decided one by one in the power loss under way.
    pages_decided: u32,
    /// The joint decision on the further pages of the power loss under way.
    pages_joint: Option<bool>,
}

impl Scripted {
    pub(crate) fn new(script: CrashScript) -> Scripted {
        let mut script = script;
        script.decisions.clear();
        script.ops.clear();
        script.pages_joined = 0;
        script.misfit = false;
        Scripted {
            power_losses_left: script.power_losses,
            script,
            next: 0,
            in_scripted_loss: false,
            pages_decided: 0,
            pages_joint: None,
        }
    }

    /// Takes the next choice for a decision among `options`.
    fn decide(&mut self, options: u64, kind: FaultKind) -> u64 {
        if options <= 1 {
            return 0;
        }
        let options = u32::try_from(options).expect("a decision has fewer than 2^32 options");
        let wanted = self.script.choices.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        if wanted >= options {
            self.script.misfit = true;
        }
        let taken = wanted.min(options - 1);
        self.script.decisions.push(Decision {
            taken,
            options,
            kind,
        });
        u64::from(taken)
    }

    /// Counted operation `op` of `kind` starts: whether power fails
    /// during it.
    pub(crate) fn counted(&mut self, op: u64, kind: TraceKind, recovering: bool) -> bool {
        self.script.ops.push(kind);
        self.script.recovering.push(recovering);
        self.script.crash_at_ops.contains(&op)
    }

    /// Whether the power loss about to happen is scripted (a torn write is
    /// decided before the power loss that it belongs to starts).
    fn next_loss_scripted(&self) -> bool {
        self.power_losses_left > 0
    }

    /// A power loss starts, after `op` counted operations: scripted or not.
    pub(crate) fn begin_power_loss(&mut self, op: u64) {
        self.script.losses_at.push(op);
        if let Some(after) = self.script.crash_again_after.take() {
            self.script.crash_at_ops.push(op + after);
        }
        self.in_scripted_loss = self.power_losses_left > 0;
        self.power_losses_left = self.power_losses_left.saturating_sub(1);
        self.pages_decided = 0;
        self.pages_joint = None;
    }

    /// At a power loss: whether an unsynced change of `kind` (a directory
    /// entry, a size, a page) reaches the platter.
    pub(crate) fn crash_keeps(&mut self, kind: FaultKind) -> bool {
        if !self.in_scripted_loss {
            return false;
        }
        if kind != FaultKind::LostUnsyncedPages {
            return self.decide(2, kind) == 1;
        }
        if self.pages_decided < self.script.pages_max {
            self.pages_decided += 1;
            return self.decide(2, kind) == 1;
        }
        if let Some(joint) = self.pages_joint {
            return joint;
        }
        self.script.pages_joined += 1;
        let joint = self.decide(2, kind) == 1;
        self.pages_joint = Some(joint);
        joint
    }

    /// The write of `buf` at `offset` is interrupted by a power loss: what
    /// of it reaches the cache (a prefix, maybe with garbage after it).
    pub(crate) fn torn_write(&mut self, buf: &[u8], offset: u64) -> Vec<u8> {
        let len = buf.len() as u64;
        if !self.next_loss_scripted() || len == 0 {
            return Vec::new();
        }
        // The points a tear can cut at: the start, then each boundary.
        let mut points = vec![offset];
        points.extend(sector_cuts(offset, len));
        let whole = 2 * (points.len() as u64 - 1);
        let taken = self.decide(whole + 1, FaultKind::TornWrite);
        if taken == whole {
            return buf.to_vec();
        }
        let (point, garbage) = ((taken / 2) as usize, taken % 2 == 1);
        let cut = points[point];
        let mut torn = buf[..(cut - offset) as usize].to_vec();
        if garbage {
            torn.extend((cut..points[point + 1]).map(garbage_byte));
        }
        torn
    }

    /// Whether a fault of `kind` fails counted operation `op` (once).
    pub(crate) fn fails(&mut self, kind: FaultKind, op: u64) -> bool {
        let fails = matches!(kind, FaultKind::ShortWrite | FaultKind::FailedFsync)
            && self.script.fail_at_op == Some(op);
        if fails {
            self.script.fail_at_op = None;
        }
        fails
    }

    /// The failing write `offset..offset + len`: how many of its bytes it
    /// writes before it fails (a strict prefix, cut at a sector boundary).
    pub(crate) fn short_prefix(&mut self, offset: u64, len: u64) -> u64 {
        let mut cuts = sector_cuts(offset, len);
        cuts.pop(); // the end: a failed write is never whole
        let taken = self.decide(cuts.len() as u64 + 1, FaultKind::ShortWrite);
        match taken {
            0 => 0,
            taken => cuts[taken as usize - 1] - offset,
        }
    }

    /// The failing sync of a file with `dirty_pages`: whether they drop.
    pub(crate) fn sync_drops_pages(&mut self, dirty_pages: usize) -> bool {
        let options = if dirty_pages > 0 { 2 } else { 1 };
        self.decide(options, FaultKind::FailedFsync) == 1
    }
}

/// The garbage a torn sector holds at byte `at`: a fixed pattern (the
/// low byte of a SplitMix64 step), never all zeros over a sector.
fn garbage_byte(at: u64) -> u8 {
    let mut z = at.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u8
}

/// Where a write of `len` bytes at `offset` can be cut: every sector
/// boundary strictly inside it, then its end.
fn sector_cuts(offset: u64, len: u64) -> Vec<u64> {
    let end = offset + len;
    if len == 0 {
        return Vec::new();
    }
    let first = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
    let mut cuts: Vec<u64> = (first..end).step_by(SECTOR_BYTES as usize).collect();
    cuts.push(end);
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(taken: u32, options: u32) -> Decision {
        Decision {
            taken,
            options,
            kind: FaultKind::LostUnsyncedPages,
        }
    }

    #[test]
    fn next_choices_counts_like_an_odometer_and_ends() {
        let taken = [decision(0, 2), decision(1, 2), decision(1, 3)];
        assert_eq!(CrashScript::next_choices(&taken), Some(vec![0, 1, 2]));
        let taken = [decision(0, 2), decision(1, 2), decision(2, 3)];
        assert_eq!(CrashScript::next_choices(&taken), Some(vec![1]));
        let taken = [decision(1, 2), decision(1, 2)];
        assert_eq!(CrashScript::next_choices(&taken), None);
        assert_eq!(CrashScript::next_choices(&[]), None);
    }

    #[test]
    fn sector_cuts_are_the_boundaries_inside_then_the_end() {
        assert_eq!(sector_cuts(100, 50), vec![150]);
        assert_eq!(sector_cuts(500, 600), vec![512, 1024, 1100]);
        assert_eq!(sector_cuts(512, 512), vec![1024]);
        assert_eq!(sector_cuts(0, 0), Vec::<u64>::new());
    }

    #[test]
    fn pages_past_the_bound_are_decided_together() {
        let mut scripted = Scripted::new(CrashScript {
            power_losses: 1,
            pages_max: 2,
            choices: vec![1, 0, 1],
            ..CrashScript::default()
        });
        scripted.begin_power_loss(0);
        let kept: Vec<bool> = (0..5)
            .map(|_| scripted.crash_keeps(FaultKind::LostUnsyncedPages))
            .collect();
        assert_eq!(kept, vec![true, false, true, true, true]);
        assert_eq!(scripted.script.decisions.len(), 3);
        assert_eq!(scripted.script.pages_joined, 1);
        // The next power loss is not scripted: the durable state only.
        scripted.begin_power_loss(0);
        assert!(!scripted.crash_keeps(FaultKind::LostDirEntry));
        assert_eq!(scripted.script.decisions.len(), 3);
    }

    fn tear(choice: u32, buf: &[u8], offset: u64) -> (Vec<u8>, Decision) {
        let mut scripted = Scripted::new(CrashScript {
            power_losses: 1,
            choices: vec![choice],
            ..CrashScript::default()
        });
        let torn = scripted.torn_write(buf, offset);
        (torn, scripted.script.decisions[0])
    }

    #[test]
    fn a_torn_write_is_cut_at_each_sector_clean_or_with_garbage() {
        let buf = vec![7u8; 1000];
        // Points 500, 512, 1024; whole at 1500: 2 * 3 + 1 options.
        let (torn, decision) = tear(0, &buf, 500);
        assert!(torn.is_empty());
        assert_eq!(decision.options, 7);
        let (torn, _) = tear(1, &buf, 500);
        assert_eq!(torn.len(), 12);
        assert!(torn.iter().any(|&byte| byte != 7));
        let (torn, _) = tear(4, &buf, 500);
        assert_eq!(torn, vec![7u8; 524]);
        let (torn, _) = tear(5, &buf, 500);
        assert_eq!(torn.len(), 1000);
        assert_eq!(torn[..524], vec![7u8; 524][..]);
        assert_ne!(torn[524..], vec![7u8; 476][..]);
        assert_eq!(tear(6, &buf, 500).0, buf);
    }

    #[test]
    fn a_choice_beyond_the_options_is_a_misfit() {
        let mut scripted = Scripted::new(CrashScript {
            power_losses: 1,
            choices: vec![5],
            ..CrashScript::default()
        });
        assert_eq!(scripted.torn_write(&[1; 100], 0), vec![1; 100]);
        assert!(scripted.script.misfit);
    }
}

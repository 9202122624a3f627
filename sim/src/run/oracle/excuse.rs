//! The excuses: every outcome the oracle accepts although the model says
//! otherwise, each tied to a fault the disk really injected into the very
//! bytes at stake (`SimVfs::damage` and the fault log, never a fault being
//! merely enabled), and named by an [`Excuse`] that carries the FORMAT.md
//! rule that makes the outcome unavoidable. Whatever no excuse covers is a
//! violation.

use std::cell::OnceCell;
use std::ops::Range;
use std::path::Path;

use durlog::{Error, Rule};
use durlog_vfs::{Damage, FaultEvent, FaultKind, SimVfs, injected_fault};

use crate::golden::{self, Copied, Placed, Placement};
use crate::model::Model;
use crate::report::Excuse;

use super::Check;

/// Where a record's header holds its seq (FORMAT.md, Record: the
/// length, the CRC, then the seq).
const SEQ_FIELD: Range<u64> = 8..16;

/// The evidence: the damage the disk did to one log's directory, and the
/// faults it injected during the call being judged.
pub(crate) struct Evidence<'a> {
    pub(crate) vfs: &'a SimVfs,
    pub(crate) dir: &'a Path,
    /// Damage in this log's directory; damage to the logs a run left
    /// behind excuses nothing here. Taken from the disk when first asked
    /// for (`damage()`): most calls judged need no excuse, and copying the
    /// disk's list at each was 2% of a run's instructions.
    damage: OnceCell<Vec<Damage>>,
    /// The files a misdirected write hit, as recovery was about to read
    /// them (set by the runner for a reopen).
    pub(crate) before_open: Vec<(std::path::PathBuf, Vec<u8>)>,
    /// The faults the disk injected during the Open just done (set by the
    /// runner for a reopen).
    pub(crate) open_faults: Vec<FaultEvent>,
    /// Where a duplicated write put a copy of a write over zeros: the only
    /// bytes past the last record a segment may hold but zeros (the copy
    /// is garbage, not damage; recovery truncates it as a repeated record).
    /// Taken when first asked for, as `damage` is (`copies()`).
    copies: OnceCell<Vec<Copied>>,
    /// Index files a failed `write_index_files` of this life may have
    /// left half written (its write and then its removal failed): Open
    /// removes them, and until then their bytes prove nothing (set by the
    /// runner).
    pub(crate) unsure_index_files: Vec<std::path::PathBuf>,
}

impl<'a> Evidence<'a> {
    /// Whether `segment` has damage at rest (a bit flipped, a misdirected
    /// write) and an index file beside it: a trusting Open took it from
    /// that file without reading the damage.
    pub(crate) fn damage_under_trusted_index(&self, segment: &Path) -> bool {
        self.damaged_at_rest(segment)
            && self
                .vfs
                .file_contents(&segment.with_extension("idx"))
                .is_some()
    }

    /// Whether the file at `path` has damage at rest: a bit flipped, a
    /// misdirected write.
    fn damaged_at_rest(&self, path: &Path) -> bool {
        self.damage().iter().any(|damage| {
            damage.path == path
                && matches!(
                    damage.kind,
                    FaultKind::BitFlipAtRest | FaultKind::MisdirectedWrite
                )
        })
    }

    /// Puts back in `bytes`, the file at `path`, each bit flipped at rest
    /// there that a read during the Open just done flipped back: the Open
    /// read those bytes as they were written (FORMAT.md, "Stream metadata
    /// and consumer positions": a table is refused only when its bytes
    /// show damage). The count of bits put back.
    pub(crate) fn undo_flips_read_back(&self, path: &Path, bytes: &mut [u8]) -> u64 {
        let mut undone = 0;
        for damage in self.flips_read_back(path) {
            if let (Some(byte), Some(bit)) = (bytes.get_mut(damage.offset as usize), damage.bit) {
                *byte ^= 1 << bit;
                undone += 1;
            }
        }
        undone
    }

    /// The bits flipped at rest in the file at `path` that a read during
    /// the Open just done flipped back.
    pub(crate) fn flips_read_back(&self, path: &Path) -> impl Iterator<Item = &Damage> {
        self.damage().iter().filter(move |damage| {
            damage.kind == FaultKind::BitFlipAtRest
                && damage.path == path
                && self.open_faults.iter().any(|fault| {
                    fault.kind == FaultKind::BitFlipOnRead
                        && fault.path == damage.path
                        && fault.offset == damage.offset
                        && fault.bit == damage.bit
                })
        })
    }

    pub(crate) fn new(vfs: &'a SimVfs, dir: &'a Path) -> Evidence<'a> {
        Evidence {
            vfs,
            dir,
            damage: OnceCell::new(),
            before_open: Vec::new(),
            open_faults: Vec::new(),
            copies: OnceCell::new(),
            unsure_index_files: Vec::new(),
        }
    }

    /// The damage the disk did in this log's directory so far.
    pub(crate) fn damage(&self) -> &[Damage] {
        self.damage.get_or_init(|| {
            let mut damage = self.vfs.damage();
            damage.retain(|damage| damage.path.starts_with(self.dir));
            damage
        })
    }

    /// Where duplicated writes in this log's directory put their copies.
    pub(crate) fn copies(&self) -> &[Copied] {
        self.copies.get_or_init(|| {
            (self.vfs.duplicated_writes().into_iter())
                .filter(|copy| copy.path.starts_with(self.dir))
                .map(|copy| Copied {
                    bytes: copy.offset..copy.offset + copy.len,
                    from: copy.intended_offset.unwrap_or(copy.offset),
                    file: copy.path,
                })
                .collect()
        })
    }

    /// Whether a header at `offset` of `file` is a duplicated write's copy
    /// of bytes inside a record, not of a record's start: it and its seq
    /// field start inside the copy (whatever of the field lies past it is
    /// the zeros the copy landed beside), and where it was copied from no
    /// acknowledged record starts. A copied record start claims its own,
    /// older, seq.
    fn copied_mid_record(&self, file: &Path, offset: u64, placement: &Placement) -> bool {
        let seq_field = offset + SEQ_FIELD.start;
        self.copies().iter().any(|copy| {
            copy.file == file
                && copy.bytes.contains(&offset)
                && copy.bytes.contains(&seq_field)
                && placement
                    .at(file, offset - copy.bytes.start + copy.from)
                    .is_none()
        })
    }

    /// The damage at rest that touched `file` within `bytes`: a flipped
    /// bit there, or a misdirected write that landed there or left there
    /// the bytes it was meant to write.
    fn damage_within(&self, file: &Path, bytes: &Range<u64>) -> Option<&Damage> {
        self.damage().iter().find(|damage| {
            let landed = damage.offset..damage.offset + damage.len;
            let missed = damage
                .intended_offset
                .map(|intended| intended..intended + damage.len);
            damage.path == file
                && (overlaps(&landed, bytes)
                    || missed.is_some_and(|missed| overlaps(&missed, bytes)))
        })
    }

    fn placement(&self, model: &Model) -> Placement {
        Placement::new(self.vfs, self.dir, model)
    }
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Bits flipped on read in `file` within `bytes`, among `faults`.
fn read_flips_within(faults: &[FaultEvent], file: &Path, bytes: &Range<u64>) -> usize {
    faults
        .iter()
        .filter(|fault| {
            fault.kind == FaultKind::BitFlipOnRead
                && fault.path == file
                && bytes.contains(&fault.offset)
        })
        .count()
}

/// Whether a fault struck the index file of `segment`: damage at rest (a
/// flip, a misdirected write) or a read of it that flipped (`faults`:
/// those injected during the read).
fn index_file_struck(segment: &Path, evidence: &Evidence<'_>, faults: &[FaultEvent]) -> bool {
    let index_file = segment.with_extension("idx");
    evidence.damaged_at_rest(&index_file)
        || faults
            .iter()
            .any(|fault| fault.path == index_file && fault.kind == FaultKind::BitFlipOnRead)
}

/// A read that failed: only `Corrupt`, naming an acknowledged record that
/// damage at rest touched, or that a read flip hit in both of the
/// engine's reads of it (`faults`: those injected during the read).
pub(crate) fn failed_read(
    error: &Error,
    model: &Model,
    evidence: &Evidence<'_>,
    faults: &[FaultEvent],
) -> Result<Excuse, String> {
    if let Error::Io(io) = error
        && injected_fault(io) == Some(FaultKind::ReadError)
        && faults
            .iter()
            .any(|fault| fault.kind == FaultKind::ReadError)
    {
        return Ok(Excuse::ReadFailed);
    }
    let Error::Corrupt {
        file,
        offset,
        reason,
    } = error
    else {
        return Err(format!("read failed with no fault to explain it: {error}"));
    };
    // A sealed segment's records found by walking its bytes, its index
    // file not serving (FORMAT.md, "What reads do with one"): only if a
    // fault struck that file.
    let walked = reason.contains("cannot be read as its index");
    if walked && !index_file_struck(file, evidence, faults) {
        return Err(format!(
            "a read walked {} though no fault struck its index file: {error}",
            file.display()
        ));
    }
    let placement = evidence.placement(model);
    let Some(record) = placement.at(file, *offset) else {
        return Err(format!(
            "a read refused {}:{offset}, where no acknowledged record starts: {error}",
            file.display()
        ));
    };
    let damaged = evidence.damage_within(file, &record.bytes()).is_some();
    // The engine reads a record again once before it reports damage.
    let flipped_twice = read_flips_within(faults, file, &record.bytes()) >= 2;
    match (walked, damaged, flipped_twice) {
        (true, true, _) | (true, _, true) => return Ok(Excuse::WalkedPastDamage),
        (false, true, _) => return Ok(Excuse::ReadOfDamagedRecord),
        (false, false, true) => return Ok(Excuse::ReadFlippedTwice),
        _ => {}
    }
    Err(format!(
        "a read refused seq {} at {}:{offset} ({error}) but no fault touched its bytes (damage {:?}, read faults {faults:?})",
        record.seq,
        file.display(),
        evidence.damage()
    ))
}

/// Open refused the directory by `rule`, at `file` and `offset`: only if
/// damage at rest touched the record it names (or, past the acknowledged
/// records, anything from there on; for the structure, the file).
pub(crate) fn refusal(
    file: &Path,
    offset: u64,
    rule: Rule,
    model: &Model,
    evidence: &Evidence<'_>,
) -> Result<Excuse, String> {
    let placement = evidence.placement(model);
    if rule == Rule::SeqAtDamage
        && offset >= placement.end_in(file)
        && evidence.copied_mid_record(file, offset, &placement)
    {
        return Ok(Excuse::OpenRefusedCopy);
    }
    let bytes = match placement.at(file, offset) {
        _ if rule == Rule::Structure => 0..u64::MAX,
        Some(record) => record.bytes(),
        None if offset >= placement.end_in(file) => offset..u64::MAX,
        None => {
            return Err(format!(
                "Open refused {}:{offset} by rule {:?}, inside an acknowledged record",
                file.display(),
                rule
            ));
        }
    };
    if !rule.refuses() {
        return Err(format!("a refusal by {rule:?}, a rule that truncates"));
    }
    match evidence.damage_within(file, &bytes) {
        Some(_) => Ok(Excuse::OpenRefusedDamage),
        None => Err(format!(
            "Open refused {}:{offset} by rule {rule:?} but no damage touched bytes {bytes:?} there (damage: {:?})",
            file.display(),
            evidence.damage()
        )),
    }
}

/// Recovery lost acknowledged records `recovered + 1 ..= acked`: only the
/// last one, if a bit flipped at rest inside it (nothing after it proves it
/// was synced, so it looks exactly like a torn write of it); or the ones
/// from the first that a misdirected write damaged, if the evidence of it
/// is gone (`misdirected_copy_gone`). `model` is from before the loss.
pub(crate) fn lost_records(
    recovered: u64,
    acked: u64,
    model: &Model,
    evidence: &Evidence<'_>,
) -> Result<Excuse, String> {
    let placement = evidence.placement(model);
    let last = placement.of(acked);
    let flipped = |seq| {
        placement.of(seq).is_some_and(|placed| {
            evidence.damage().iter().any(|damage| {
                damage.kind == FaultKind::BitFlipAtRest
                    && *damage.path == *placed.file
                    && placed.bytes().contains(&damage.offset)
            })
        })
    };
    // The last record flipped, or every record from the first lost one
    // on: no valid record follows the first damage to prove it synced.
    if (recovered + 1..=acked).all(flipped) {
        return Ok(Excuse::LastRecordFlippedAtRest);
    }
    if let Some(first) = placement.of(recovered + 1)
        && misdirected_copy_gone(first, model, evidence)
    {
        return Ok(Excuse::MisdirectedCopyGone);
    }
    Err(format!(
        "acknowledged records {}..={acked} were lost; only a bit flipped at rest in the last record, or a misdirected write whose copy is gone, can excuse a loss (last record at {last:?}, damage: {:?})",
        recovered + 1,
        evidence.damage()
    ))
}

/// Whether a misdirected write hit `first` and the file as recovery read
/// it no longer held the evidence: meant to put `first` in its place, the
/// write left no copy of it where it landed, whole or one bit off (later
/// writes covered it, or a cut-back or truncation took it); or landing on
/// `first`, no valid record of what it wrote is left where it landed (cut
/// off, or a crash lost its pages). The damage stays, its proof is gone:
/// what is left looks like what a torn write leaves. So is a copy that
/// starts before `first`'s place: recovery, reading from there on, never
/// sees its start.
fn misdirected_copy_gone(first: &Placed, model: &Model, evidence: &Evidence<'_>) -> bool {
    let read: &[u8] = evidence
        .before_open
        .iter()
        .find(|(path, _)| **path == *first.file)
        .map_or(&[], |(_, bytes)| bytes.as_slice());
    let encoded = model
        .encoded_records()
        .find(|(seq, _)| *seq == first.seq)
        .map(|(_, bytes)| bytes);
    evidence.damage().iter().any(|damage| {
        let Some(intended) = damage.intended_offset else {
            return false;
        };
        let landed = damage.offset..damage.offset + damage.len;
        let meant = intended..intended + damage.len;
        if *damage.path != *first.file {
            return false;
        }
        if meant.contains(&first.offset) {
            let copy_at = damage.offset + (first.offset - intended);
            // Its copy starts before the damage, inside the last record
            // recovery kept (over bytes equal to its own, or recovery had
            // not kept it): recovery looks for later records only from
            // the damage on (seed 19983, as 34597 below).
            if copy_at < first.offset {
                return true;
            }
            let copy_at = copy_at as usize;
            let copy = encoded.and_then(|encoded| read.get(copy_at..copy_at + encoded.len()));
            return !matches!((copy, encoded), (Some(copy), Some(encoded)) if bits_apart(copy, encoded) <= 1);
        }
        // Recovery looks for later records only from the damage on: a
        // copy that starts inside the last record it kept (whose bytes
        // under the copy happened to be the copy's own, seed 34597) is
        // no evidence it can see.
        let visible = landed.start.max(first.offset)..landed.end;
        overlaps(&landed, &first.bytes()) && !holds_a_record_from(read, &visible, first.seq)
    })
}

/// Whether a valid record with a seq of `seq` or more starts in `range`
/// of `bytes`: what a misdirected write left that recovery can go by.
fn holds_a_record_from(bytes: &[u8], range: &Range<u64>, seq: u64) -> bool {
    let end = (range.end as usize).min(bytes.len());
    (range.start as usize..end).any(|at| {
        let claimed = bytes
            .get(at + 8..at + 16)
            .map(|field| u64::from_le_bytes(field.try_into().expect("8 bytes")));
        claimed.is_some_and(|claimed| claimed >= seq && claimed - seq < 1 << 32)
            && golden::parse(&bytes[at..]).is_some()
    })
}

fn bits_apart(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// The kinds of fault that make a disk operation fail with an error.
fn fails_an_operation(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::FailedFsync
            | FaultKind::ShortWrite
            | FaultKind::NoSpace
            | FaultKind::Crash
            | FaultKind::ReadError
    )
}

/// Whether `faults` (injected during one call) can make it fail with an
/// I/O error: an operation failed, or reads kept disagreeing (a read that
/// two reads in a row do not confirm is never believed).
pub(crate) fn explains_io_error(faults: &[FaultEvent]) -> bool {
    faults.iter().any(|fault| fails_an_operation(fault.kind))
        || faults
            .iter()
            .filter(|fault| fault.kind == FaultKind::BitFlipOnRead)
            .count()
            >= 2
}

/// A call that returned Ok: no read error may have fired during it
/// (`faults`). The engine retries no read, so a failed read it went on
/// from was swallowed: it took bytes it never read for the file's.
pub(crate) fn no_read_error_swallowed(
    what: impl FnOnce() -> String,
    faults: &[FaultEvent],
) -> Check {
    match faults
        .iter()
        .find(|fault| fault.kind == FaultKind::ReadError)
    {
        None => Ok(()),
        Some(fault) => Err(format!(
            "{} succeeded, yet a read of {} at offset {} failed during it (read-error): \
             the error was swallowed",
            what(),
            fault.path.display(),
            fault.offset
        )),
    }
}

/// An Open that failed other than by a power loss or a refusal: an I/O
/// error that a fault injected during it explains.
pub(crate) fn failed_open(error: &Error, faults: &[FaultEvent]) -> Check {
    match error {
        Error::Io(_) if explains_io_error(faults) => Ok(()),
        error => Err(format!(
            "Open failed with no fault to explain it: {error} (faults during it: {faults:?})"
        )),
    }
}

//! What the first damaged record means: FORMAT.md's decision list, in code.
//!
//! Only the log's last write can be unsynced at a crash, and it starts at
//! the end of the acknowledged records (everything before was synced). So
//! a torn write leaves, after the damage at offset `d` (where seq `e` was
//! expected), only bytes that write put there, zeros, and at most one
//! sector of garbage; every valid record after `d` is one of its records,
//! at the very offset it wrote it to. Anything else proves the damage is
//! in acknowledged data:
//!
//! | rule | the bytes at and after the damage | decision |
//! |---|---|---|
//! | [`Rule::Sealed`] | the damage is in a segment a later one follows, or in a record a truncation under way keeps | refuse |
//! | [`Rule::ZeroTail`] | zeros only, to the end of the file | end of the log |
//! | [`Rule::SeqAtDamage`] | a record at `d` (valid, or its header alone) with a seq above `e` | refuse (misplaced) |
//! | [`Rule::BeyondGroup`] | a valid later record ends past the group window | refuse (synced damage) |
//! | [`Rule::SingleBit`] | one flipped bit makes the record valid, and the next follows | refuse (flip at rest) |
//! | [`Rule::Misplaced`] | a valid later record where the torn write cannot have put it | refuse (misplaced) |
//! | [`Rule::Repeated`] | none of the above, and a valid record at `d` with a seq below `e` | repeated record: truncate |
//! | [`Rule::Torn`] | none of the above | torn tail: truncate |
//!
//! The rules are tried in this order (`DECISION_LIST`, from the zero tail
//! on), each on one stable copy of the bytes
//! (read until two reads agree), and the first that applies decides.
//! The later records the rules that look beyond `d` weigh are the valid
//! records (CRC and batch) after `d` whose seq is at least `e`; an older seq would
//! be a copy of an acknowledged record, which an event's data may
//! legitimately carry.
//!
//! A record with an older seq is never evidence, at `d` either: the CRC
//! covers the seq so that a valid record copied to the wrong place (a
//! stale page, a duplicated write: the seed's "repeated record") fails
//! against the seq it claims, and in the last segment that is garbage a
//! crash leaves. Only a seq above `e` at `d` shows that the expected
//! record's group went elsewhere. (A valid record with a seq of `e` or more inside an
//! event's data, say a record of another log stored as an event, could
//! make a torn tail look misplaced: Open would refuse where it could have
//! truncated. That takes a foreign record with a future seq at a place a
//! crash exposes; FORMAT.md lists it.)

use std::cell::OnceCell;
use std::convert::Infallible;
use std::path::Path;

use durlog_vfs::SECTOR_BYTES;

use crate::format::{HEADER_SEQ_FIELD, Header, inspect_batch, parse_record, single_bit_repair};
use crate::segment::Window;

use super::later::{LaterRecord, later_records, misplaced};
use super::reread::{Read, read_until_two_agree};
use super::{Defect, Refusal, Scanner, Tail, corrupt};

/// The most bytes one group commit writes in a single write-and-sync,
/// unless a single record is larger (it is then a group of its own), and
/// the window recovery assumes by default (`Tuning::group_bytes_max` may
/// only lower it).
///
/// This bounds what a torn write can damage. Only the last group can be
/// unsynced at a crash, and every earlier byte was synced. So damage at
/// offset `X` of the last segment, followed by a valid record (with a later
/// seq) that ends more than the window past `X`, cannot be a torn write:
/// `X` and that record cannot both belong to the last group, so `X` was
/// synced, and Open refuses with `Corrupt`.
///
/// What stays ambiguous, and is truncated as a torn tail: damage confined
/// to the last record of the log (no record follows to prove it was
/// synced; a single flipped bit there is reported as "may have been
/// acknowledged"), and damage of more than one bit in the last group's
/// window that leaves no valid record after it.
pub const GROUP_BYTES_MAX: u64 = 1 << 20;

/// The rules of FORMAT.md's decision list (see the module doc's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// The directory's structure is wrong: a missing segment, a seq gap, a
    /// file named like a segment that is not one. Refused.
    Structure,
    /// Damage in a segment that a later one follows. Refused.
    Sealed,
    /// Zeros from the damage to the end of the file: the end of the log.
    ZeroTail,
    /// A record at the damage (valid, or its header alone) with a seq above
    /// the expected one: a misplaced write. Refused.
    SeqAtDamage,
    /// A valid record ends beyond the group window past the damage: the
    /// damage was synced. Refused.
    BeyondGroup,
    /// One flipped bit makes the damaged record the expected one, and the
    /// next record follows it: a bit flipped at rest. Refused.
    SingleBit,
    /// A valid record after the damage where the torn last write cannot
    /// have put it: a misplaced write. Refused.
    Misplaced,
    /// None of the refusing rules apply, and a valid record with a seq
    /// below the expected one stands at the damage: a stale or repeated
    /// copy of an earlier record, garbage a crash leaves. Open truncates it
    /// like a torn tail.
    Repeated,
    /// None of the above: a torn tail, which Open truncates.
    Torn,
}

impl Rule {
    /// Every rule, in the order of the decision list.
    pub const ALL: [Rule; 9] = [
        Rule::Structure,
        Rule::Sealed,
        Rule::ZeroTail,
        Rule::SeqAtDamage,
        Rule::BeyondGroup,
        Rule::SingleBit,
        Rule::Misplaced,
        Rule::Repeated,
        Rule::Torn,
    ];

    /// A short name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Structure => "structure",
            Rule::Sealed => "sealed segment",
            Rule::ZeroTail => "zero tail",
            Rule::SeqAtDamage => "seq at the damage",
            Rule::BeyondGroup => "beyond the group window",
            Rule::SingleBit => "single bit with a follower",
            Rule::Misplaced => "misplaced record",
            Rule::Repeated => "repeated record",
            Rule::Torn => "torn",
        }
    }

    /// Whether Open refuses when this rule decides.
    pub fn refuses(self) -> bool {
        !matches!(self, Rule::ZeroTail | Rule::Repeated | Rule::Torn)
    }
}

/// What the rules read: the damage in the last segment, the bytes from it
/// to the end of the file (one stable copy), and the later records among
/// them, found once for the rules that weigh them.
struct Damage<'a> {
    rest: &'a [u8],
    offset: u64,
    /// The seq the chain expects at `offset`.
    expected: u64,
    defect: &'a Defect,
    later: OnceCell<Vec<LaterRecord>>,
    /// The damaged record repaired by one bit (its length and the bit),
    /// found once for the rule that weighs it and the torn tail's report.
    repaired: OnceCell<Option<(usize, u64)>>,
}

impl Damage<'_> {
    fn later_records(&self) -> &[LaterRecord] {
        self.later
            .get_or_init(|| later_records(self.rest, self.offset, self.expected))
    }

    fn repaired_by_one_bit(&self, scanner: &Scanner) -> Option<(usize, u64)> {
        *(self.repaired).get_or_init(|| scanner.repaired_by_one_bit(self.rest))
    }
}

/// A rule's test: the reason it gives, if it applies.
type Applies = fn(&Scanner, &Damage<'_>) -> Option<String>;

/// FORMAT.md's decision list from the zero tail on, as data: the rules
/// that read the bytes after the damage, in the order they are tried; the
/// first that applies decides. ([`Rule::Structure`] and [`Rule::Sealed`]
/// come first and read no bytes: the scan and [`Scanner::decide`] take
/// them.) Tested against [`Rule::ALL`] and both tables.
const DECISION_LIST: [(Rule, Applies); 7] = [
    (Rule::ZeroTail, |_, damage| {
        crate::format::all_zeros(damage.rest).then(String::new)
    }),
    (Rule::SeqAtDamage, Scanner::seq_at_damage),
    (Rule::BeyondGroup, Scanner::beyond_group),
    (Rule::SingleBit, Scanner::single_bit),
    (Rule::Misplaced, Scanner::misplaced_record),
    (Rule::Repeated, Scanner::repeated),
    (Rule::Torn, |_, damage| Some(damage.defect.to_string())),
];

impl Scanner {
    /// Decides what damage at `offset` means, as the module doc's table
    /// says: the tail's state and the rule that decided it, or a refusal.
    pub(super) fn decide(
        &self,
        window: &mut Window<'_>,
        path: &Path,
        offset: u64,
        is_last: bool,
        defect: Defect,
    ) -> Result<(Tail, Rule), Refusal> {
        if !is_last {
            return Err(corrupt(
                Rule::Sealed,
                path,
                offset,
                format!(
                    "{defect} (in a sealed segment: acknowledged data is damaged; restore the file from a replica or backup)"
                ),
            ));
        }
        // A truncation is decided only below the last acknowledged seq:
        // the records it keeps were synced, and their damage is never a
        // torn tail, though the segment it cuts has become the last (its
        // damage unread until now by an Open that trusted its index file).
        if self.stop_after != u64::MAX && self.next_seq <= self.stop_after {
            return Err(corrupt(
                Rule::Sealed,
                path,
                offset,
                format!(
                    "{defect} (seq {} is kept by the truncation under way, which only acknowledged records precede: acknowledged data is damaged; restore the file from a replica or backup)",
                    self.next_seq
                ),
            ));
        }
        let bytes = window.file_len() - offset;
        // Every rule below reads the evidence from one stable copy: a
        // flaky read must not hide the record that proves damage.
        let rest = stable_bytes(window, path, offset, bytes)?;
        let damage = Damage {
            rest: &rest,
            offset,
            expected: self.next_seq,
            defect: &defect,
            later: OnceCell::new(),
            repaired: OnceCell::new(),
        };
        let (rule, reason) = (DECISION_LIST.iter())
            .find_map(|(rule, applies)| Some((*rule, applies(self, &damage)?)))
            .expect("the list's last rule, torn, always applies");
        let file = path.to_path_buf();
        match rule {
            Rule::ZeroTail => Ok((
                Tail::Zeros {
                    file,
                    offset,
                    bytes,
                },
                rule,
            )),
            rule if rule.refuses() => Err(corrupt(rule, path, offset, reason)),
            rule => {
                let may_be_acknowledged = damage.repaired_by_one_bit(self).is_some();
                let torn = Tail::Torn {
                    file,
                    offset,
                    bytes,
                    reason,
                    may_be_acknowledged,
                };
                Ok((torn, rule))
            }
        }
    }

    /// [`Rule::SeqAtDamage`]: a valid record at the damage, or a header a
    /// tear cannot spell, claims a seq above the expected one.
    fn seq_at_damage(&self, damage: &Damage<'_>) -> Option<String> {
        let (rest, offset, expected) = (damage.rest, damage.offset, damage.expected);
        if claims_an_older_seq(rest, offset, expected) {
            durlog_vfs::mark!("recovery: an older seq at the damage passed over");
        }
        if let Ok(record) = parse_record(rest)
            && record.seq > expected
        {
            return Some(format!(
                "a valid record with seq {} stands where seq {expected} belongs: a misplaced or misdirected write, not a torn one; acknowledged data is damaged",
                record.seq
            ));
        }
        let claimed = Header::peek(rest).map(|header| header.seq)?;
        (seq_field_in_one_sector(offset) && claims_a_later_seq(claimed, expected)).then(|| {
            format!(
                "{}, and its header claims seq {claimed} where seq {expected} belongs: the start of another record, a misplaced or misdirected write, not a torn one; acknowledged data is damaged",
                damage.defect
            )
        })
    }

    /// [`Rule::BeyondGroup`]: a later record ends past the group window.
    fn beyond_group(&self, damage: &Damage<'_>) -> Option<String> {
        let later = (damage.later_records().iter())
            .find(|later| (later.at + later.len) as u64 > self.group_bytes_max)?;
        Some(format!(
            "{}, yet a valid record (seq {}) lies at offset {}, beyond what one torn write can reach: acknowledged data is damaged",
            damage.defect,
            later.seq,
            damage.offset + later.at as u64
        ))
    }

    /// [`Rule::SingleBit`]: one flipped bit makes the damaged record the
    /// expected one, and the next follows it.
    fn single_bit(&self, damage: &Damage<'_>) -> Option<String> {
        let flipped_bit = self.single_bit_flip_before_valid_record(damage)?;
        Some(format!(
            "{}; flipping bit {flipped_bit} of this record makes it valid and a valid record follows it, so it was synced: a bit flipped at rest in acknowledged data",
            damage.defect
        ))
    }

    /// [`Rule::Misplaced`]: a later record where the torn write cannot
    /// have put it.
    fn misplaced_record(&self, damage: &Damage<'_>) -> Option<String> {
        let (rest, offset, expected) = (damage.rest, damage.offset, damage.expected);
        let (misplaced, why) = misplaced(rest, offset, expected, damage.later_records())?;
        Some(format!(
            "{}, yet a {} with seq {} lies at offset {}, where the torn last write cannot have put it ({why}): a misplaced or misdirected write; acknowledged data is damaged",
            damage.defect,
            if misplaced.repaired {
                "record valid but for one flipped bit"
            } else {
                "valid record"
            },
            misplaced.seq,
            offset + misplaced.at as u64
        ))
    }

    /// [`Rule::Repeated`]: a valid record with an older seq at the damage.
    fn repeated(&self, damage: &Damage<'_>) -> Option<String> {
        let record = parse_record(damage.rest).ok()?;
        (record.seq < self.next_seq).then(|| {
            durlog_vfs::mark!("recovery: a repeated record truncated");
            format!(
                "a valid record with seq {} stands where seq {} belongs: a stale or repeated copy of an earlier record, garbage a crash leaves",
                record.seq, self.next_seq
            )
        })
    }

    /// The damaged record at the front of `bytes`, repaired by one bit, if
    /// that makes it the record the chain expects: the bit.
    fn repaired_by_one_bit(&self, bytes: &[u8]) -> Option<(usize, u64)> {
        let (repaired, bit) = single_bit_repair(bytes)?;
        let record = parse_record(&repaired).ok()?;
        let batch = inspect_batch(record.payload).ok()?;
        let expected_version = self.index.version(batch.stream) + 1;
        (record.seq == self.next_seq && batch.first_version == expected_version)
            .then_some((record.len, bit))
    }

    /// If the damaged record (at the front of `damage.rest`) becomes a valid
    /// record by flipping one bit, and that record is the one the chain
    /// expects, and a valid record with the next seq follows it: the bit
    /// (counted from the record's start) that flipped. A torn write leaves
    /// a prefix, or loses whole pages; it does not flip one bit of a record
    /// and leave the next record intact.
    fn single_bit_flip_before_valid_record(&self, damage: &Damage<'_>) -> Option<u64> {
        let (len, bit) = damage.repaired_by_one_bit(self)?;
        let bytes = damage.rest;
        let next = parse_record(bytes.get(len..)?).ok()?;
        (next.seq == self.next_seq + 1 && inspect_batch(next.payload).is_ok()).then_some(bit)
    }
}

/// Whether the seq field of a header at `offset` lies in one sector: only
/// then does a tear leave it either whole, cut short to zeros, or cut and
/// followed by garbage to its last byte (a garbage run that stops at a
/// sector end inside the field, with zeros after, can spell any small seq).
fn seq_field_in_one_sector(offset: u64) -> bool {
    let first_byte = offset + HEADER_SEQ_FIELD.start as u64;
    let last_byte = offset + HEADER_SEQ_FIELD.end as u64 - 1;
    first_byte / SECTOR_BYTES == last_byte / SECTOR_BYTES
}

/// Whether a damaged record's header, claiming seq `claimed` where
/// `expected` belongs, is the start of a later record: a torn write leaves
/// the expected header, a prefix of it followed by zeros (its low bytes,
/// never more than `expected`), or garbage, which lands among the seqs a
/// log can reach soon (`expected + 1` to `expected + 2^32`) once in about
/// 2^32 tears. An older seq proves nothing: a stale or repeated copy of an
/// earlier record is garbage a crash leaves.
fn claims_a_later_seq(claimed: u64, expected: u64) -> bool {
    claimed > expected && claimed < expected.saturating_add(1 << 32)
}

/// Whether the record at the front of `rest` (at `offset`) is, or begins
/// as, a copy of an older record: valid with a seq below `expected`, or
/// with a header claiming one that no tear of the expected header spells.
/// The rules pass such a copy over (a stale page, a repeated record);
/// until 2026-12-01 they refused it.
fn claims_an_older_seq(rest: &[u8], offset: u64, expected: u64) -> bool {
    if parse_record(rest).is_ok_and(|record| record.seq < expected) {
        return true;
    }
    let cut_short =
        |claimed: u64| (1..8).any(|bytes| claimed == expected & ((1u64 << (8 * bytes)) - 1));
    Header::peek(rest).is_some_and(|header| {
        (1..expected).contains(&header.seq)
            && seq_field_in_one_sector(offset)
            && !cut_short(header.seq)
    })
}

/// `len` bytes at `offset`, read until two reads in a row agree. Evidence
/// is never accepted on one read: every read of it is suspect, and the
/// bytes returned are the ones two reads in a row agreed on.
fn stable_bytes(
    window: &mut Window<'_>,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Refusal> {
    let agreed = read_until_two_agree(path, Some(offset), |again| {
        if again {
            window.invalidate();
        }
        let bytes = window.bytes(offset, len)?.to_vec();
        Ok(Read::<Infallible, _>::Suspect(bytes))
    })?;
    let Read::Suspect(bytes) = agreed;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{DECISION_LIST, Rule, claims_a_later_seq};

    /// The decision list that recovery runs is the one both tables give,
    /// in the same order: [`Rule::ALL`], the module doc's table (by
    /// variant) and FORMAT.md's (by name). A rule moved in one place
    /// alone fails here.
    #[test]
    fn the_rules_run_in_the_order_the_tables_give() {
        let run: Vec<Rule> = [Rule::Structure, Rule::Sealed]
            .into_iter()
            .chain(DECISION_LIST.iter().map(|(rule, _)| *rule))
            .collect();
        assert_eq!(run, Rule::ALL, "Rule::ALL");
        let tabled = &Rule::ALL[1..];
        let source = include_str!("decide.rs");
        let module_doc: Vec<Rule> = (source.lines())
            .filter_map(|line| {
                let name = line.strip_prefix("//! | [`Rule::")?.split('`').next()?;
                Rule::ALL
                    .into_iter()
                    .find(|rule| format!("{rule:?}") == name)
            })
            .collect();
        assert_eq!(module_doc, tabled, "the module doc's table");
        let format_md = include_str!("../../../FORMAT.md");
        let format_table: Vec<Rule> = (format_md.lines())
            .filter_map(|line| {
                let name = line.strip_prefix("| ")?.split(" |").next()?;
                Rule::ALL.into_iter().find(|rule| rule.name() == name)
            })
            .collect();
        assert_eq!(format_table, tabled, "FORMAT.md's decision list");
    }

    /// A tear inside the seq field leaves the expected seq's low bytes and
    /// zeros: that is the expected record cut short, never a later one; an
    /// older seq is a stale copy's, garbage.
    #[test]
    fn only_a_later_seq_is_another_record() {
        let expected = 0x0001_0203_0405;
        for bytes in 1..8 {
            let cut = expected & ((1u64 << (8 * bytes)) - 1);
            assert!(
                !claims_a_later_seq(cut, expected),
                "cut after {bytes} bytes"
            );
        }
        assert!(!claims_a_later_seq(expected, expected));
        assert!(!claims_a_later_seq(0, expected), "zeros");
        assert!(!claims_a_later_seq(u64::MAX, expected), "garbage far off");
        assert!(!claims_a_later_seq(expected - 7, expected), "an older copy");
        assert!(claims_a_later_seq(expected + 1, expected));
        assert!(claims_a_later_seq(expected + (1 << 32) - 1, expected));
        assert!(!claims_a_later_seq(expected + (1 << 32), expected));
        assert!(claims_a_later_seq(2, 1));
    }
}

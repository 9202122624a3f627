//! The records after the damage in the last segment, and where the torn
//! last write cannot have put them: the evidence the rules "beyond the
//! group window" and "misplaced record" weigh (`decide.rs`; FORMAT.md,
//! "Recovery"). Every function here reads bytes and decides nothing.

use durlog_vfs::{PAGE_BYTES, SECTOR_BYTES};

use crate::format::{
    HEADER_SEQ_FIELD, HEADER_SIZE, Header, RECORD_BYTES_MIN, first_version_at, inspect_batch,
    parse_record, single_bit_repair, u16_at, u64_at,
};

/// A valid record found after the damage, which the rules that look beyond
/// it weigh as evidence: its offset from the damage, its seq and its
/// length; `repaired` if it is valid only with one bit flipped back (a
/// record that was whole where it lay, then flipped at rest).
#[derive(Clone, Copy, Debug)]
pub(super) struct LaterRecord {
    pub at: usize,
    pub seq: u64,
    pub len: usize,
    pub repaired: bool,
}

/// The valid records (CRC and batch) that start after the front of `rest`
/// (which starts at `offset` of the file) with a seq from `expected` to
/// `expected + 2^32`, in offset order; at sector boundaries, where a
/// misdirected write lands, also records one flipped bit away from valid.
/// The cheap test of the seq field comes before any CRC, so zeros and
/// random data are passed over quickly (a random seq field passes with a
/// chance of 2^-32); no log grows by 2^32 records between two syncs.
pub(super) fn later_records(rest: &[u8], offset: u64, expected: u64) -> Vec<LaterRecord> {
    let seq_max = expected.saturating_add(u64::from(u32::MAX));
    let mut found = Vec::new();
    for at in seq_candidates(rest, expected, seq_max) {
        let header = Header::peek(&rest[at..]).expect("a whole header from here");
        let sector_start = (offset + at as u64).is_multiple_of(SECTOR_BYTES);
        if let Some((len, repaired)) = record_at(&rest[at..], sector_start) {
            found.push(LaterRecord {
                at,
                seq: header.seq,
                len,
                repaired,
            });
        }
    }
    found
}

/// The offsets after the front of `rest` where a whole header fits and
/// its seq field holds `expected..=seq_max`, in order. Runs of bytes that
/// cannot hold one are passed over eight bytes at a time: where the seqs
/// in range share a top byte, every header whose seq field ends in another
/// byte up to the next such byte; and a seq field of zeros (below any
/// `expected` but 0) up to the next byte that is not zero. Recovery reads
/// every byte after a damage this way, at every reopen after a torn write.
fn seq_candidates(rest: &[u8], expected: u64, seq_max: u64) -> Vec<usize> {
    let end = rest.len().saturating_sub(HEADER_SIZE - 1);
    let top_at = HEADER_SEQ_FIELD.end - 1;
    let top = (expected >> 56 == seq_max >> 56).then_some((expected >> 56) as u8);
    let mut found = Vec::new();
    let mut at = 1;
    while at < end {
        let seq = u64_at(rest, at + HEADER_SEQ_FIELD.start).expect("a whole header from here");
        let mut next = at + 1;
        if (expected..=seq_max).contains(&seq) {
            found.push(at);
        } else if let Some(top) = top.filter(|&top| rest[at + top_at] != top) {
            next = next.max(first_equal(rest, at + top_at + 1, top).saturating_sub(top_at));
        } else if seq == 0 && expected > 0 {
            next = next.max(first_unequal(rest, at + top_at + 1, 0).saturating_sub(top_at));
        }
        at = next;
    }
    found
}

/// A one in each byte of a word: `LOW * byte` is `byte` eight times.
const LOW: u64 = 0x0101_0101_0101_0101;

/// Eight bytes at `at`, read as one word in memory order (the first byte
/// lowest).
fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64_at(bytes, at).expect("eight bytes from here")
}

/// The index of the first byte from `from` on that is `byte` (the length
/// if none).
fn first_equal(bytes: &[u8], from: usize, byte: u8) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = from;
    while at + 8 <= bytes.len() {
        let equal_bytes_zero = word_at(bytes, at) ^ (LOW * u64::from(byte));
        // The lowest byte this flags is the first zero byte exactly (a
        // borrow flags only bytes above a zero one).
        let flags = equal_bytes_zero.wrapping_sub(LOW) & !equal_bytes_zero & HIGH;
        if flags != 0 {
            return at + (flags.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    (bytes.get(at..).unwrap_or_default().iter())
        .position(|&found| found == byte)
        .map_or(bytes.len(), |index| at + index)
}

/// The index of the first byte from `from` on that is not `byte` (the
/// length if none).
fn first_unequal(bytes: &[u8], from: usize, byte: u8) -> usize {
    let mut at = from;
    while at + 8 <= bytes.len() {
        let differ = word_at(bytes, at) ^ (LOW * u64::from(byte));
        if differ != 0 {
            return at + (differ.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    (bytes.get(at..).unwrap_or_default().iter())
        .position(|&found| found != byte)
        .map_or(bytes.len(), |index| at + index)
}

/// The length of the record at the front of `bytes` if it is valid (CRC
/// and batch), or with `repair`, valid once one bit is flipped back (and
/// then its seq field is the one its header shows: the flip was elsewhere).
fn record_at(bytes: &[u8], repair: bool) -> Option<(usize, bool)> {
    if let Ok(record) = parse_record(bytes) {
        return inspect_batch(record.payload)
            .is_ok()
            .then_some((record.len, false));
    }
    if !repair {
        return None;
    }
    let (repaired, _) = single_bit_repair(bytes)?;
    let record = parse_record(&repaired).ok()?;
    let same_seq = Header::peek(bytes).is_some_and(|header| header.seq == record.seq);
    (same_seq && inspect_batch(record.payload).is_ok()).then_some((record.len, true))
}

/// A later record the torn last write cannot have put where it is, and why.
/// That write put record `e` (`expected`) at the damage (`offset`) and
/// each later record right after the one before, so a record of it with
/// seq `s` lies at least `(s - e) x RECORD_BYTES_MIN` bytes after the
/// damage, outside the damaged record's own extent (when its header is
/// the write's own: it carries seq `e`), after every record of it with a
/// lower seq, and in a later page than the damage: a page of the write
/// that kept a later record kept record `e` too, whole, had it been there.
pub(super) fn misplaced(
    rest: &[u8],
    offset: u64,
    expected: u64,
    later_records: &[LaterRecord],
) -> Option<(LaterRecord, &'static str)> {
    let damage_page = offset / PAGE_BYTES;
    let own_extent = own_extent(rest, offset, expected);
    if let Some(next) = next_header_inside(rest, offset, expected, own_extent) {
        return Some((
            next,
            "the header of the next record, inside the damaged record's own extent",
        ));
    }
    if let Some(kept) = all_pages_kept(rest, offset, own_extent, later_records) {
        return Some((
            kept,
            "every page of the damaged record was kept, which leaves it whole",
        ));
    }
    let mut previous: Option<&LaterRecord> = None;
    for later in later_records {
        let why = if later.seq == expected {
            Some("the expected seq, away from the damage")
        } else if (offset + later.at as u64) / PAGE_BYTES == damage_page {
            Some("in the damaged record's own page, which a crash keeps or loses whole")
        } else if (later.at as u64) < (later.seq - expected) * RECORD_BYTES_MIN {
            Some("too close to the damage for the records before it")
        } else if own_extent.is_some_and(|extent| (later.at as u64) < extent) {
            Some("inside the extent the damaged record's own header claims")
        } else if previous.is_some_and(|previous| previous.seq >= later.seq) {
            Some("after a valid record with a higher seq")
        } else {
            None
        };
        if let Some(why) = why {
            return Some((*later, why));
        }
        previous = Some(later);
    }
    None
}

/// The extent the damaged record's header claims, if that header is the
/// torn write's own: it carries the expected seq, and each page it lies in
/// was kept. Past the acknowledged records a lost page holds zeros, and a
/// tear leaves garbage only to the end of its sector and nothing of the
/// write after it, so a header whose seq reads `expected` and whose bytes
/// in each of its pages are not all zeros is the write's, length and all.
/// (A header across a page boundary whose part in one page is zeros may
/// keep its seq from a kept page and lose its length to a lost one.) The
/// later page starts past the damage, where a lost page holds zeros: it
/// was kept if it holds anything but zeros, in the header or after it
/// (the header's part there may be zeros of its own, the high bytes of a
/// small seq, as `all_pages_kept` reasons for every later page).
fn own_extent(rest: &[u8], offset: u64, expected: u64) -> Option<u64> {
    let header = Header::peek(rest).filter(|header| header.seq == expected)?;
    let split = (PAGE_BYTES - offset % PAGE_BYTES) as usize;
    let kept = |part: &[u8]| part.iter().any(|&byte| byte != 0);
    let whole = match rest[..HEADER_SIZE].split_at_checked(split) {
        Some((first, second)) if !second.is_empty() => {
            let later_page = &rest[split..rest.len().min(split + PAGE_BYTES as usize)];
            let whole = kept(first) && kept(later_page);
            if whole {
                durlog_vfs::mark!(
                    "recovery: a header across a page boundary taken as the write's own"
                );
            }
            whole
        }
        _ => true,
    };
    whole.then(|| header.record_len())
}

/// A crash keeps or loses each page of the last write whole, and keeps
/// nothing of it past where it was torn. The damaged record's first page
/// was kept if its header is the write's own (`own_extent`: lost, it would
/// hold the zeros that were there); a later page was kept if a valid
/// record lies in it, or if it holds anything but zeros (it starts past
/// the damage, so past where the write began, where a lost page holds
/// zeros); and a valid record after the damaged one means the tear came
/// after it too. If every page of the damaged record was kept, with the
/// tear after it, the record is whole, yet it is not: that later record.
fn all_pages_kept(
    rest: &[u8],
    offset: u64,
    own_extent: Option<u64>,
    later_records: &[LaterRecord],
) -> Option<LaterRecord> {
    let extent = own_extent.filter(|&extent| extent <= rest.len() as u64)?;
    let whole = |later: &&LaterRecord| !later.repaired;
    let after = later_records
        .iter()
        .filter(whole)
        .find(|later| later.at as u64 >= extent)?;
    let (first_page, last_page) = (offset / PAGE_BYTES, (offset + extent - 1) / PAGE_BYTES);
    for page in first_page + 1..=last_page {
        let start = (page * PAGE_BYTES - offset) as usize;
        let end = (start + PAGE_BYTES as usize).min(rest.len());
        let holds_a_record = later_records
            .iter()
            .filter(whole)
            .any(|later| later.at < end && start < later.at + later.len);
        if !holds_a_record && crate::format::all_zeros(&rest[start..end]) {
            return None;
        }
    }
    Some(*after)
}

/// A header at a sector boundary inside the damaged record's own extent
/// (when that record's header is the torn write's own, `own_extent`) that
/// claims the very next seq: the start of a write that landed over the
/// damaged record. Inside the extent lie only that record's payload bytes,
/// an event's data, which would have to hold exactly that seq at exactly
/// such a place; FORMAT.md lists the risk. Not the batch's own first
/// version, though: a batch of a stream ahead of the seqs often starts at
/// the next seq, so the 16 bytes whose seq field it is never count (seed
/// 3139 of 2026-12-07, where the record started 11 bytes before a sector
/// boundary and its stream's name took 2 bytes).
fn next_header_inside(
    rest: &[u8],
    offset: u64,
    expected: u64,
    own_extent: Option<u64>,
) -> Option<LaterRecord> {
    let end = own_extent?.min(rest.len() as u64) as usize;
    let first = match (offset % SECTOR_BYTES) as usize {
        0 => SECTOR_BYTES as usize,
        into => SECTOR_BYTES as usize - into,
    };
    let own_first_version = own_first_version_at(rest);
    (first..end).step_by(SECTOR_BYTES as usize).find_map(|at| {
        if Some(at + HEADER_SEQ_FIELD.start) == own_first_version {
            return None;
        }
        let header = Header::peek(&rest[at..])?;
        (header.seq == expected + 1).then(|| LaterRecord {
            at,
            seq: header.seq,
            len: header.record_len() as usize,
            repaired: false,
        })
    })
}

/// Where the damaged record's batch keeps its first version, by the
/// stream name's length its payload starts with (FORMAT.md, "Batch").
fn own_first_version_at(rest: &[u8]) -> Option<usize> {
    let stream_len = u16_at(rest, HEADER_SIZE)?;
    Some(HEADER_SIZE + first_version_at(usize::from(stream_len)))
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::{HEADER_SEQ_FIELD, HEADER_SIZE, first_equal, first_unequal, seq_candidates};

    /// Every offset, tested one by one: what the skips must agree with.
    fn every_offset(rest: &[u8], expected: u64, seq_max: u64) -> Vec<usize> {
        (1..rest.len().saturating_sub(HEADER_SIZE - 1))
            .filter(|&at| {
                let field = &rest[at + HEADER_SEQ_FIELD.start..at + HEADER_SEQ_FIELD.end];
                let seq = u64::from_le_bytes(field.try_into().unwrap());
                (expected..=seq_max).contains(&seq)
            })
            .collect()
    }

    /// Buffers of runs of zeros, of one byte repeated, of random bytes and
    /// of seqs in range and just out of it, at every alignment, with seqs
    /// whose top byte is shared and not: the skips find every offset the
    /// one-by-one test finds.
    #[test]
    fn skipping_finds_what_every_offset_finds() {
        for seed in 0..1000u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let expected = match seed % 4 {
                0 => rng.random_range(0..5u64),
                1 => rng.random_range(1..1u64 << 40),
                2 => (1u64 << 56) - rng.random_range(1..1u64 << 33),
                _ => u64::MAX - rng.random_range(0..1u64 << 33),
            };
            let seq_max = expected.saturating_add(u64::from(u32::MAX));
            let len = rng.random_range(0..400);
            let mut rest = Vec::new();
            while rest.len() < len {
                let len = rng.random_range(1..40);
                match rng.random_range(0..5) {
                    0 => rest.extend(std::iter::repeat_n(0, len)),
                    1 => rest.extend(std::iter::repeat_n(rng.random::<u8>(), len)),
                    2 => rest.extend((0..len).map(|_| rng.random::<u8>())),
                    3 => {
                        let seq =
                            expected.saturating_add(rng.random_range(0..=u64::from(u32::MAX)));
                        rest.extend(seq.to_le_bytes());
                    }
                    _ => rest.extend(expected.wrapping_sub(1).to_le_bytes()),
                }
            }
            assert_eq!(
                seq_candidates(&rest, expected, seq_max),
                every_offset(&rest, expected, seq_max),
                "seed {seed}, expected {expected}"
            );
            for from in 0..=rest.len() {
                let byte = rng.random::<u8>() & 3;
                let equal =
                    (rest[from..].iter().position(|&b| b == byte)).map_or(rest.len(), |i| from + i);
                let unequal =
                    (rest[from..].iter().position(|&b| b != byte)).map_or(rest.len(), |i| from + i);
                assert_eq!(first_equal(&rest, from, byte), equal, "seed {seed}");
                assert_eq!(first_unequal(&rest, from, byte), unequal, "seed {seed}");
            }
        }
    }
}

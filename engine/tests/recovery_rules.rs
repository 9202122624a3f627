//! FORMAT.md's decision list, one shape at a time, written by hand: for
//! each rule, the bytes after the first damaged record of the last
//! segment that make it decide, and what Open then does. The shapes a
//! torn write can leave are truncated; every shape that proves
//! acknowledged data was damaged (a misplaced or misdirected write, a bit
//! flipped at rest, damage beyond the group window) is refused with the
//! file and the damaged record's offset, and the directory is untouched.

mod common;

use common::{Backend, clock};
use durlog::{
    Error, Event, Expected, Options, RecoveryReport, Rule, Tail, Tuning, append_record,
    encode_batch, recovery,
};

const SEG1: &str = "00000000000000000001.log";

/// Record `seq` of stream `s` (version `seq`), with `data_len` data bytes.
fn record(seq: u64, data_len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..data_len).map(|i| (i as u64 * 31 + seq) as u8).collect();
    let mut event = Event::new("t", data);
    event.at = 0;
    let mut out = Vec::new();
    append_record(&mut out, seq, &encode_batch("s", seq, &[event]));
    out
}

/// Records 1..=3 of 40 data bytes: 86 bytes each, the damage at 258.
fn acknowledged() -> Vec<u8> {
    (1..=3).flat_map(|seq| record(seq, 40)).collect()
}

const DAMAGE_AT: u64 = 258;

/// Writes `bytes` as the only segment and opens it with `group_bytes_max`.
fn open_shape(
    backend: &Backend,
    bytes: &[u8],
    group_bytes_max: u64,
) -> Result<RecoveryReport, (Error, Option<Rule>)> {
    backend.vfs().create_dir_all(&backend.dir()).unwrap();
    backend.write_file(SEG1, bytes);
    let tuning = Tuning::default().with(|tuning| {
        tuning.group_bytes_max = group_bytes_max;
    });
    let checked = recovery::check(&*backend.vfs(), &backend.dir(), group_bytes_max);
    let opened = durlog::Log::open_tuned(backend.vfs(), backend.dir(), clock(0), tuning);
    match (checked, opened) {
        (Ok(report), Ok(log)) => {
            assert_eq!(log.last_seq(), report.last_seq, "{}", backend.name());
            assert_eq!(log.recovery().decided_by, report.decided_by);
            Ok(report)
        }
        (Err(refusal), Err(error)) => {
            assert_eq!(refusal.error.to_string(), error.to_string());
            Err((error, refusal.rule))
        }
        (checked, opened) => panic!(
            "the read-only check and Open disagree: {checked:?} / {:?}",
            opened.err()
        ),
    }
}

/// Open refuses `bytes` by `rule`, naming the damaged record, and changes
/// nothing.
fn assert_refused(bytes: &[u8], group_bytes_max: u64, rule: Rule, why: &str) {
    assert_refused_at(bytes, DAMAGE_AT, group_bytes_max, rule, why);
}

/// [`assert_refused`] for damage at `damage_at`.
fn assert_refused_at(bytes: &[u8], damage_at: u64, group_bytes_max: u64, rule: Rule, why: &str) {
    for backend in Backend::all() {
        match open_shape(&backend, bytes, group_bytes_max) {
            Err((
                Error::Corrupt {
                    file,
                    offset,
                    reason,
                },
                Some(decided),
            )) => {
                assert_eq!(decided, rule, "{why}: {reason}");
                assert_eq!((file, offset), (backend.path(SEG1), damage_at), "{why}");
            }
            other => panic!("{why} on {}: {other:?}", backend.name()),
        }
        assert_eq!(backend.read_file(SEG1), bytes, "{why}: untouched");
    }
}

/// Open truncates `bytes` at the damage by `rule` and goes on.
fn assert_truncated(bytes: &[u8], rule: Rule, why: &str) {
    for backend in Backend::all() {
        match open_shape(&backend, bytes, durlog::GROUP_BYTES_MAX) {
            Ok(report) => {
                assert_eq!(report.decided_by, Some(rule), "{why}");
                assert_eq!(report.last_seq, 3, "{why}");
            }
            Err((error, rule)) => panic!("{why} on {}: {error} ({rule:?})", backend.name()),
        }
        assert_eq!(backend.read_file(SEG1), acknowledged(), "{why}: cut");
        let log = backend.open(clock(0)).unwrap();
        assert_eq!(
            log.append("s", Expected::Exact(3), &[Event::new("t", "x")])
                .unwrap(),
            4
        );
    }
}

fn shape(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn zeros(len: usize) -> Vec<u8> {
    vec![0; len]
}

#[test]
fn the_shapes_are_what_the_comments_say() {
    assert_eq!(record(4, 40).len(), 86);
    assert_eq!(acknowledged().len() as u64, DAMAGE_AT);
}

#[test]
fn zeros_to_the_end_are_the_end_of_the_log() {
    assert_truncated(
        &shape(&[&acknowledged(), &zeros(4096)]),
        Rule::ZeroTail,
        "zeros",
    );
}

#[test]
fn a_torn_prefix_of_the_last_group_is_truncated() {
    let group = shape(&[&record(4, 40), &record(5, 40)]);
    for cut in [1, 15, 16, 50, 85] {
        assert_truncated(
            &shape(&[&acknowledged(), &group[..cut]]),
            Rule::Torn,
            "torn prefix",
        );
    }
}

/// The first page of the last group lost at the crash (it holds what it
/// held before: the acknowledged records, then zeros) and the next page
/// kept: the later records sit exactly where the group put them, so
/// nothing proves the damage was synced.
#[test]
fn a_lost_page_inside_the_last_group_is_truncated() {
    let group = shape(&[&record(4, 4000), &record(5, 40), &record(6, 40)]);
    let kept = 4096 - DAMAGE_AT as usize;
    let bytes = shape(&[&acknowledged(), &zeros(kept), &group[kept..]]);
    assert_truncated(&bytes, Rule::Torn, "lost page");
}

/// The same group with its first page kept and a later one lost: record
/// 4 is whole, record 5 starts in the lost page. Truncated after record 4.
#[test]
fn a_kept_page_then_a_lost_one_is_truncated_after_the_last_whole_record() {
    let group = shape(&[&record(4, 3700), &record(5, 400), &record(6, 40)]);
    let mut bytes = shape(&[&acknowledged(), &group]);
    bytes[4096..].iter_mut().for_each(|byte| *byte = 0);
    for backend in Backend::all() {
        let report = open_shape(&backend, &bytes, durlog::GROUP_BYTES_MAX).unwrap();
        assert_eq!(report.last_seq, 4, "{}", backend.name());
        assert_eq!(report.decided_by, Some(Rule::Torn));
    }
}

#[test]
fn a_record_with_a_later_seq_at_the_damage_is_refused() {
    for seq in [5, 9, 4 + (1 << 32)] {
        assert_refused(
            &shape(&[&acknowledged(), &record(seq, 40)]),
            durlog::GROUP_BYTES_MAX,
            Rule::SeqAtDamage,
            "a later seq at the damage",
        );
    }
}

/// A valid record with an older seq where record 4 belongs: a stale page
/// or a duplicated write (the CRC covers the seq so that such a copy fails
/// against the seq it claims), truncated like a torn tail, whole or torn.
#[test]
fn a_record_with_an_older_seq_at_the_damage_is_truncated() {
    for seq in [1, 2, 3] {
        let copy = record(seq, 40);
        assert_truncated(
            &shape(&[&acknowledged(), &copy]),
            Rule::Repeated,
            "a repeated record",
        );
        assert_truncated(
            &shape(&[&acknowledged(), &copy, &zeros(300)]),
            Rule::Repeated,
            "a repeated record, then zeros",
        );
        assert_truncated(
            &shape(&[&acknowledged(), &copy[..50]]),
            Rule::Torn,
            "a repeated record, torn",
        );
    }
}

/// A stale copy at the damage hides nothing: a later record where the
/// torn write cannot have put it still proves the damage (record 5 in the
/// page where record 4 belongs).
#[test]
fn a_repeated_record_before_a_misplaced_one_is_refused() {
    let bytes = shape(&[&acknowledged(), &record(2, 40), &record(5, 40)]);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "stale copy",
    );
}

/// The first bytes of record 5 where record 4 belongs, cut short (a group
/// written over the end of the log, then cut back): no valid record, but
/// its header claims a later seq than a torn record 4 could.
#[test]
fn a_later_records_header_at_the_damage_is_refused() {
    let bytes = shape(&[&acknowledged(), &record(5, 40)[..50]]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::SeqAtDamage, "header");
}

/// Record 4's seq field with one bit flipped at rest to spell 5 is refused
/// as above; flipped to spell an older seq it is the last record damaged
/// at rest, which nothing after it proves: truncated, and reported as
/// possibly acknowledged (FORMAT.md, "What stays ambiguous").
#[test]
fn a_flipped_seq_field_in_the_last_record() {
    let mut later = record(4, 40);
    later[8] ^= 0x01; // 4 -> 5
    assert_refused(
        &shape(&[&acknowledged(), &later]),
        durlog::GROUP_BYTES_MAX,
        Rule::SeqAtDamage,
        "4 -> 5",
    );
    let mut older = record(4, 40);
    older[8] ^= 0x06; // 4 -> 2: two bits, an older seq
    for backend in Backend::all() {
        let report = open_shape(&backend, &shape(&[&acknowledged(), &older]), 1 << 20)
            .unwrap_or_else(|(error, rule)| panic!("{error} ({rule:?})"));
        assert_eq!((report.last_seq, report.decided_by), (3, Some(Rule::Torn)));
    }
    let mut one_bit = record(4, 40);
    one_bit[8] ^= 0x04; // 4 -> 0
    for backend in Backend::all() {
        let report = open_shape(&backend, &shape(&[&acknowledged(), &one_bit]), 1 << 20)
            .unwrap_or_else(|(error, rule)| panic!("{error} ({rule:?})"));
        assert!(
            matches!(
                report.tail,
                Tail::Torn {
                    may_be_acknowledged: true,
                    ..
                }
            ),
            "{:?}",
            report.tail
        );
    }
}

/// The expected record itself, whole and valid, after zeros: a group that
/// landed 512 bytes past where it was written (a misdirected write into
/// preallocated zeros). A torn write puts record 4 at the damage or
/// nowhere.
#[test]
fn the_expected_record_away_from_the_damage_is_refused() {
    let bytes = shape(&[&acknowledged(), &zeros(257), &record(4, 40), &record(5, 40)]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::Misplaced, "moved");
}

/// The expected record written to the next sector boundary, and then a
/// bit of it flipped at rest: valid but for one bit, still where the torn
/// write could not have put it.
#[test]
fn a_flipped_copy_of_the_expected_record_away_from_the_damage_is_refused() {
    let mut copy = record(4, 40);
    copy[40] ^= 0x08;
    let bytes = shape(&[&acknowledged(), &zeros(512 - DAMAGE_AT as usize), &copy]);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "flipped copy",
    );
}

/// Record 4's header intact, and at the next sector boundary inside its
/// extent the start of record 5 (a group that landed over record 4 and was
/// then cut short): the header of the next seq where only record 4's data
/// can be.
#[test]
fn the_next_records_header_inside_the_damaged_record_is_refused() {
    let mut damaged = record(4, 600);
    let inside = 512 - DAMAGE_AT as usize;
    damaged[inside..inside + 50].copy_from_slice(&record(5, 40)[..50]);
    let bytes = shape(&[&acknowledged(), &damaged]);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "next header",
    );
}

/// The state a campaign found (issue 22, 1b), by hand: record 12 (1,876
/// bytes at 4088, its header across the page boundary at 4096) synced,
/// then record 13 (57 bytes) misdirected to 4608, a sector boundary inside
/// record 12, and synced. Record 12's header is whole (its bytes on both
/// sides of the boundary are not zeros, so both pages were kept), and the
/// next seq's header stands inside its extent: no torn write of the last
/// group puts it there. Open once truncated both acknowledged records.
#[test]
fn the_next_records_header_inside_a_record_across_a_page_boundary_is_refused() {
    let lead: Vec<u8> = (1..=10)
        .flat_map(|seq| record(seq, 40))
        .chain(record(11, 4088 - 10 * 86 - 46))
        .collect();
    assert_eq!(lead.len(), 4088);
    let (mut twelve, thirteen) = (record(12, 1876 - 46), record(13, 57 - 46));
    assert_eq!((twelve.len(), thirteen.len()), (1876, 57));
    twelve[520..577].copy_from_slice(&thirteen);
    let bytes = shape(&[&lead, &twelve, &zeros(8192 - 5964)]);
    assert_refused_at(
        &bytes,
        4088,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "the next header inside, across a page boundary",
    );
}

/// The state seed 70419 of a 100,000-seed campaign found, by hand: record
/// 22 (862 bytes at 4082, its header across the page boundary at 4096)
/// synced, then record 23 (585 bytes) misdirected to 4608, a sector
/// boundary inside record 22, and synced, reaching past record 22's end.
/// The header's part in the second page is the two high bytes of seq 22,
/// zeros; but that page starts past the damage and holds record 22's data
/// and record 23, so it was kept (a lost one would hold zeros), the header
/// is whole, and the next seq's header stands inside its extent. Open once
/// truncated both acknowledged records.
#[test]
fn the_next_records_header_inside_a_record_whose_header_ends_in_zeros_is_refused() {
    let lead: Vec<u8> = (1..=20)
        .flat_map(|seq| record(seq, 40))
        .chain(record(21, 4082 - 20 * 86 - 46))
        .collect();
    assert_eq!(lead.len(), 4082);
    let (mut bytes, twenty_three) = (shape(&[&lead, &record(22, 862 - 46)]), record(23, 585 - 46));
    assert_eq!((bytes.len(), twenty_three.len()), (4944, 585));
    assert_eq!(bytes[4096..4098], [0, 0], "the header's part in page 1");
    bytes.truncate(4608);
    bytes.extend_from_slice(&twenty_three);
    assert_refused_at(
        &bytes,
        4082,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "the next header inside, the header's second page part zeros",
    );
}

/// A tear inside the seq field of record 4's header, garbage to the end
/// of the sector and zeros after it: the field can spell any small seq,
/// so it proves nothing, and the tail is truncated.
#[test]
fn a_header_torn_across_a_sector_boundary_is_truncated() {
    // Record 4 at 500: its seq field spans bytes 508..516, across 512.
    let pad = record(3, 40 + (500 - 3 * 86));
    let lead: Vec<u8> = (1..=2).flat_map(|seq| record(seq, 40)).chain(pad).collect();
    assert_eq!(lead.len(), 500);
    let mut torn = record(4, 40)[..10].to_vec();
    torn.extend_from_slice(&[0x37, 0x13]);
    let bytes = shape(&[&lead, &torn, &zeros(200)]);
    for backend in Backend::all() {
        let report = open_shape(&backend, &bytes, durlog::GROUP_BYTES_MAX)
            .unwrap_or_else(|(error, rule)| panic!("{error} ({rule:?})"));
        assert_eq!((report.last_seq, report.decided_by), (3, Some(Rule::Torn)));
    }
}

/// Record 4 spans pages 0 and 1; its header is intact (so page 0 was
/// kept) and record 5 lies in page 1 (so page 1 was kept, and the tear
/// came after it): a crash leaves record 4 whole, yet its tail in page 1
/// was overwritten (a write that landed there).
#[test]
fn a_record_whose_every_page_was_kept_is_refused() {
    let group = shape(&[&record(4, 3900), &record(5, 40)]);
    let mut bytes = shape(&[&acknowledged(), &group]);
    bytes[4100..4110].copy_from_slice(&[0xEE; 10]);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "pages kept",
    );
}

/// A group written at 4092, its first page lost (the 4 bytes of record
/// 4's length there back to zeros) and its second kept (the rest of the
/// header, seq 4, and record 5): the header is not the write's own whole,
/// and the tail is torn, not misplaced.
#[test]
fn a_header_across_a_lost_page_boundary_proves_nothing() {
    let lead: Vec<u8> = (1..=2)
        .flat_map(|seq| record(seq, 40))
        .chain(record(3, 40 + (4092 - 3 * 86)))
        .collect();
    assert_eq!(lead.len(), 4092);
    let group = shape(&[&record(4, 1400), &record(5, 40)]);
    let mut bytes = shape(&[&lead, &group]);
    bytes[4092..4096].fill(0);
    for backend in Backend::all() {
        let report = open_shape(&backend, &bytes, durlog::GROUP_BYTES_MAX)
            .unwrap_or_else(|(error, rule)| panic!("{error} ({rule:?})"));
        assert_eq!((report.last_seq, report.decided_by), (3, Some(Rule::Torn)));
    }
}

/// As above, but with no valid record in page 1: the bytes there are not
/// zeros, and page 1 starts past the damage, so it was kept (a lost page
/// there would hold zeros); record 6 in page 2 shows the tear came later.
#[test]
fn a_record_whose_later_page_holds_data_was_kept_whole() {
    let group = shape(&[&record(4, 3900), &record(5, 4000), &record(6, 40)]);
    let mut bytes = shape(&[&acknowledged(), &group]);
    bytes[4100..4300].fill(0xEE);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "data kept",
    );
}

/// Record 7 ten bytes after the damage: records 4, 5 and 6 need at least
/// 3 x 44 bytes before it.
#[test]
fn a_record_too_close_to_the_damage_is_refused() {
    let bytes = shape(&[&acknowledged(), &[0xAB; 10], &record(7, 40)]);
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "too close",
    );
}

/// Record 4's header is intact (seq 4, its length) but record 5 was
/// written over the middle of its payload: the group put record 5 after
/// record 4's whole extent, not inside it.
#[test]
fn a_record_inside_the_damaged_records_extent_is_refused() {
    let mut damaged = record(4, 200);
    let five = record(5, 40);
    damaged[60..60 + five.len()].copy_from_slice(&five);
    let bytes = shape(&[&acknowledged(), &damaged]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::Misplaced, "inside");
}

/// Record 7, then record 5 further on: a torn group keeps its records in
/// seq order.
#[test]
fn records_out_of_order_after_the_damage_are_refused() {
    let bytes = shape(&[
        &acknowledged(),
        &zeros(200),
        &record(7, 40),
        &zeros(200),
        &record(5, 40),
    ]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::Misplaced, "order");
}

/// Two flipped bits in record 4 (no single-bit repair), records 5 and 6
/// intact after it: with a 100-byte group window, record 6 ends past what
/// one group can reach from the damage, so the damage was synced. With the
/// default window, record 5 in record 4's own page proves it all the same:
/// a crash keeps or loses a page whole.
#[test]
fn a_record_beyond_the_group_window_is_refused() {
    let mut damaged = record(4, 40);
    damaged[40] ^= 0x01;
    damaged[70] ^= 0x20;
    let bytes = shape(&[&acknowledged(), &damaged, &record(5, 40), &record(6, 40)]);
    assert_refused(&bytes, 100, Rule::BeyondGroup, "beyond the window");
    assert_refused(
        &bytes,
        durlog::GROUP_BYTES_MAX,
        Rule::Misplaced,
        "same page",
    );
}

/// The window's edge: a record that ends exactly `group_bytes_max` bytes
/// after the damage is within one group's reach, so this rule does not
/// refuse it (the same-page rule still does); one byte less of window and
/// it is beyond.
#[test]
fn a_record_ending_at_the_group_window_is_within_reach() {
    let mut damaged = record(4, 40);
    damaged[40] ^= 0x01;
    damaged[70] ^= 0x20;
    let (five, six) = (record(5, 40), record(6, 40));
    let reach = (damaged.len() + five.len() + six.len()) as u64;
    let bytes = shape(&[&acknowledged(), &damaged, &five, &six]);
    assert_refused(&bytes, reach - 1, Rule::BeyondGroup, "one byte beyond");
    assert_refused(&bytes, reach, Rule::Misplaced, "at the edge");
}

/// Zeros where record 4 was written, and record 5 right after them in the
/// same page: the page was kept (record 5 is there), so record 4 would be
/// too. A group written elsewhere (a misdirected write) leaves this.
#[test]
fn a_hole_before_a_record_in_the_same_page_is_refused() {
    let bytes = shape(&[&acknowledged(), &zeros(86), &record(5, 40), &record(6, 40)]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::Misplaced, "hole");
}

#[test]
fn one_flipped_bit_before_a_valid_record_is_refused() {
    let mut damaged = record(4, 40);
    damaged[50] ^= 0x04;
    let bytes = shape(&[&acknowledged(), &damaged, &record(5, 40)]);
    assert_refused(&bytes, durlog::GROUP_BYTES_MAX, Rule::SingleBit, "one bit");
}

/// One flipped bit in the last record: nothing after it proves it was
/// synced, so it is truncated, and reported as possibly acknowledged.
#[test]
fn one_flipped_bit_in_the_last_record_may_have_been_acknowledged() {
    let mut damaged = record(4, 40);
    damaged[50] ^= 0x04;
    for backend in Backend::all() {
        let report = open_shape(&backend, &shape(&[&acknowledged(), &damaged]), 1 << 20)
            .unwrap_or_else(|(error, _)| panic!("{error}"));
        assert!(
            matches!(
                report.tail,
                Tail::Torn {
                    may_be_acknowledged: true,
                    ..
                }
            ),
            "{:?}",
            report.tail
        );
        let report = open_shape(
            &backend,
            &shape(&[&acknowledged(), &record(4, 40)[..60]]),
            1 << 20,
        )
        .unwrap_or_else(|(error, _)| panic!("{error}"));
        assert!(
            matches!(
                report.tail,
                Tail::Torn {
                    may_be_acknowledged: false,
                    ..
                }
            ),
            "a cut record is no acknowledged one: {:?}",
            report.tail
        );
    }
}

/// A writer's groups stay within its window: with `group_bytes_max` at
/// 100, three appends of 85-byte records queued together go out as three
/// groups, never two records in one write.
#[test]
fn groups_never_pass_the_window() {
    let backend = Backend::sim(4);
    let tuning = Tuning::default().with(|tuning| {
        tuning.group_bytes_max = 100;
    });
    let log =
        durlog::Log::open_tuned(backend.vfs(), backend.dir(), Options::default(), tuning).unwrap();
    let tickets: Vec<_> = (0..3)
        .map(|_| {
            log.submit("s", Expected::Any, &[Event::new("t", vec![1; 40])])
                .unwrap()
        })
        .collect();
    let mut groups = 0;
    while log.queued() > 0 {
        assert_eq!(log.commit_next_group(), 1);
        groups += 1;
    }
    assert_eq!(groups, 3);
    for ticket in tickets {
        assert!(log.take_outcome(ticket).unwrap().is_ok());
    }
}

/// The state seed 3139 found (the main job of 2026-12-07), by hand:
/// record 5, a batch of stream `s` from version 6, starts 11 bytes before
/// a sector boundary, so the 16 bytes at that boundary read as a header
/// whose seq field is the batch's own first version: 6, the next seq. Its
/// first page kept, the rest lost at the crash (zeros): a torn write,
/// truncated. Open once refused it as misplaced.
#[test]
fn the_damaged_records_own_first_version_is_not_the_next_header() {
    let event = |data_len: usize| {
        let mut event = Event::new("t", vec![7; data_len]);
        event.at = 0;
        event
    };
    let mut lead = acknowledged();
    append_record(&mut lead, 4, &encode_batch("s", 4, &[event(91), event(91)]));
    assert_eq!(lead.len(), 501, "record 5 starts 11 bytes before 512");
    let mut five = Vec::new();
    append_record(&mut five, 5, &encode_batch("s", 6, &[event(4000)]));
    let mut bytes = shape(&[&lead, &five]);
    bytes[4096..].iter_mut().for_each(|byte| *byte = 0);
    for backend in Backend::all() {
        let report = open_shape(&backend, &bytes, durlog::GROUP_BYTES_MAX)
            .unwrap_or_else(|refusal| panic!("{}: {refusal:?}", backend.name()));
        assert_eq!(report.last_seq, 4, "{}", backend.name());
        assert_eq!(report.decided_by, Some(Rule::Torn));
    }
}

//! The names of a log directory's files: segments (named by their first
//! seq, so names sort as numbers) and the bookkeeping files a log keeps
//! beside them (FORMAT.md, "Segments"). The state file's names live with
//! its format, in `state.rs`.

/// The file name of the segment whose first record has seq `first_seq`:
/// 20 decimal digits and `.log`, so names sort as numbers.
pub fn segment_name(first_seq: u64) -> String {
    file_name(first_seq, ".log")
}

/// `first_seq` in 20 decimal digits, then `suffix`: what
/// `format!("{first_seq:020}{suffix}")` gives at a tenth of its cost (a
/// log makes these names at every open of a segment; the simulator, at
/// every reopen).
pub(crate) fn file_name(mut first_seq: u64, suffix: &str) -> String {
    // u64::MAX has 20 digits: every seq fits.
    let mut digits = [b'0'; 20];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (first_seq % 10) as u8;
        first_seq /= 10;
    }
    let mut name = String::with_capacity(digits.len() + suffix.len());
    name.extend(digits.iter().map(|&digit| char::from(digit)));
    name.push_str(suffix);
    name
}

/// The file a log prepares as its next segment before it needs it: zeros
/// only, renamed to the new segment's name at the roll. Not a segment name,
/// so recovery never reads it as one; `Log::open` removes it.
pub const NEXT_SEGMENT_NAME: &str = "next-segment.zeros";

/// The lock file a writer holds for as long as its log is open: one
/// process (and one `Log`) writes a directory at a time. Its bytes mean
/// nothing; recovery passes it over.
pub const LOCK_FILE_NAME: &str = "durlog.lock";

/// True for the names a log owns besides its segments and bookkeeping
/// files: anything ending in `.log`. Such a file that is not a segment is
/// damage; any other name in the directory is not the log's business.
pub fn looks_like_a_segment(name: &str) -> bool {
    name.ends_with(".log")
}

/// The first seq named by a segment file name, if `name` is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_name(1), "00000000000000000001.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        let mut value = 1u64;
        while let Some(next) = value.checked_mul(10) {
            for seq in [value - 1, value, value + 1, next - 1] {
                assert_eq!(segment_name(seq), format!("{seq:020}.log"));
            }
            value = next;
        }
        assert_eq!(segment_name(u64::MAX), format!("{:020}.log", u64::MAX));
        assert_eq!(parse_segment_name("0000000000000000001.log"), None);
        assert_eq!(parse_segment_name("99999999999999999999.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000a.log"), None);
    }
}

//! The names of a log directory's files: segments (named by their first
//! seq, so names sort as numbers) and the bookkeeping files a log keeps
//! beside them (FORMAT.md, "Segments"). The state file's names live with
//! its format, in `state.rs`.

use std::path::{Path, PathBuf};

/// The file name of the segment whose first record has seq `first_seq`:
/// 20 decimal digits and `.log`, so names sort as numbers.
pub fn segment_name(first_seq: u64) -> String {
    file_name(first_seq, SEGMENT_SUFFIX)
}

/// The suffix of segment files (their stem is their first seq).
const SEGMENT_SUFFIX: &str = ".log";

/// The path of the segment whose first record has seq `first_seq`, in
/// `dir`.
pub(crate) fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    file_path(dir, first_seq, SEGMENT_SUFFIX)
}

/// `first_seq` in 20 decimal digits, then `suffix`: what
/// `format!("{first_seq:020}{suffix}")` gives at a tenth of its cost (a
/// log makes these names at every open of a segment; the simulator, at
/// every reopen).
pub(crate) fn file_name(first_seq: u64, suffix: &str) -> String {
    let digits = twenty_digits(first_seq);
    let mut name = String::with_capacity(digits.len() + suffix.len());
    name.push_str(digits_text(&digits));
    name.push_str(suffix);
    name
}

/// `dir.join(file_name(first_seq, suffix))` in one allocation.
pub(crate) fn file_path(dir: &Path, first_seq: u64, suffix: &str) -> PathBuf {
    let digits = twenty_digits(first_seq);
    let mut path = with_room(dir, digits.len() + suffix.len());
    path.push(digits_text(&digits));
    path.as_mut_os_string().push(suffix);
    path
}

/// `dir.join(name)` in one allocation: `Path::join` copies `dir`, then
/// grows the copy for the name (a tenth of a simulator run's
/// reallocations were these).
pub(crate) fn join(dir: &Path, name: &str) -> PathBuf {
    let mut path = with_room(dir, name.len());
    path.push(name);
    path
}

/// `dir` with room for a separator and `name_len` bytes more.
fn with_room(dir: &Path, name_len: usize) -> PathBuf {
    let mut path = PathBuf::with_capacity(dir.as_os_str().len() + 1 + name_len);
    path.push(dir);
    path
}

/// `seq` in 20 decimal digits (`u64::MAX` has 20: every seq fits).
fn twenty_digits(mut seq: u64) -> [u8; 20] {
    let mut digits = [b'0'; 20];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (seq % 10) as u8;
        seq /= 10;
    }
    digits
}

fn digits_text(digits: &[u8; 20]) -> &str {
    std::str::from_utf8(digits).expect("decimal digits are ASCII")
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
        for dir in ["", "/", "log", "/var/log/", "a/./b"] {
            let dir = Path::new(dir);
            for seq in [0, 1, 12_345, u64::MAX] {
                assert_eq!(segment_path(dir, seq), dir.join(segment_name(seq)));
                let index = file_path(dir, seq, ".idx");
                assert_eq!(index, dir.join(format!("{seq:020}.idx")));
                assert_eq!(join(dir, "x.y"), dir.join("x.y"));
            }
        }
        assert_eq!(parse_segment_name("0000000000000000001.log"), None);
        assert_eq!(parse_segment_name("99999999999999999999.log"), None);
        assert_eq!(parse_segment_name("0000000000000000000a.log"), None);
    }
}

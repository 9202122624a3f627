//! Reads that recovery acts on. Bytes that check out (a valid record, a
//! state file that decodes) are believed at once: a flaky read does not
//! make up a valid CRC. Bytes that look damaged are believed only when two
//! reads in a row agree on them, so that one flaky read never makes
//! recovery truncate acknowledged data or refuse a sound log.

use std::io;
use std::path::Path;

use crate::error::Error;

/// How many times a suspected damage is re-read before it is believed: a
/// flaky read must not make recovery truncate acknowledged data.
const REREADS_MAX: usize = 4;

/// What one read made of the bytes it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Read<T, S> {
    /// Believed at once: the bytes check out.
    Accepted(T),
    /// Believed only once two reads in a row are suspect in the same way:
    /// the bytes do not check out (why, and the bytes, so that two reads
    /// are compared whole), or they are the evidence about damage.
    Suspect(S),
}

/// Runs `attempt` until it accepts what it read, or two attempts in a row
/// are suspect in the same way, and returns that. `attempt` is told whether
/// it reads again, and must then read the file afresh, not a copy it kept.
/// After `REREADS_MAX` re-reads that all differ the device is unstable:
/// an I/O error naming `path` (and `offset`, for a read at one).
pub(super) fn read_until_two_agree<T, S: PartialEq>(
    path: &Path,
    offset: Option<u64>,
    mut attempt: impl FnMut(bool) -> io::Result<Read<T, S>>,
) -> Result<Read<T, S>, Error> {
    let mut previous = None;
    for reads in 0..=REREADS_MAX {
        match attempt(reads > 0)? {
            Read::Accepted(accepted) => return Ok(Read::Accepted(accepted)),
            Read::Suspect(suspect) if previous.as_ref() == Some(&suspect) => {
                return Ok(Read::Suspect(suspect));
            }
            Read::Suspect(suspect) => previous = Some(suspect),
        }
    }
    let at = offset.map_or_else(String::new, |offset| format!(" at offset {offset}"));
    Err(Error::Io(io::Error::other(format!(
        "{}: {} reads{at} returned different bytes; the device is unstable, not retrying recovery",
        path.display(),
        REREADS_MAX + 1
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads that return `reads` in turn, and how many were made.
    fn run(reads: &[Read<u8, u8>]) -> (Result<Read<u8, u8>, String>, usize) {
        let mut made = 0;
        let agreed = read_until_two_agree(Path::new("f"), Some(7), |again| {
            assert_eq!(again, made > 0, "told whether it reads again");
            made += 1;
            Ok(reads[made - 1].clone())
        });
        (agreed.map_err(|error| error.to_string()), made)
    }

    #[test]
    fn accepted_at_once_suspect_when_two_agree() {
        use Read::{Accepted, Suspect};
        assert_eq!(run(&[Accepted(1)]), (Ok(Accepted(1)), 1));
        assert_eq!(run(&[Suspect(1), Accepted(2)]), (Ok(Accepted(2)), 2));
        assert_eq!(run(&[Suspect(1), Suspect(1)]), (Ok(Suspect(1)), 2));
        let flaky = [Suspect(1), Suspect(2), Suspect(3), Suspect(3)];
        assert_eq!(run(&flaky), (Ok(Suspect(3)), 4));
        let (unstable, made) = run(&[Suspect(1), Suspect(2), Suspect(1), Suspect(2), Suspect(1)]);
        assert_eq!(made, REREADS_MAX + 1);
        assert!(
            unstable
                .is_err_and(|error| error.contains("f: 5 reads at offset 7 returned different")),
            "an unstable device is an I/O error"
        );
    }
}

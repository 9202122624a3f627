//! The escaping that keeps one event on one line of `durlog read` (and one
//! record on one line of `durlog dump`).
//!
//! Escaped: `\` as `\\`, tab as `\t`, line feed as `\n`, carriage return as
//! `\r`, every other control character (ASCII 0x00-0x1f and 0x7f, and the
//! Unicode C1 controls) as `\xNN` per UTF-8 byte, and every byte that is
//! not part of valid UTF-8 as `\xNN` (two lowercase hex digits). Everything
//! else, including non-ASCII text, is printed as it is. [`unescape`]
//! reverses it exactly, so any bytes round-trip.

use std::fmt::Write as _;

/// `bytes` as one line of text (see the module doc).
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for character in chunk.valid().chars() {
            match character {
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                control if control.is_control() => {
                    for byte in control.encode_utf8(&mut [0; 4]).bytes() {
                        push_hex(&mut out, byte);
                    }
                }
                other => out.push(other),
            }
        }
        for &byte in chunk.invalid() {
            push_hex(&mut out, byte);
        }
    }
    out
}

fn push_hex(out: &mut String, byte: u8) {
    write!(out, "\\x{byte:02x}").expect("writing to a String cannot fail");
}

/// Why a text is not something [`escape`] writes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad escape at byte {offset}: {reason}")]
pub struct UnescapeError {
    /// Byte offset of the backslash that starts the bad escape.
    pub offset: usize,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The bytes [`escape`] turned into `text`.
pub fn unescape(text: &str) -> Result<Vec<u8>, UnescapeError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            out.push(bytes[at]);
            at += 1;
            continue;
        }
        let error = |reason| UnescapeError { offset: at, reason };
        let (byte, taken) = match bytes.get(at + 1) {
            Some(b'\\') => (b'\\', 2),
            Some(b't') => (b'\t', 2),
            Some(b'n') => (b'\n', 2),
            Some(b'r') => (b'\r', 2),
            Some(b'x') => {
                let digits = bytes
                    .get(at + 2..at + 4)
                    .ok_or_else(|| error("\\x needs two hex digits"))?;
                let digits =
                    std::str::from_utf8(digits).map_err(|_| error("\\x needs two hex digits"))?;
                let byte = u8::from_str_radix(digits, 16)
                    .map_err(|_| error("\\x needs two hex digits"))?;
                (byte, 4)
            }
            Some(_) => return Err(error("unknown escape")),
            None => return Err(error("a lone backslash at the end")),
        };
        out.push(byte);
        at += taken;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8], expected: &str) {
        let escaped = escape(bytes);
        assert_eq!(escaped, expected);
        assert!(!escaped.contains(['\n', '\r', '\t']));
        assert_eq!(unescape(&escaped).expect("escape output unescapes"), bytes);
    }

    #[test]
    fn escapes_what_would_break_a_line_or_a_column() {
        check(b"plain text", "plain text");
        check(b"a\tb\\c", "a\\tb\\\\c");
        check(b"line\nfeed\rreturn", "line\\nfeed\\rreturn");
        check(b"\x00\x1f\x7f", "\\x00\\x1f\\x7f");
        check(b"\xff\xfe ok", "\\xff\\xfe ok");
        check("caf\u{e9} \u{85}".as_bytes(), "caf\u{e9} \\xc2\\x85");
        check(b"", "");
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&all)).expect("unescapes"), all);
    }

    #[test]
    fn rejects_what_escape_never_writes() {
        assert!(matches!(
            unescape("\\"),
            Err(UnescapeError { offset: 0, .. })
        ));
        assert!(matches!(
            unescape("ab\\q"),
            Err(UnescapeError { offset: 2, .. })
        ));
        assert!(matches!(
            unescape("\\x4"),
            Err(UnescapeError { offset: 0, .. })
        ));
        assert!(matches!(
            unescape("\\xzz"),
            Err(UnescapeError { offset: 0, .. })
        ));
    }
}

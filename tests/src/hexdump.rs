//! Readable dumps of record bytes for golden snapshots: a plain hex dump, and
//! a field-by-field listing that decodes records and batches on its own
//! (little-endian reads written here, not `durlog::format`), so a snapshot
//! shows what every byte means and a change in the encoder shows up as a
//! changed byte, not as a changed interpretation.

use std::fmt::Write as _;

/// Bytes per line in both dumps.
const BYTES_PER_LINE: usize = 16;

/// Width of the hex column: two digits and a space per byte, less the last.
const HEX_COLUMN_CHARS: usize = BYTES_PER_LINE * 3 - 1;

/// Sixteen bytes per line: offset (decimal), the bytes in hex, and the
/// printable ASCII ones (`.` for the rest).
pub fn hexdump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (line, chunk) in bytes.chunks(BYTES_PER_LINE).enumerate() {
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(
            out,
            "{:>6}  {:<HEX_COLUMN_CHARS$}  |{ascii}|",
            line * BYTES_PER_LINE,
            hex(chunk)
        )
        .expect("writing to a String");
    }
    out
}

/// One line per field of every record in `bytes` (a segment file, or one
/// record): offset, size, the bytes, and the field's name and value. Fields
/// longer than a line continue on the next lines. A field that runs past the
/// end is listed as truncated and the listing stops there; bytes after the
/// last whole record are listed as a tail.
pub fn annotate_records(bytes: &[u8]) -> String {
    let mut cursor = Cursor {
        bytes,
        offset: 0,
        out: String::new(),
    };
    writeln!(
        cursor.out,
        "{:>6}  {:>4}  {:<HEX_COLUMN_CHARS$}  field = value",
        "offset", "size", "bytes"
    )
    .expect("writing to a String");
    let mut record_index = 0;
    while cursor.remaining() > 0 {
        if annotate_record(&mut cursor, record_index).is_none() {
            break;
        }
        record_index += 1;
    }
    cursor.out
}

/// Lists one record; `None` when it runs past the end of the bytes.
fn annotate_record(cursor: &mut Cursor<'_>, record_index: usize) -> Option<()> {
    let record_start = cursor.offset;
    let length = cursor.u32(&format!("record[{record_index}].length"), |v| {
        format!("{v} (payload bytes, u32 LE)")
    })?;
    cursor.u32(&format!("record[{record_index}].crc"), |v| {
        format!("{v:#010x} (CRC-32C of seq bytes ++ payload)")
    })?;
    cursor.u64(&format!("record[{record_index}].seq"), |v| v.to_string())?;
    let payload_end = cursor.offset + length as usize;
    annotate_batch(cursor, record_index)?;
    if cursor.offset != payload_end {
        return cursor.field(
            payload_end.saturating_sub(cursor.offset),
            "payload does not end where the length says",
            |_| String::from("(malformed)"),
        );
    }
    writeln!(
        cursor.out,
        "{:>6}  {:>4}  {:<HEX_COLUMN_CHARS$}  (end of record[{record_index}]: 16 + {length} = {} bytes)",
        cursor.offset,
        "",
        "",
        cursor.offset - record_start
    )
    .expect("writing to a String");
    Some(())
}

/// Lists the batch that is a record's payload.
fn annotate_batch(cursor: &mut Cursor<'_>, record_index: usize) -> Option<()> {
    let prefix = format!("record[{record_index}].batch");
    let stream_len = cursor.u16(&format!("{prefix}.stream_len"), |v| v.to_string())?;
    cursor.field(stream_len as usize, &format!("{prefix}.stream"), text)?;
    cursor.u64(&format!("{prefix}.first_version"), |v| v.to_string())?;
    let count = cursor.u32(&format!("{prefix}.count"), |v| v.to_string())?;
    for event in 0..count {
        let prefix = format!("{prefix}.event[{event}]");
        let type_len = cursor.u16(&format!("{prefix}.type_len"), |v| v.to_string())?;
        cursor.field(type_len as usize, &format!("{prefix}.type"), text)?;
        cursor.u64(&format!("{prefix}.at"), |v| {
            format!("{} (unix ns, i64 LE)", v as i64)
        })?;
        let data_len = cursor.u32(&format!("{prefix}.data_len"), |v| v.to_string())?;
        cursor.field(data_len as usize, &format!("{prefix}.data"), |bytes| {
            format!("b\"{}\"", bytes.escape_ascii())
        })?;
    }
    Some(())
}

/// A UTF-8 field's value: the quoted text (and, if it is not ASCII, its
/// length in chars), or the fact that it is not UTF-8.
fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.is_ascii() => format!("{text:?}"),
        Ok(text) => format!("{text:?} ({} chars)", text.chars().count()),
        Err(_) => String::from("(invalid UTF-8)"),
    }
}

/// Two hex digits per byte, separated by spaces.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (index, byte) in bytes.iter().enumerate() {
        if index > 0 {
            out.push(' ');
        }
        write!(out, "{byte:02x}").expect("writing to a String");
    }
    out
}

struct Cursor<'a> {
    bytes: &'a [u8],
    offset: usize,
    out: String,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    /// Lists the next `size` bytes as field `name`, described by `describe`.
    fn field(
        &mut self,
        size: usize,
        name: &str,
        describe: impl FnOnce(&[u8]) -> String,
    ) -> Option<()> {
        if size > self.remaining() {
            writeln!(
                self.out,
                "{:>6}  {:>4}  {:<HEX_COLUMN_CHARS$}  {name}: truncated, {} of {size} bytes left",
                self.offset,
                size,
                hex(&self.bytes[self.offset..]),
                self.remaining()
            )
            .expect("writing to a String");
            self.offset = self.bytes.len();
            return None;
        }
        let bytes = &self.bytes[self.offset..self.offset + size];
        let mut chunks = bytes.chunks(BYTES_PER_LINE);
        let first = chunks.next().unwrap_or(&[]);
        writeln!(
            self.out,
            "{:>6}  {:>4}  {:<HEX_COLUMN_CHARS$}  {name} = {}",
            self.offset,
            size,
            hex(first),
            describe(bytes)
        )
        .expect("writing to a String");
        for (line, chunk) in chunks.enumerate() {
            writeln!(
                self.out,
                "{:>6}  {:>4}  {}",
                self.offset + (line + 1) * BYTES_PER_LINE,
                "",
                hex(chunk)
            )
            .expect("writing to a String");
        }
        self.offset += size;
        Some(())
    }

    fn u16(&mut self, name: &str, describe: impl FnOnce(u16) -> String) -> Option<u16> {
        let value = self.next_chunk::<2>().map(u16::from_le_bytes);
        self.field(2, name, |_| value.map(describe).unwrap_or_default())?;
        value
    }

    fn u32(&mut self, name: &str, describe: impl FnOnce(u32) -> String) -> Option<u32> {
        let value = self.next_chunk::<4>().map(u32::from_le_bytes);
        self.field(4, name, |_| value.map(describe).unwrap_or_default())?;
        value
    }

    fn u64(&mut self, name: &str, describe: impl FnOnce(u64) -> String) -> Option<u64> {
        let value = self.next_chunk::<8>().map(u64::from_le_bytes);
        self.field(8, name, |_| value.map(describe).unwrap_or_default())?;
        value
    }

    /// The next `N` bytes, if there are that many (if not, `field` lists
    /// the truncation).
    fn next_chunk<const N: usize>(&self) -> Option<[u8; N]> {
        self.bytes[self.offset..].first_chunk::<N>().copied()
    }
}

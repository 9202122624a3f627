//! An independent statement of the on-disk format (FORMAT.md), written
//! without the engine's code: the oracle encodes every acknowledged append
//! itself and checks that the segment files hold exactly those bytes, in
//! segments named by their first seq and no larger than the limit unless a
//! single record is. A log that computed its CRC differently, or named or
//! rolled its segments wrong, passes its own recovery but fails here.

use std::path::Path;

use durlog_vfs::{SimVfs, Vfs};

use crate::model::Model;

/// CRC-32C's table for the reflected polynomial 0x82F63B78.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

fn crc32c(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for part in parts {
        for &byte in *part {
            crc = CRC_TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
        }
    }
    !crc
}

/// The record bytes FORMAT.md gives for one append.
pub fn record(
    seq: u64,
    stream: &str,
    first_version: u64,
    events: &[(&str, &[u8], i64)],
) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(stream.len() as u16).to_le_bytes());
    payload.extend_from_slice(stream.as_bytes());
    payload.extend_from_slice(&first_version.to_le_bytes());
    payload.extend_from_slice(&(events.len() as u32).to_le_bytes());
    for (event_type, data, at) in events {
        payload.extend_from_slice(&(event_type.len() as u16).to_le_bytes());
        payload.extend_from_slice(event_type.as_bytes());
        payload.extend_from_slice(&at.to_le_bytes());
        payload.extend_from_slice(&(data.len() as u32).to_le_bytes());
        payload.extend_from_slice(data);
    }
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c(&[&seq.to_le_bytes(), &payload]).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The one file besides segments FORMAT.md allows: the next segment,
/// prepared ahead as zeros.
const NEXT_SEGMENT_NAME: &str = "next-segment.zeros";

/// Checks the directory against the model, as the module doc says. The
/// last segment may carry a zero tail (preallocation) up to the segment
/// limit, and a prepared next segment holds zeros up to that limit; all
/// files together never pass the quota.
pub fn check_layout(
    vfs: &SimVfs,
    dir: &Path,
    model: &Model,
    segment_bytes: u64,
    max_bytes: u64,
) -> Result<(), String> {
    let expected: Vec<(u64, &[u8])> = model.encoded_records().collect();
    let names: Vec<String> = vfs
        .list_dir(dir)
        .map_err(|error| format!("list {}: {error}", dir.display()))?
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    let mut next = 0;
    let mut disk_bytes = 0;
    let mut names = names;
    if let Some(at) = names.iter().position(|name| name == NEXT_SEGMENT_NAME) {
        let name = names.remove(at);
        let bytes = vfs
            .file_contents(&dir.join(&name))
            .ok_or_else(|| format!("{name} vanished"))?;
        if bytes.iter().any(|&byte| byte != 0) {
            return Err(format!("the prepared next segment {name} holds data"));
        }
        check_zero_tail(&name, bytes.len() as u64, 0, segment_bytes)?;
        disk_bytes += bytes.len() as u64;
    }
    for (position, name) in names.iter().enumerate() {
        let bytes = vfs
            .file_contents(&dir.join(name))
            .ok_or_else(|| format!("{name} vanished"))?;
        disk_bytes += bytes.len() as u64;
        let is_last = position + 1 == names.len();
        let zeros_only = bytes.iter().all(|&byte| byte == 0);
        if zeros_only {
            if !is_last {
                return Err(format!("sealed segment {name} holds no record"));
            }
            let seq = expected
                .get(next)
                .map_or(model.last_seq() + 1, |(seq, _)| *seq);
            if *name != format!("{seq:020}.log") {
                return Err(format!(
                    "the empty last segment is {name}, the next seq is {seq}"
                ));
            }
            check_zero_tail(name, bytes.len() as u64, 0, segment_bytes)?;
            continue;
        }
        let Some((first_seq, _)) = expected.get(next) else {
            return Err(format!(
                "{name} holds bytes past the last acknowledged record"
            ));
        };
        if *name != format!("{first_seq:020}.log") {
            return Err(format!("segment {name} starts with seq {first_seq}"));
        }
        let mut offset = 0;
        let mut records = 0;
        while offset < bytes.len() {
            if is_last && bytes[offset..].iter().all(|&byte| byte == 0) {
                check_zero_tail(name, bytes.len() as u64, offset as u64, segment_bytes)?;
                break;
            }
            let Some((seq, want)) = expected.get(next) else {
                return Err(format!(
                    "{name} at offset {offset}: bytes past the last acknowledged record"
                ));
            };
            if bytes.get(offset..offset + want.len()) != Some(want) {
                return Err(format!(
                    "{name} at offset {offset}: seq {seq} is not encoded as FORMAT.md says"
                ));
            }
            offset += want.len();
            next += 1;
            records += 1;
        }
        if offset as u64 > segment_bytes && records > 1 {
            return Err(format!(
                "{name} holds {offset} bytes in {records} records, over the segment limit {segment_bytes}"
            ));
        }
    }
    if max_bytes > 0 && disk_bytes > max_bytes {
        return Err(format!(
            "the segments take {disk_bytes} bytes on disk, past the quota {max_bytes}"
        ));
    }
    if next != expected.len() {
        return Err(format!(
            "{} acknowledged records are missing from the segments",
            expected.len() - next
        ));
    }
    Ok(())
}

/// A preallocated zero tail never takes a segment past its limit (a
/// segment holding one oversized record gets none).
fn check_zero_tail(
    name: &str,
    file_len: u64,
    records_end: u64,
    segment_bytes: u64,
) -> Result<(), String> {
    if file_len > segment_bytes.max(records_end) {
        return Err(format!(
            "{name}: a zero tail takes it to {file_len} bytes, past the segment limit {segment_bytes}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The worked example of FORMAT.md, computed independently of the engine.
    #[test]
    fn golden_example() {
        let bytes = super::record(1, "s", 1, &[("T", b"hi", 0)]);
        assert_eq!(bytes.len(), 48);
        assert_eq!(
            &bytes[..16],
            &[
                0x20, 0, 0, 0, 0x5e, 0x1a, 0x72, 0x0b, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(super::crc32c(&[b"123456789"]), 0xE306_9283);
        for data in ["one", "two", "three"] {
            assert_eq!(
                super::record(1, "s", 1, &[("t", data.as_bytes(), 0)]).len(),
                46 + data.len()
            );
        }
    }
}

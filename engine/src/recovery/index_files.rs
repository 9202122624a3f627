//! The index files a scan finds (FORMAT.md, "Index files"): each is held
//! against the segment beside it, and one that does not belong there is
//! listed, with why, for `Log::open` to remove. Nothing read from an index
//! file changes what the scan found: the segments are the truth, and this
//! only decides which index files agree with them.

use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{OpenMode, Vfs, read_exact_at};

use crate::format::{HEADER_SIZE, Header, SegmentIndex};
use crate::segment::{IndexFile, SegmentMeta};

/// Checks each of `found` (by the first seq its name names) against
/// `segments`, the scan's, marking the segments whose index file agrees:
/// returns the index files that do not, each with the reason.
///
/// An index file agrees when its segment is sealed (not the last), its
/// bytes decode (their CRC first), and it names its segment's first seq,
/// exact length, record offsets and the CRC field of its last record. A
/// read that fails fails the scan, as any other read of it does: an I/O
/// error is never taken for a verdict on the bytes.
pub(super) fn check_index_files(
    vfs: &dyn Vfs,
    found: &[(u64, PathBuf)],
    segments: &mut [SegmentMeta],
) -> io::Result<Vec<(PathBuf, String)>> {
    let sealed = segments.len().saturating_sub(1);
    let mut stale = Vec::new();
    for (first_seq, path) in found {
        let at = segments.partition_point(|segment| segment.first_seq < *first_seq);
        let verdict = match segments.get(at) {
            Some(segment) if segment.first_seq == *first_seq && at < sealed => {
                agrees(vfs, path, segment)?
            }
            Some(segment) if segment.first_seq == *first_seq => Err(
                "its segment is the last one, which has no index file (a truncation made a sealed segment the last)"
                    .to_owned(),
            ),
            _ => Err(
                "no segment of the log starts at the seq its name names (purged, truncated away, or never kept)"
                    .to_owned(),
            ),
        };
        match verdict {
            Ok(()) => segments[at].index_file = IndexFile::Written,
            Err(reason) => stale.push((path.clone(), reason)),
        }
    }
    Ok(stale)
}

/// `Ok(Ok(()))` if the index file at `path` is the index of `segment`,
/// `Ok(Err(why))` if it is not.
fn agrees(vfs: &dyn Vfs, path: &Path, segment: &SegmentMeta) -> io::Result<Result<(), String>> {
    // Per record an index takes 16 bytes, a stream's entry at most 18 and
    // its name, an id 24 against the event's 16 or more: less than 4 bytes
    // a byte of its segment. A longer file is not one, and is not read.
    let most = 44 + 4 * segment.len;
    let file = vfs.open(path, OpenMode::ReadOnly)?;
    let len = file.len()?;
    if len > most {
        return Ok(Err(format!(
            "damaged: {len} bytes, more than an index of its segment can take ({most})"
        )));
    }
    let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
    read_exact_at(file.as_ref(), &mut bytes, 0)?;
    let last = *segment
        .offsets
        .last()
        .expect("a sealed segment holds records");
    let mut header = [0; HEADER_SIZE];
    let segment_file = vfs.open(&segment.path, OpenMode::ReadOnly)?;
    read_exact_at(segment_file.as_ref(), &mut header, u64::from(last))?;
    Ok(judge(&bytes, segment, Header::from_bytes(&header).crc))
}

/// The verdict on an index file's `bytes` for `segment`, whose last
/// record's CRC field is `last_crc`.
fn judge(bytes: &[u8], segment: &SegmentMeta, last_crc: u32) -> Result<(), String> {
    let index = SegmentIndex::decode(bytes).map_err(|error| format!("damaged: {error}"))?;
    if index.first_seq != segment.first_seq {
        return Err(format!(
            "indexes the segment of seq {} (a copy in the wrong place)",
            index.first_seq
        ));
    }
    if index.segment_len != segment.len {
        return Err(format!(
            "names a segment of {} bytes, the segment holds {} (written before a truncation, or of another life of the log)",
            index.segment_len, segment.len
        ));
    }
    if index.offsets != segment.offsets {
        return Err("its record offsets are not the segment's".to_owned());
    }
    if index.last_record_crc != last_crc {
        return Err(format!(
            "names a last record of CRC {:#010x}, the segment's is {last_crc:#010x}",
            index.last_record_crc
        ));
    }
    Ok(())
}

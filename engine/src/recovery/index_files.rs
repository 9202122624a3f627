//! The index files a scan finds (FORMAT.md, "Index files"): each is held
//! against the segment beside it, and one that does not belong there is
//! listed, with why, for `Log::open` to remove. Nothing read from an index
//! file changes what the scan found: the segments are the truth, and this
//! only decides which index files agree with them.

use std::io;
use std::path::{Path, PathBuf};

use durlog_vfs::{OpenMode, Vfs, read_exact_at};

use crate::error::Error;
use crate::format::{HEADER_SIZE, Header, SegmentIndex, StreamRecords};
use crate::index::{Location, Part};
use crate::segment::{IndexFile, SegmentMeta};

use super::Scanner;
use super::reread::{Read, read_until_two_agree};

/// The index file at `path` of the sealed segment `segment` (whose first
/// seq is `first_seq`), if it agrees with the segment by what can be
/// known without reading its records: the file decodes, and names the
/// segment's first seq, its length on disk and the CRC field of its last
/// record. The scan then takes the segment from it
/// (`Scanner::take_index`). A file that does not agree is read again
/// until two reads do (one flaky read must not decide which segments
/// Open reads).
pub(super) fn trusted(
    vfs: &dyn Vfs,
    path: &Path,
    segment: &Path,
    first_seq: u64,
) -> Result<Option<SegmentIndex>, Error> {
    let segment = vfs.open(segment, OpenMode::ReadOnly)?;
    let len = segment.len()?;
    let read = read_until_two_agree(path, None, |_| {
        let Some(bytes) = read_index_file(vfs, path, len)? else {
            return Ok(Read::Suspect(None));
        };
        let Ok(index) = SegmentIndex::decode(&bytes) else {
            return Ok(Read::Suspect(Some(bytes)));
        };
        let Some(&last) = index.offsets.last() else {
            return Ok(Read::Suspect(Some(bytes)));
        };
        let mut header = [0; HEADER_SIZE];
        read_exact_at(segment.as_ref(), &mut header, u64::from(last))?;
        let agrees = index.first_seq == first_seq
            && index.segment_len == len
            && Header::from_bytes(&header).crc == index.last_record_crc;
        Ok(match agrees {
            true => Read::Accepted(index),
            false => Read::Suspect(Some(bytes)),
        })
    })?;
    Ok(match read {
        Read::Accepted(index) => Some(index),
        Read::Suspect(_) => None,
    })
}

impl Scanner {
    /// Takes a sealed segment from its index file, as if its records had
    /// been read: `false` (nothing changed) if the index's streams do not
    /// continue the versions the segments before left, and the segment is
    /// then read. `as_parts`: each stream holds it as one part, found
    /// through the index file, not record by record.
    pub(super) fn take_index(
        &mut self,
        index: &SegmentIndex,
        segment: u32,
        as_parts: bool,
    ) -> bool {
        // Each record's event count is the distance to the stream's next
        // record (or past its last version); one that no batch can hold
        // says the file is not what its writer derived.
        let counts_fit = index
            .streams
            .iter()
            .all(|stream| record_counts(stream).all(|count| count.is_some_and(|count| count > 0)));
        let continues = index.streams.iter().all(|stream| {
            let version = self.index.version(&stream.name);
            stream.records[0].first_version == version + 1
        });
        if index.first_seq != self.next_seq || !continues || !counts_fit {
            return false;
        }
        for stream in &index.streams {
            if as_parts {
                let part = Part {
                    segment,
                    first_version: stream.records[0].first_version,
                };
                self.index
                    .push_part(&stream.name, part, stream.last_version);
            }
            let records = match as_parts {
                true => &[][..],
                false => &stream.records[..],
            };
            for (record, count) in records.iter().zip(record_counts(stream)) {
                let location = Location {
                    first_version: record.first_version,
                    segment,
                    offset: index.offsets[record.ordinal as usize],
                };
                self.index
                    .push(&stream.name, count.expect("checked above"), location);
            }
            let ids: Vec<_> = stream
                .ids
                .iter()
                .map(|&(id, version)| (version, id))
                .collect();
            self.index.remember_ids(&stream.name, &ids);
        }
        let records = index.offsets.len() as u64;
        self.next_seq += records;
        self.records += records;
        self.record_bytes += index.segment_len;
        true
    }
}

/// Checks each of `found` (by the first seq its name names) against
/// `segments`, the scan's, marking the segments whose index file agrees:
/// returns the index files that do not, each with the reason.
///
/// An index file agrees when its segment is sealed (not the last), its
/// bytes decode (their CRC first), and it names its segment's first seq,
/// exact length, record offsets and the CRC field of its last record. A
/// read that fails fails the scan, as any other read of it does: an I/O
/// error is never taken for a verdict on the bytes.
/// `distrusted`: the segments whose index files the scan would have
/// taken but found not continuing the versions before them.
pub(super) fn check_index_files(
    vfs: &dyn Vfs,
    found: &[(u64, PathBuf)],
    segments: &mut [SegmentMeta],
    distrusted: &[u64],
) -> Result<Vec<(PathBuf, String)>, Error> {
    let sealed = segments.len().saturating_sub(1);
    let mut stale = Vec::new();
    for (first_seq, path) in found {
        let at = segments.partition_point(|segment| segment.first_seq < *first_seq);
        let verdict = match segments.get(at) {
            // Taken from this very file, which agreed.
            Some(segment)
                if segment.first_seq == *first_seq && segment.index_file == IndexFile::Written =>
            {
                continue;
            }
            Some(segment) if distrusted.contains(&segment.first_seq) => Err(
                "its streams do not continue the versions of the segments before it".to_owned(),
            ),
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
/// `Ok(Err(why))` if two reads in a row say it is not.
fn agrees(vfs: &dyn Vfs, path: &Path, segment: &SegmentMeta) -> Result<Result<(), String>, Error> {
    let last = *segment
        .offsets
        .last()
        .expect("a sealed segment holds records");
    let segment_file = vfs.open(&segment.path, OpenMode::ReadOnly)?;
    let read = read_until_two_agree(path, None, |_| {
        let Some(bytes) = read_index_file(vfs, path, segment.len)? else {
            return Ok(Read::Suspect(format!(
                "damaged: more bytes than an index of its segment can take ({})",
                most_index_bytes(segment.len)
            )));
        };
        let mut header = [0; HEADER_SIZE];
        read_exact_at(segment_file.as_ref(), &mut header, u64::from(last))?;
        Ok(
            match judge(&bytes, segment, Header::from_bytes(&header).crc) {
                Ok(()) => Read::Accepted(()),
                Err(why) => Read::Suspect(why),
            },
        )
    })?;
    Ok(match read {
        Read::Accepted(()) => Ok(()),
        Read::Suspect(why) => Err(why),
    })
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

/// The event count of each of `stream`'s records, `None` past `u32`.
fn record_counts(stream: &StreamRecords) -> impl Iterator<Item = Option<u32>> + '_ {
    let ends = (stream.records.iter().skip(1))
        .map(|record| record.first_version)
        .chain([stream.last_version.saturating_add(1)]);
    (stream.records.iter().zip(ends))
        .map(|(record, end)| u32::try_from(end.checked_sub(record.first_version)?).ok())
}

/// The bytes of the index file at `path` for a segment of `segment_len`
/// bytes; `None` if the file is longer than any index of it can be.
pub(crate) fn read_index_file(
    vfs: &dyn Vfs,
    path: &Path,
    segment_len: u64,
) -> io::Result<Option<Vec<u8>>> {
    let file = vfs.open(path, OpenMode::ReadOnly)?;
    let len = file.len()?;
    if len > most_index_bytes(segment_len) {
        return Ok(None);
    }
    let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
    read_exact_at(file.as_ref(), &mut bytes, 0)?;
    Ok(Some(bytes))
}

/// Per record an index takes 16 bytes, a stream's entry at most 18 and
/// its name, an id 24 against the event's 16 or more: less than 4 bytes
/// a byte of its segment. A longer file is not one, and is not read.
fn most_index_bytes(segment_len: u64) -> u64 {
    44 + 4 * segment_len
}

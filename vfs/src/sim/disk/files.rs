//! Operations through a file handle (`read`, `len`, `write`, `set_len`,
//! `sync`) and the faults that strike during them: flipped reads, short
//! writes, ENOSPC, torn writes at a crash, misdirected writes and failed
//! syncs.

use std::io;
use std::sync::Arc;

use rand::Rng;

use super::{Call, Disk, Handle, eio, error};
use crate::sim::fault::{FaultKind, injected};
use crate::sim::fault_log::FaultEvent;
use crate::sim::file::{FILE_BYTES_MAX, FileNode, PAGE_BYTES, SECTOR_BYTES};
use crate::sim::trace::TraceKind;

impl Disk {
    pub(crate) fn read(
        &mut self,
        handle: &Handle<'_>,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        self.read_into(handle, buf.len(), offset, |bytes| {
            buf[..bytes.len()].copy_from_slice(bytes);
            &mut buf[..bytes.len()]
        })
    }

    /// `read`, onto the end of `buf` (not zeroed first).
    pub(crate) fn read_onto(
        &mut self,
        handle: &Handle<'_>,
        buf: &mut Vec<u8>,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        let start = buf.len();
        self.read_into(handle, len, offset, |bytes| {
            buf.extend_from_slice(bytes);
            &mut buf[start..]
        })
    }

    /// A read of up to `len` bytes at `offset`: `land` puts the file's
    /// bytes where the caller reads them and lends them back, for a bit
    /// flipped on the way to flip there.
    fn read_into<'b>(
        &mut self,
        handle: &Handle<'_>,
        len: usize,
        offset: u64,
        land: impl FnOnce(&[u8]) -> &'b mut [u8],
    ) -> io::Result<usize> {
        let call = Call::on_file(TraceKind::Read, "read", handle.node, offset, len as u64);
        self.check_handle(call, handle)?;
        if self.fires(FaultKind::ReadError) {
            let event = FaultEvent {
                read: Some((offset, len as u64)),
                ..FaultEvent::touching(FaultKind::ReadError, offset, 0)
            };
            self.fault_on_file(event, handle.node);
            self.record_file(TraceKind::Read, handle.node, offset, 0, false);
            return Err(injected(
                io::ErrorKind::Other,
                FaultKind::ReadError,
                format!(
                    "read of {} at offset {offset}: EIO",
                    handle.node.path().display()
                ),
            ));
        }
        let landed = land(handle.node.lock().cached_at(offset, len));
        let count = landed.len();
        if count > 0 && self.fires(FaultKind::BitFlipOnRead) {
            let bit = self.below(count as u64 * 8);
            landed[(bit / 8) as usize] ^= 1 << (bit % 8);
            let event = FaultEvent {
                bit: Some((bit % 8) as u8),
                read: Some((offset, count as u64)),
                ..FaultEvent::touching(FaultKind::BitFlipOnRead, offset + bit / 8, 1)
            };
            self.fault_on_file(event, handle.node);
        }
        self.record_file(TraceKind::Read, handle.node, offset, count as u64, true);
        Ok(count)
    }

    /// Not traced: asking the size is no event of its own.
    pub(crate) fn len(&self, handle: &Handle<'_>) -> io::Result<u64> {
        match self.handle_error("len", handle) {
            None => Ok(handle.node.lock().len()),
            Some(error) => Err(error),
        }
    }

    /// Checks what every mutating file operation checks, after counting it:
    /// the handle may write, and the new end stays within the size limit.
    fn check_mutation(&self, what: &str, handle: &Handle<'_>, end: Option<u64>) -> io::Result<()> {
        // The path is looked up only for an error: this runs on every write.
        if !handle.writable {
            return Err(error(
                io::ErrorKind::PermissionDenied,
                what,
                &handle.node.path(),
                "the file was opened read-only",
            ));
        }
        match end {
            Some(end) if end <= FILE_BYTES_MAX => Ok(()),
            _ => Err(error(
                io::ErrorKind::FileTooLarge,
                what,
                &handle.node.path(),
                &format!("the file would pass the simulator's limit of {FILE_BYTES_MAX} bytes"),
            )),
        }
    }

    pub(crate) fn write(&mut self, handle: &Handle<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        let call = Call::on_file(TraceKind::Write, "write", handle.node, offset, len);
        self.check_handle(call, handle)?;
        let checked = self.counted(call, |disk, crashing| {
            let checked = disk.check_mutation("write", handle, offset.checked_add(len));
            if crashing && checked.is_ok() {
                disk.tear_write(handle.node, buf, offset);
            }
            checked
        })?;
        if let Err(error) = checked {
            self.trace_call(call, false);
            return Err(error);
        }
        if let Some(error) = self.failed_write(handle.node, buf, offset) {
            self.trace_call(call, false);
            return Err(error);
        }
        if len > 0 && !self.misdirected_done && self.fires(FaultKind::MisdirectedWrite) {
            self.misdirect(handle.node, buf, offset);
        } else if len > 0 {
            let mut data = handle.node.lock();
            data.write(buf, offset);
            self.note_dirty_file(handle.node, &mut data);
            drop(data);
            self.maybe_duplicate(handle.node, buf, offset + len);
        }
        self.trace_call(call, true);
        Ok(())
    }

    /// ENOSPC or a short write, if either fires: writes a prefix and returns
    /// the error.
    fn failed_write(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) -> Option<io::Error> {
        let len = buf.len() as u64;
        let (fault, prefix, error) = if self.fires(FaultKind::NoSpace) {
            let prefix = if len == 0 || self.coin() {
                0
            } else {
                self.below(len)
            };
            let error = injected(
                io::ErrorKind::StorageFull,
                FaultKind::NoSpace,
                format!(
                    "write {} at offset {offset}: no space left on device (os error 28) after {prefix} of {len} bytes",
                    node.path().display()
                ),
            );
            (FaultKind::NoSpace, prefix, error)
        } else if len > 0 && self.fires(FaultKind::ShortWrite) {
            let prefix = match &mut self.script {
                Some(scripted) => scripted.short_prefix(offset, len),
                None => self.below(len),
            };
            let detail = format!("short write: {prefix} of {len} bytes at offset {offset}");
            let error = eio("write", &node.path(), FaultKind::ShortWrite, &detail);
            (FaultKind::ShortWrite, prefix, error)
        } else {
            return None;
        };
        let mut data = node.lock();
        if prefix > 0 {
            data.write(&buf[..prefix as usize], offset);
            self.note_dirty_file(node, &mut data);
        }
        drop(data);
        self.fault_on_file(FaultEvent::touching(fault, offset, prefix), node);
        Some(error)
    }

    /// The crash fires during this write: with TornWrite, a prefix (cut at
    /// a sector boundary or any byte, maybe followed by a garbage sector
    /// tail) reaches the cache; otherwise nothing does.
    fn tear_write(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) {
        let len = buf.len() as u64;
        if let Some(scripted) = &mut self.script {
            let torn = scripted.torn_write(buf, offset);
            if !torn.is_empty() {
                self.write_torn(node, &torn, offset);
            }
            return;
        }
        if len == 0 || !self.fires(FaultKind::TornWrite) {
            return;
        }
        let end = offset + len;
        let cut = if self.coin() {
            // Candidates: the start, every sector boundary inside, the end.
            let first_boundary = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
            let inner = if first_boundary < end {
                (end - 1 - first_boundary) / SECTOR_BYTES + 1
            } else {
                0
            };
            match self.below(inner + 2) {
                0 => offset,
                choice if choice == inner + 1 => end,
                choice => first_boundary + (choice - 1) * SECTOR_BYTES,
            }
        } else {
            offset + self.below(len + 1)
        };
        let prefix = cut - offset;
        let mut torn = buf[..prefix as usize].to_vec();
        if prefix < len && self.coin() {
            // The sector being written when power went holds garbage.
            let sector_end = ((cut / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
            let mut garbage = vec![0u8; (sector_end - cut) as usize];
            self.rng.fill_bytes(&mut garbage);
            torn.extend_from_slice(&garbage);
        }
        self.write_torn(node, &torn, offset);
    }

    /// What a torn write left reaches the cache, and the fault is logged.
    fn write_torn(&mut self, node: &Arc<FileNode>, torn: &[u8], offset: u64) {
        let mut data = node.lock();
        data.write(torn, offset);
        if !torn.is_empty() {
            self.note_dirty_file(node, &mut data);
        }
        drop(data);
        let event = FaultEvent::touching(FaultKind::TornWrite, offset, torn.len() as u64);
        self.fault_on_file(event, node);
    }

    /// The whole write lands at another sector-aligned offset inside the
    /// file's new size; the size grows as if it had landed right.
    fn misdirect(&mut self, node: &Arc<FileNode>, buf: &[u8], offset: u64) {
        let len = buf.len() as u64;
        let mut data = node.lock();
        let size = data.len().max(offset + len);
        let slots = (size - len) / SECTOR_BYTES + 1;
        let mut landing = self.below(slots) * SECTOR_BYTES;
        if landing == offset {
            landing = if slots > 1 {
                (landing / SECTOR_BYTES + 1) % slots * SECTOR_BYTES
            } else {
                // Nowhere else to go: the write lands where it should.
                data.write(buf, offset);
                self.note_dirty_file(node, &mut data);
                return;
            };
        }
        data.set_len(size);
        data.write(buf, landing);
        self.note_dirty_file(node, &mut data);
        drop(data);
        self.misdirected_done = true;
        // The log lists it as damage too (see `FaultLog`).
        let event = FaultEvent {
            intended_offset: Some(offset),
            ..FaultEvent::touching(FaultKind::MisdirectedWrite, landing, len)
        };
        self.fault_on_file(event, node);
    }

    /// With DuplicatedWrite, once: the write just made lands again at
    /// `end`, right after itself, if the file holds zeros there for its
    /// whole length (a preallocated tail). Only zeros are overwritten, so
    /// nothing durable or acknowledged is damaged; what a log then finds at
    /// its end is a valid copy of its own earlier records.
    fn maybe_duplicate(&mut self, node: &Arc<FileNode>, buf: &[u8], end: u64) {
        if self.duplicated_done || !self.faults.is_enabled(FaultKind::DuplicatedWrite) {
            return;
        }
        let len = buf.len() as u64;
        let mut data = node.lock();
        let room = end
            .checked_add(len)
            .is_some_and(|copy_end| copy_end <= data.len())
            && data.cached()[end as usize..(end + len) as usize]
                .iter()
                .all(|&byte| byte == 0);
        if !room || !self.fires(FaultKind::DuplicatedWrite) {
            return;
        }
        data.write(buf, end);
        self.note_dirty_file(node, &mut data);
        drop(data);
        self.duplicated_done = true;
        let event = FaultEvent {
            intended_offset: Some(end - len),
            ..FaultEvent::touching(FaultKind::DuplicatedWrite, end, len)
        };
        self.fault_on_file(event, node);
    }

    pub(crate) fn set_len(&mut self, handle: &Handle<'_>, len: u64) -> io::Result<()> {
        let call = Call::on_file(TraceKind::SetLen, "set_len", handle.node, 0, len);
        self.check_handle(call, handle)?;
        let checked = self.counted(call, |disk, _| {
            let checked = disk.check_mutation("set_len", handle, Some(len));
            if checked.is_ok() {
                // Applied even when the crash fires now: the size change is
                // in the cache and the crash decides whether it survives.
                let mut data = handle.node.lock();
                if data.len() != len {
                    data.set_len(len);
                    disk.note_dirty_file(handle.node, &mut data);
                }
            }
            checked
        })?;
        self.trace_call(call, checked.is_ok());
        checked
    }

    pub(crate) fn sync(&mut self, handle: &Handle<'_>, kind: TraceKind) -> io::Result<()> {
        let what = kind.name();
        let call = Call::on_file(kind, what, handle.node, 0, 0);
        self.check_handle(call, handle)?;
        self.counted(call, |_, _| ())?;
        if self.fires(FaultKind::FailedFsync) {
            let drops = match &mut self.script {
                Some(scripted) => scripted.sync_drops_pages(handle.node.lock().dirty_page_count()),
                None => self.coin(),
            };
            let (dropped, span) = if drops {
                handle.node.lock().drop_dirty_pages()
            } else {
                (0, 0..0)
            };
            let event =
                FaultEvent::touching(FaultKind::FailedFsync, span.start, span.end - span.start);
            let traced_len = dropped * PAGE_BYTES;
            self.fault_on_file_traced_as(event, handle.node, 0, traced_len);
            self.trace_call(call, false);
            let detail = format!("fsync failed, {dropped} dirty pages dropped unwritten");
            return Err(eio(
                what,
                &handle.node.path(),
                FaultKind::FailedFsync,
                &detail,
            ));
        }
        let mut data = handle.node.lock();
        data.sync();
        if data.in_dirty_files && data.is_clean() {
            data.in_dirty_files = false;
            self.dirty_files.remove(&handle.node.id);
        }
        drop(data);
        self.trace_call(call, true);
        Ok(())
    }
}

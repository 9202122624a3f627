//! The next segment, prepared ahead: once the active segment is half full,
//! a file of zeros under `NEXT_SEGMENT_NAME`, written and synced without
//! the writer's lock, for the roll to rename (FORMAT.md, "The next
//! segment, prepared ahead"). A log's own thread does it
//! (`NextSegment::Background`), or the caller (`NextSegment::OnCall`).
//!
//! The state it changes is the writer's (`writer::Next`, under the
//! writer's lock) and the thread's handle (`writer::Preparer`); this file
//! holds the writer side's methods that prepare, and nothing the writer
//! needs back.

use std::io;

use durlog_vfs::OpenMode;

use super::settings::NextSegment;
use super::writer::{Next, Preparer, Writer, WriterSide};
use crate::sync::lock;
use crate::sync::thread::{self, JoinHandle};

/// The next segment's zeros are written and synced this much at a time:
/// a writer's sync that meets the preparation's waits for one piece's
/// flush, not the whole file's.
const ZERO_PIECE_BYTES: u64 = 128 << 10;

impl WriterSide {
    /// Once the active segment is half full, asks for the next one; called
    /// by the leader after a successful write, with the writer's lock.
    pub(super) fn want_next_segment(&self, writer: &mut Writer, end: u64) {
        if writer.next != Next::Idle
            || writer.cannot_rename
            || end < self.settings.segment_bytes / 2
        {
            return;
        }
        match self.settings.tuning.next_segment {
            NextSegment::CreateAtRoll => {}
            NextSegment::OnCall => writer.next = Next::Wanted,
            NextSegment::Background => {
                writer.next = Next::Wanted;
                self.wanted.notify_one();
                self.preparer.start(self);
            }
        }
    }

    /// Prepares the next segment if it is wanted: `Ok(true)` if this call
    /// did. Runs without the writer lock while it writes and syncs, so a
    /// leader is never held up; a roll that comes first creates its file.
    pub fn prepare(&self) -> io::Result<bool> {
        let len = {
            let mut writer = self.lock();
            if writer.next != Next::Wanted {
                return Ok(false);
            }
            let len = self
                .settings
                .next_segment_len(writer.sealed, writer.allocated);
            writer.next = Next::Preparing(len);
            len
        };
        let mut ended = PreparationEnd {
            side: self,
            next: Next::Failed,
        };
        let result = self.write_zeros(len);
        if result.is_ok() {
            ended.next = Next::Ready(len);
        }
        result.map(|()| true)
    }

    fn write_zeros(&self, len: u64) -> io::Result<()> {
        let vfs = &self.settings.vfs;
        let next_path = &self.settings.next_path;
        let file = match vfs.open(next_path, OpenMode::CreateNew) {
            // Left by a preparation that failed and could not clean up.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                vfs.remove_file(next_path)?;
                vfs.open(next_path, OpenMode::CreateNew)?
            }
            opened => opened?,
        };
        // Real zeros, synced: the new segment's appends then overwrite
        // allocated, written blocks, and their fdatasync changes no size.
        let piece = vec![0; len.min(ZERO_PIECE_BYTES) as usize];
        let mut result = Ok(());
        let mut at = 0;
        while at < len && result.is_ok() {
            let n = (len - at).min(ZERO_PIECE_BYTES);
            result = file
                .write_at(&piece[..n as usize], at)
                .and_then(|()| file.sync_data());
            at += n;
        }
        if result.is_err() {
            // Best effort: a file left here is removed by the next
            // preparation, or by the next Open.
            let _ = vfs.remove_file(next_path);
        }
        result
    }

    /// The preparing thread: asleep until a segment is half full.
    fn run(&self) {
        loop {
            let mut writer = self.lock();
            while writer.next != Next::Wanted && !writer.closing {
                writer = self.wait(writer);
            }
            if writer.closing {
                return;
            }
            drop(writer);
            if let Err(error) = self.prepare() {
                log::warn!(
                    "durlog: preparing the next segment failed ({error}); the roll will create it"
                );
            }
        }
    }

    /// Ends the preparing thread, if one runs: called as the log goes.
    pub fn stop_preparer(&self) {
        let thread = self.preparer.thread_handle();
        if let Some(thread) = thread {
            self.lock().closing = true;
            self.wanted.notify_all();
            // A panic there has been reported by the thread itself.
            let _ = thread.join();
        }
    }
}

impl Preparer {
    /// Starts the thread unless it runs; the thread holds the writer side
    /// by an `Arc` of its own until the log stops it.
    fn start(&self, side: &WriterSide) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let Some(side) = side.this.upgrade() else {
            return;
        };
        match thread::Builder::new()
            .name("durlog-next-segment".into())
            .spawn(move || side.run())
        {
            Ok(handle) => *thread = Some(handle),
            // The rolls create their files, as with `CreateAtRoll`.
            Err(error) => {
                log::warn!("durlog: cannot start the thread that prepares segments: {error}")
            }
        }
    }

    fn thread_handle(&self) -> Option<JoinHandle<()>> {
        lock(&self.thread).take()
    }
}

/// Ends a preparation, even one that panicked: a roll may be waiting for
/// it.
struct PreparationEnd<'a> {
    side: &'a WriterSide,
    next: Next,
}

impl Drop for PreparationEnd<'_> {
    fn drop(&mut self) {
        self.side.lock().next = self.next;
        self.side.wanted.notify_all();
    }
}

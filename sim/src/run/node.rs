//! The machine under test: its disk, the log's directory, the log when it
//! is open, its subscribers and followers, and what the log opens with
//! (the run's clock, the failpoint switch, the quota).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use durlog::{Error, Log, NextSegment, Options};
use durlog_vfs::SimVfs;

use super::clock::Clock;
use super::{LOG_DIR, follow, twins};
use crate::plan::Plan;

/// The machine under test: its disk, the log's directory, the log when
/// it is open, its subscribers, and what the log was opened with (its
/// clock, its failpoint switch, its quota).
pub(super) struct Node {
    pub(super) vfs: SimVfs,
    pub(super) log: Option<Log>,
    pub(super) clock: Clock,
    pub(super) failpoint_armed: Arc<AtomicBool>,
    pub(super) max_bytes: u64,
    /// The files a misdirected write hit, as recovery was about to read
    /// them: whether its copy was there for recovery to find.
    pub(super) before_open: Vec<(PathBuf, Vec<u8>)>,
    /// The log's directory, and how many times the run started over.
    pub(super) dir: PathBuf,
    pub(super) generation: u32,
    /// Subscribers, shared with the failpoint hook.
    pub(super) followers: follow::SharedFollowers,
    /// Followers of the files, as in another process.
    pub(super) twins: twins::Twins,
    /// Index files a failed `write_index_files` of this life may have
    /// left half written (`Evidence::unsure_index_files`).
    pub(super) unsure_index_files: Vec<PathBuf>,
}

impl Node {
    /// The disk as a second opener must leave it: each file of the log's
    /// directory with its bytes as reads see them (a copy: cheaper than
    /// hashing them word by word, which was 1.7% of a run), and a hash of
    /// everything a power loss would leave.
    pub(super) fn files(&self) -> (Vec<FileState>, u128) {
        let files = (self.vfs.files().into_iter())
            .filter(|path| path.starts_with(&self.dir))
            .map(|path| {
                let seen = self.vfs.with_file_contents(&path, <[u8]>::to_vec);
                (path, seen)
            })
            .collect();
        (files, self.vfs.image_digest())
    }

    /// How many times the log has read the run's clock.
    pub(super) fn ticks(&self) -> i64 {
        self.clock.ticks()
    }

    pub(super) fn new(plan: &Plan, vfs: SimVfs) -> Node {
        Node {
            vfs,
            log: None,
            clock: Clock::default(),
            failpoint_armed: Arc::new(AtomicBool::new(false)),
            max_bytes: plan.max_bytes,
            before_open: Vec::new(),
            dir: PathBuf::from(LOG_DIR),
            generation: 0,
            followers: follow::SharedFollowers::default(),
            twins: twins::Twins::default(),
            unsure_index_files: Vec::new(),
        }
    }

    /// The options the log opens with: the run's clock, its quota, and a
    /// failpoint hook that polls the subscribers between a group's write
    /// and its sync (nothing of the group may reach one yet) and loses
    /// power there when armed.
    fn options(&self, plan: &Plan) -> Options {
        let clock = self.clock.clone();
        let armed = Arc::clone(&self.failpoint_armed);
        let followers = Arc::clone(&self.followers);
        let vfs = self.vfs.clone();
        Options {
            segment_bytes: plan.segment_bytes,
            max_bytes: self.max_bytes,
            now: Some(Arc::new(move || clock.read())),
            failpoint: Some(Arc::new(move |_name: &str| {
                follow::lock(&followers).poll_during_commit();
                if armed.swap(false, Ordering::SeqCst) {
                    vfs.halt();
                    return Err(std::io::Error::other("power loss at the failpoint"));
                }
                Ok(())
            })),
        }
    }

    pub(super) fn open(&self, plan: &Plan) -> Result<Log, Error> {
        let log = Log::open_tuned(
            self.vfs.clone(),
            &self.dir,
            self.options(plan),
            plan.tuning.with(|tuning| {
                // A thread of the log's own would make the run depend
                // on scheduling: the runner prepares at seeded points.
                tuning.next_segment = match plan.tuning.next_segment {
                    NextSegment::Background => NextSegment::OnCall,
                    other => other,
                };
            }),
        )?;
        if let Some(retention) = plan.retention {
            log.set_retention(retention);
        }
        Ok(log)
    }

    /// A fresh, empty log in a new directory, so that the damage records
    /// of the old one excuse nothing in it.
    pub(super) fn start_over(&mut self, plan: &Plan) {
        follow::lock(&self.followers).list.clear();
        self.twins.clear();
        self.generation += 1;
        self.dir = PathBuf::from(format!("{LOG_DIR}-{}", self.generation));
        self.max_bytes = plan.max_bytes;
    }
}

/// A file's path, and its bytes if it is there.
type FileState = (PathBuf, Option<Vec<u8>>);

/// Each file's name and size, for a message.
pub(super) fn sizes(files: &[FileState]) -> Vec<(String, Option<usize>)> {
    (files.iter())
        .map(|(path, seen)| {
            let name = path
                .file_name()
                .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
            (name, seen.as_ref().map(Vec::len))
        })
        .collect()
}

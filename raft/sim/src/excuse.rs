//! Which injected fault explains what a node could not do: a refused Open,
//! and an I/O error its store or its Open returned.
//!
//! A refused store keeps its node down for good, so a store that refuses
//! more than it must (a file renamed into place before its bytes were
//! synced, a torn write taken for damage) costs the cluster a replica
//! while every check of safety still passes. So a refusal is excused only
//! by a fault the disk's fault log (or the harness's own injections) shows
//! on the very file the refusal names, and counted by that cause; one that
//! no fault explains is a violation.
//!
//! The three causes, each a case where the bytes the store reads are not
//! the bytes it wrote and synced, which no format can tell from damage:
//! - **a bit flipped at rest** in the file (`bit-flip-at-rest`);
//! - **a misdirected write** over it (the disk's, `misdirected-write`, or
//!   the harness's own at rest, `misdirected-write-at-rest`);
//! - **a bit flipped on a read** of it during this Open
//!   (`bit-flip-on-read`): the checksum fails on bytes the disk holds
//!   intact. durlog-raft takes a checksum failure for damage, as it must
//!   (it cannot tell the two apart without reading again), so the node
//!   stays down, as an operator would find it.
//!
//! An error (an Open that fails and is retried, a store call that fails and
//! stops openraft) is excused only by a fault since the process started
//! that returns an error or hands back bytes that fail a check: a failed
//! read, sync or write, a full disk, a bit flipped on a read, or damage
//! at rest. An error with none of them behind it is the store's own.

use std::fmt;
use std::path::{Path, PathBuf};

use durlog::vfs::{Damage, FaultEvent, FaultKind};

use crate::check::Violation;
use crate::config::STORE_DIR;

/// A refused Open: the store's message, and what it names as damaged.
#[derive(Debug)]
pub struct Refusal {
    pub text: String,
    pub names: Named,
}

/// What a refusal says is damaged.
#[derive(Debug, PartialEq, Eq)]
pub enum Named {
    /// One file the store reads whole and checks (`raft.meta`,
    /// `sm.snapshot`, durlog's state file).
    File(PathBuf),
    /// The log as a whole: records missing that the store's state counts,
    /// or a record that holds another entry. Damage in any segment (one
    /// in the log, or one the repair moved aside) can do that.
    Log,
}

/// Damage the harness wrote to a stopped node's disk itself, which the
/// disk's own fault log does not hold.
#[derive(Clone, Debug)]
pub struct Injected {
    /// The file, by its name when the harness wrote it.
    pub path: PathBuf,
    pub text: String,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Refusal {
    /// The refusal `error` stands for; `what` prefixes its text.
    pub fn of(error: &durlog_raft::Error, what: &str) -> Refusal {
        let names = match error {
            durlog_raft::Error::Meta { path, .. } => Named::File(path.clone()),
            durlog_raft::Error::Log(durlog::Error::Corrupt { file, .. }) if !is_segment(file) => {
                Named::File(file.clone())
            }
            _ => Named::Log,
        };
        Refusal {
            text: format!("{what}{error}"),
            names,
        }
    }

    /// A refusal of the recovered log itself (its entries unreadable).
    pub fn of_log(text: String) -> Refusal {
        Refusal {
            text,
            names: Named::Log,
        }
    }

    /// The cause (a tally name) and the excuse, if a fault on what the
    /// refusal names explains it: `damage` is the disk's damage at rest,
    /// `injected` the harness's, `during_open` the fault log of this Open.
    pub fn excuse(
        &self,
        damage: &[Damage],
        injected: &[Injected],
        during_open: &[FaultEvent],
    ) -> Result<(&'static str, String), Violation> {
        let touched = |path: &Path| match &self.names {
            Named::File(file) => path == file,
            Named::Log => is_segment(path),
        };
        let found = damage
            .iter()
            .find(|damage| touched(&damage.path))
            .map(|damage| (cause_of(damage.kind), damage.to_string()))
            .or_else(|| {
                injected
                    .iter()
                    .find(|injected| touched(&injected.path))
                    .map(|injected| ("misdirected-write-at-rest", injected.text.clone()))
            })
            .or_else(|| {
                during_open
                    .iter()
                    .find(|event| event.kind == FaultKind::BitFlipOnRead && touched(&event.path))
                    .map(|event| {
                        let text = format!(
                            "a bit flipped on a read of {} at offset {} during the Open",
                            event.path.display(),
                            event.offset
                        );
                        ("bit-flip-on-read", text)
                    })
            });
        match found {
            Some((cause, fault)) => Ok((cause, format!("{}, explained by {fault}", self.text))),
            None => Err(format!(
                "Open refused ({}), but no fault touched {}: the disk's damage {:?}, the \
                 harness's {:?}, the faults of the Open {:?}",
                self.text,
                match &self.names {
                    Named::File(file) => file.display().to_string(),
                    Named::Log => "any segment".to_owned(),
                },
                damage.iter().map(ToString::to_string).collect::<Vec<_>>(),
                injected.iter().map(ToString::to_string).collect::<Vec<_>>(),
                during_open
                    .iter()
                    .map(|event| format!("{} {}", event.kind, event.path.display()))
                    .collect::<Vec<_>>(),
            )),
        }
    }
}

/// The faults that make a disk call fail.
const ERRING: [FaultKind; 4] = [
    FaultKind::ReadError,
    FaultKind::FailedFsync,
    FaultKind::ShortWrite,
    FaultKind::NoSpace,
];

/// What an error a node saw (`error`, as it reads) is excused by, as a
/// tally name: `since` is the disk's fault log since the process started
/// (or since its Open began).
///
/// - An error that says bytes are damaged (a record whose checksum fails,
///   a damaged state file, a record holding another entry) is a refusal
///   of what it names, excused only as a refusal is ([`Refusal::excuse`]).
/// - openraft's own defensive check (a store that returned what its
///   contract rules out) is excused by nothing: the store broke its
///   contract.
/// - Any other error is an I/O error, excused by a disk call that failed
///   since the process started.
pub fn error_excuse(
    error: &str,
    damage: &[Damage],
    injected: &[Injected],
    since: &[FaultEvent],
) -> Result<&'static str, Violation> {
    if error.contains("Defensive") {
        return Err(format!(
            "openraft's defensive check stopped the node: {error} (a store must never return \
             this, whatever the disk did)"
        ));
    }
    if let Some(names) = claimed(error) {
        let claim = Refusal {
            text: error.to_owned(),
            names,
        };
        let (cause, _) = claim.excuse(damage, injected, since)?;
        return Ok(match cause {
            "bit-flip-at-rest" => "damage-bit-flip-at-rest",
            "bit-flip-on-read" => "damage-bit-flip-on-read",
            "misdirected-write" => "damage-misdirected-write",
            _ => "damage-misdirected-write-at-rest",
        });
    }
    if let Some(event) = since
        .iter()
        .rev()
        .find(|event| ERRING.contains(&event.kind))
    {
        return Ok(event.kind.name());
    }
    Err(format!(
        "I/O error with no fault behind it: {error} (the disk injected {:?} since)",
        since
            .iter()
            .map(|event| format!("{} {}", event.kind, event.path.display()))
            .collect::<Vec<_>>()
    ))
}

/// What an error's text says is damaged, if it says so: the file of a
/// corrupt record (durlog's `Error::Corrupt`) or of a damaged state file
/// (durlog-raft's `Error::Meta`), or the log for a record holding another
/// entry or a store and log that disagree. openraft hands errors on as text
/// (`AnyError`), so the text is what there is to read.
fn claimed(error: &str) -> Option<Named> {
    let file_after = |marker: &str, end: &str| {
        let rest = &error[error.find(marker)? + marker.len()..];
        Some(Named::File(PathBuf::from(&rest[..rest.find(end)?])))
    };
    file_after("corrupt log: ", " at offset ")
        .or_else(|| file_after("damaged store state ", ": "))
        .or_else(|| {
            (error.contains("store and log disagree") || error.contains("holds the entry of index"))
                .then_some(Named::Log)
        })
}

fn cause_of(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::BitFlipAtRest => "bit-flip-at-rest",
        FaultKind::MisdirectedWrite => "misdirected-write",
        // `SimVfs::damage` lists only the two kinds above.
        _ => "other-damage",
    }
}

/// A segment of the node's log, in the log or moved aside by a repair.
fn is_segment(path: &Path) -> bool {
    path.starts_with(STORE_DIR) && path.extension().is_some_and(|extension| extension == "log")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flip(path: &str, kind: FaultKind) -> Damage {
        Damage {
            path: PathBuf::from(path),
            offset: 7,
            len: 1,
            intended_offset: None,
            bit: Some(3),
            kind,
        }
    }

    fn meta_refusal() -> Refusal {
        Refusal {
            text: "damaged store state /node/raft.meta: checksum mismatch".to_owned(),
            names: Named::File(PathBuf::from("/node/raft.meta")),
        }
    }

    #[test]
    fn a_refusal_is_excused_only_by_a_fault_on_the_file_it_names() {
        let refusal = meta_refusal();
        let elsewhere = [flip(
            "/node/log/00000000000000000001.log",
            FaultKind::BitFlipAtRest,
        )];
        assert!(refusal.excuse(&elsewhere, &[], &[]).is_err());
        let here = [flip("/node/raft.meta", FaultKind::BitFlipAtRest)];
        let (cause, excuse) = refusal.excuse(&here, &[], &[]).expect("excused");
        assert_eq!(cause, "bit-flip-at-rest");
        assert!(excuse.contains("/node/raft.meta"), "{excuse}");
    }

    #[test]
    fn a_read_flip_during_the_open_excuses_a_refusal_of_the_file_it_flipped() {
        let read_flip = |path: &str| FaultEvent {
            index: 0,
            op: 12,
            kind: FaultKind::BitFlipOnRead,
            path: PathBuf::from(path),
            offset: 9,
            len: 1,
            bit: Some(0),
            intended_offset: None,
            read: Some((0, 20)),
        };
        let refusal = meta_refusal();
        assert!(
            refusal
                .excuse(&[], &[], &[read_flip("/node/sm.snapshot")])
                .is_err()
        );
        let (cause, excuse) = refusal
            .excuse(&[], &[], &[read_flip("/node/raft.meta")])
            .expect("excused");
        assert_eq!(cause, "bit-flip-on-read");
        assert!(excuse.contains("offset 9"), "{excuse}");
    }

    fn fault(kind: FaultKind, path: &str) -> FaultEvent {
        FaultEvent {
            index: 0,
            op: 3,
            kind,
            path: PathBuf::from(path),
            offset: 0,
            len: 0,
            bit: None,
            intended_offset: None,
            read: None,
        }
    }

    #[test]
    fn an_io_error_is_excused_only_by_a_disk_call_that_failed() {
        let error = "append: I/O error: sync_data /node/log/00000000000000000001.log: EIO";
        let flip = fault(FaultKind::BitFlipOnRead, "/node/raft.meta");
        assert!(error_excuse(error, &[], &[], std::slice::from_ref(&flip)).is_err());
        let failed = fault(FaultKind::FailedFsync, "/node/log/00000000000000000001.log");
        assert_eq!(
            error_excuse(error, &[], &[], &[flip, failed]),
            Ok("failed-fsync")
        );
    }

    #[test]
    fn a_corrupt_record_is_excused_only_by_damage_to_its_segment() {
        let error = "read: corrupt log: /node/log/00000000000000000057.log at offset 308: \
                     record checksum mismatch";
        let other = [flip(
            "/node/log/00000000000000000001.log",
            FaultKind::BitFlipAtRest,
        )];
        let failed = [fault(
            FaultKind::ReadError,
            "/node/log/00000000000000000057.log",
        )];
        assert!(
            error_excuse(error, &other, &[], &failed).is_err(),
            "a failed read does not make a checksum fail, nor does damage elsewhere"
        );
        let here = [flip(
            "/node/log/00000000000000000057.log",
            FaultKind::MisdirectedWrite,
        )];
        assert_eq!(
            error_excuse(error, &here, &[], &[]),
            Ok("damage-misdirected-write")
        );
    }

    #[test]
    fn openraft_stopping_a_node_on_its_defensive_check_is_never_excused() {
        let error = "StorageError(Defensive { source: DefensiveError { subject: LogIndex(61), \
                     violation: LogIndexNotFound { want: 61, got: Some(91) } } })";
        let damage = [flip(
            "/node/log/00000000000000000001.log",
            FaultKind::BitFlipAtRest,
        )];
        let failed = [fault(FaultKind::FailedFsync, "/node")];
        assert!(error_excuse(error, &damage, &[], &failed).is_err());
    }

    #[test]
    fn a_log_refusal_is_excused_by_damage_in_any_segment_only() {
        let refusal = Refusal::of_log("store and log disagree".to_owned());
        let meta = [flip("/node/raft.meta", FaultKind::BitFlipAtRest)];
        assert!(refusal.excuse(&meta, &[], &[]).is_err());
        let aside = [flip(
            "/node/quarantine/1/00000000000000000001.log",
            FaultKind::MisdirectedWrite,
        )];
        let (cause, _) = refusal.excuse(&aside, &[], &[]).expect("excused");
        assert_eq!(cause, "misdirected-write");
        let injected = [Injected {
            path: PathBuf::from("/node/log/00000000000000000001.log"),
            text: "misdirected write".to_owned(),
        }];
        let (cause, _) = refusal.excuse(&[], &injected, &[]).expect("excused");
        assert_eq!(cause, "misdirected-write-at-rest");
    }
}

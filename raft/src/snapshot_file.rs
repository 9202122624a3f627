//! The events state machine's last snapshot on disk, so that a restarted
//! node's state machine starts from it: without it, a node whose log was
//! purged up to a snapshot held only in memory restarts with an empty state
//! machine and a log that starts past index 0, can apply nothing, and has
//! lost its membership (the cluster simulation found this: every node of a
//! restarted cluster came back a learner, and none was elected).
//!
//! Layout of `sm.snapshot` (integers little-endian), replaced atomically
//! like `raft.meta` (write `sm.snapshot.new`, sync, rename, sync the
//! directory):
//!
//! ```text
//! offset size field
//! 0      8    magic "DURLOGSN"
//! 8      4    format version, 1
//! 12     4    CRC-32C over the body
//! 16     8    body length L (u64)
//! 24     L    body: postcard of (SnapshotMeta, the snapshot's bytes)
//! ```
//!
//! A missing file is a state machine that never snapshotted; a damaged one
//! is refused (the log may be purged up to it: nothing else holds what it
//! held).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use durlog::vfs::{OpenMode, Vfs, read_exact_at};
use openraft::{BasicNode, NodeId, SnapshotMeta};

use crate::Error;

/// The file's name in the store's directory.
pub const SNAPSHOT_FILE_NAME: &str = "sm.snapshot";
const SNAPSHOT_TEMP_NAME: &str = "sm.snapshot.new";
const MAGIC: &[u8; 8] = b"DURLOGSN";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;
/// Far above any snapshot of the events state machine (a version per
/// stream); a larger length is damage, refused before allocating.
const BODY_BYTES_MAX: u64 = 1 << 30;

/// A snapshot as saved: its meta and its bytes. Generic in the node id
/// (the events state machine's is `u64`), so that this file's format
/// needs nothing of the state machine that keeps it.
pub type Saved<NID = u64> = (SnapshotMeta<NID, BasicNode>, Vec<u8>);

/// The snapshot file of one state machine.
#[derive(Clone)]
pub struct SnapshotFile {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFile")
            .field("dir", &self.dir)
            .finish()
    }
}

impl SnapshotFile {
    /// The file in `dir` (created if missing) on `vfs`.
    pub fn new(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<SnapshotFile, Error> {
        vfs.create_dir_all(dir)?;
        Ok(SnapshotFile {
            vfs,
            dir: dir.to_owned(),
        })
    }

    /// The snapshot saved last, if any.
    pub fn load<NID: NodeId>(&self) -> Result<Option<Saved<NID>>, Error> {
        let path = self.dir.join(SNAPSHOT_FILE_NAME);
        let bytes = match self.vfs.open(&path, OpenMode::ReadOnly) {
            Ok(file) => {
                let mut bytes = vec![0; file.len()? as usize];
                read_exact_at(file.as_ref(), &mut bytes, 0)?;
                // Durable before it is believed, as `raft.meta` (meta.rs).
                file.sync_data()?;
                self.vfs.sync_dir(&self.dir)?;
                bytes
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        decode(&bytes)
            .map(Some)
            .map_err(|reason| Error::Meta { path, reason })
    }

    /// Makes `saved` the snapshot durably; returns once it is.
    pub fn save<NID: NodeId>(&self, saved: &Saved<NID>) -> Result<(), Error> {
        let body = postcard::to_allocvec(saved).map_err(Error::Codec)?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + body.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&durlog::crc32c(&body).to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&body);
        let temp = self.dir.join(SNAPSHOT_TEMP_NAME);
        match self.vfs.remove_file(&temp) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error.into()),
            _ => {}
        }
        let file = self.vfs.open(&temp, OpenMode::CreateNew)?;
        file.write_at(&bytes, 0)?;
        file.sync_data()?;
        drop(file);
        self.vfs.rename(&temp, &self.dir.join(SNAPSHOT_FILE_NAME))?;
        self.vfs.sync_dir(&self.dir)?;
        Ok(())
    }
}

/// The snapshot in `bytes`, or why they are not a snapshot file.
fn decode<NID: NodeId>(bytes: &[u8]) -> Result<Saved<NID>, String> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_BYTES>() else {
        return Err(format!("{} bytes, shorter than the header", bytes.len()));
    };
    if &header[..8] != MAGIC {
        return Err("wrong magic".to_owned());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, expected {FORMAT_VERSION}"
        ));
    }
    let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    if len > BODY_BYTES_MAX || len != body.len() as u64 {
        return Err(format!(
            "body length {len}, but {} bytes follow",
            body.len()
        ));
    }
    if durlog::crc32c(body) != crc {
        return Err("checksum mismatch".to_owned());
    }
    postcard::from_bytes(body).map_err(|error| format!("body does not decode: {error}"))
}

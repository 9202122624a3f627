//! Every system the append benchmark drives: the raw fdatasync floor,
//! durlog, and the peer engines, each behind [`System`].
//!
//! Each call of a writer is one durable append of `payload_bytes` that
//! returns only once an fdatasync (or fsync) covers it. Each thread writes
//! to its own stream (durlog), region (raft-engine) or key range (fjall,
//! redb); okaywal has no streams, so its entries carry only the payload.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use durlog::vfs::PosixVfs;
use durlog::{Event, Expected, IndexFiles, Log, Options, Tuning};

use crate::harness::{Sample, System, Writer};

/// The systems, by the names used on the command line and in results.
pub const ALL: &[&str] = &["durlog", "okaywal", "raft-engine", "fjall", "redb"];

/// The raw floor's two variants.
pub const FLOOR_GROWING: &str = "raw growing file";
pub const FLOOR_PREALLOCATED: &str = "raw preallocated file";

/// A system opened in a fresh directory, ready for one run.
pub trait Opened: System {
    /// durlog fills in its group-commit figures; the others leave them.
    fn annotate(&self, _sample: &mut Sample) {}
    fn as_system(&self) -> &dyn System;
}

/// durlog with segments small enough to roll every few hundred
/// milliseconds of appends, with and without the indexing thread
/// (`IndexFiles::Background`) writing each sealed segment's index file:
/// what index files cost the appends, side by side (not in [`ALL`]; name
/// them in `--systems`).
pub const DURLOG_SMALL_SEGMENTS: &str = "durlog-4mib-segments";
pub const DURLOG_INDEX_FILES: &str = "durlog-4mib-segments-index-files";
const SMALL_SEGMENT_BYTES: u64 = 4 << 20;

/// Opens `name` in the fresh directory `dir`.
pub fn open(name: &str, dir: &Path) -> Result<Box<dyn Opened>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(match name {
        FLOOR_GROWING => Box::new(Floor {
            dir: dir.into(),
            preallocated: false,
        }),
        FLOOR_PREALLOCATED => Box::new(Floor {
            dir: dir.into(),
            preallocated: true,
        }),
        "durlog" => Box::new(Durlog {
            log: Log::open(dir, Options::default())?,
        }),
        DURLOG_SMALL_SEGMENTS | DURLOG_INDEX_FILES => {
            let options = Options {
                segment_bytes: SMALL_SEGMENT_BYTES,
                ..Options::default()
            };
            let tuning = Tuning::default().with(|tuning| {
                if name == DURLOG_INDEX_FILES {
                    tuning.index_files = IndexFiles::Background;
                }
            });
            Box::new(Durlog {
                log: Log::open_tuned(PosixVfs, dir, options, tuning)?,
            })
        }
        "okaywal" => peers::okaywal(dir)?,
        "raft-engine" => peers::raft_engine(dir)?,
        "fjall" => peers::fjall(dir)?,
        "redb" => peers::redb(dir)?,
        other => bail!("unknown system {other:?}; known: {}", ALL.join(", ")),
    })
}

/// write + fdatasync on a plain file, one thread per file.
struct Floor {
    dir: PathBuf,
    preallocated: bool,
}

/// Zero-filled bytes written (not fallocated: unwritten extents would make
/// the first write of each block a metadata change) before the
/// preallocated variant starts; offsets wrap around inside them.
const PREALLOCATED_BYTES: u64 = 64 << 20;

impl System for Floor {
    fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
        let path = self.dir.join(format!("floor-{id}"));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let payload = vec![0xA5u8; payload_bytes];
        if !self.preallocated {
            return Ok(Box::new(move || {
                file.write_all(&payload)?;
                file.sync_data()?;
                Ok(())
            }));
        }
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..PREALLOCATED_BYTES / chunk.len() as u64 {
            file.write_all(&chunk)?;
        }
        file.sync_all()?;
        let mut offset = 0u64;
        Ok(Box::new(move || {
            if offset + payload_bytes as u64 > PREALLOCATED_BYTES {
                offset = 0;
            }
            file.write_all_at(&payload, offset)?;
            file.sync_data()?;
            offset += payload_bytes as u64;
            Ok(())
        }))
    }
}

impl Opened for Floor {
    fn as_system(&self) -> &dyn System {
        self
    }
}

struct Durlog {
    log: Log,
}

impl System for Durlog {
    fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
        let stream = format!("writer-{id}");
        // `append` copies the caller's buffers, so one event serves every call.
        let events = [Event::new("bench", vec![0xA5u8; payload_bytes])];
        Ok(Box::new(move || {
            self.log.append(&stream, Expected::Any, &events)?;
            Ok(())
        }))
    }
}

impl Opened for Durlog {
    fn as_system(&self) -> &dyn System {
        self
    }
    fn annotate(&self, sample: &mut Sample) {
        let stats = self.log.stats();
        if stats.groups > 0 {
            sample.appends_per_group = Some(stats.appends as f64 / stats.groups as f64);
        }
        if stats.sync_latency_ns.count() > 0 {
            sample.sync_p50_us = Some(stats.sync_latency_ns.quantile(0.5) as f64 / 1e3);
        }
    }
}

mod peers {
    use super::*;

    #[cfg(feature = "okaywal")]
    pub fn okaywal(dir: &Path) -> Result<Box<dyn Opened>> {
        // LogVoid: nothing to recover into, checkpoints just recycle files.
        let wal = okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid)?;
        struct OkayWal(okaywal::WriteAheadLog);
        impl System for OkayWal {
            fn writer(&self, _id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
                let payload = vec![0xA5u8; payload_bytes];
                Ok(Box::new(move || {
                    let mut entry = self.0.begin_entry()?;
                    entry.write_chunk(&payload)?;
                    // commit returns after the fsync that covers the entry.
                    entry.commit()?;
                    Ok(())
                }))
            }
        }
        impl Opened for OkayWal {
            fn as_system(&self) -> &dyn System {
                self
            }
        }
        Ok(Box::new(OkayWal(wal)))
    }

    #[cfg(feature = "raft-engine")]
    pub fn raft_engine(dir: &Path) -> Result<Box<dyn Opened>> {
        use protobuf::well_known_types::BytesValue;
        use raft_engine::{Config, Engine, LogBatch, MessageExt};

        /// A raft entry stand-in: the index in the first 8 bytes, then the
        /// payload (raft's own Entry needs the raft crate and protoc).
        #[derive(Clone)]
        struct BytesEntry;
        impl MessageExt for BytesEntry {
            type Entry = BytesValue;
            fn index(entry: &BytesValue) -> u64 {
                u64::from_le_bytes(entry.value[..8].try_into().expect("8-byte index"))
            }
        }
        struct RaftEngine(Engine);
        impl System for RaftEngine {
            fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
                let region = id as u64 + 1;
                let payload = vec![0xA5u8; payload_bytes];
                let mut batch = LogBatch::default();
                let mut index = 0u64;
                Ok(Box::new(move || {
                    index += 1;
                    let mut value = Vec::with_capacity(8 + payload.len());
                    value.extend_from_slice(&index.to_le_bytes());
                    value.extend_from_slice(&payload);
                    let entry = BytesValue {
                        value,
                        ..BytesValue::default()
                    };
                    batch.add_entries::<BytesEntry>(region, &[entry])?;
                    // sync = true: returns after the fdatasync of its group.
                    self.0.write(&mut batch, true)?;
                    Ok(())
                }))
            }
        }
        impl Opened for RaftEngine {
            fn as_system(&self) -> &dyn System {
                self
            }
        }
        let config = Config {
            dir: dir.to_string_lossy().into_owned(),
            ..Config::default()
        };
        Ok(Box::new(RaftEngine(Engine::open(config)?)))
    }

    #[cfg(feature = "fjall")]
    pub fn fjall(dir: &Path) -> Result<Box<dyn Opened>> {
        use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
        struct Fjall {
            db: Database,
            keyspace: Keyspace,
        }
        impl System for Fjall {
            fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
                let payload = vec![0xA5u8; payload_bytes];
                let mut seq = 0u64;
                Ok(Box::new(move || {
                    seq += 1;
                    let mut key = [0u8; 12];
                    key[..4].copy_from_slice(&(id as u32).to_be_bytes());
                    key[4..].copy_from_slice(&seq.to_be_bytes());
                    self.keyspace.insert(key, payload.as_slice())?;
                    self.db.persist(PersistMode::SyncAll)?;
                    Ok(())
                }))
            }
        }
        impl Opened for Fjall {
            fn as_system(&self) -> &dyn System {
                self
            }
        }
        let db = Database::builder(dir).open()?;
        let keyspace = db.keyspace("events", KeyspaceCreateOptions::default)?;
        Ok(Box::new(Fjall { db, keyspace }))
    }

    #[cfg(feature = "redb")]
    pub fn redb(dir: &Path) -> Result<Box<dyn Opened>> {
        use redb::{Database, Durability, TableDefinition};
        const TABLE: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
        struct Redb(Database);
        impl System for Redb {
            fn writer(&self, id: usize, payload_bytes: usize) -> Result<Writer<'_>> {
                let payload = vec![0xA5u8; payload_bytes];
                let mut seq = 0u64;
                Ok(Box::new(move || {
                    seq += 1;
                    let mut txn = self.0.begin_write()?;
                    txn.set_durability(Durability::Immediate)?;
                    {
                        let mut table = txn.open_table(TABLE)?;
                        table.insert((id as u64, seq), payload.as_slice())?;
                    }
                    txn.commit()?;
                    Ok(())
                }))
            }
        }
        impl Opened for Redb {
            fn as_system(&self) -> &dyn System {
                self
            }
        }
        let db = Database::create(dir.join("bench.redb"))?;
        // Create the table once, so that appends do not pay for it.
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(Box::new(Redb(db)))
    }

    macro_rules! not_built {
        ($($feature:literal => $name:ident),*) => {$(
            #[cfg(not(feature = $feature))]
            pub fn $name(_dir: &Path) -> Result<Box<dyn Opened>> {
                bail!(concat!($feature, " was not built (cargo feature \"", $feature, "\" off)"))
            }
        )*};
    }
    not_built!("okaywal" => okaywal, "raft-engine" => raft_engine, "fjall" => fjall, "redb" => redb);
}

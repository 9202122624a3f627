//! A store of one value on the simple form ([`Model`] and [`Store`]), with
//! the update-protocol bugs of Pillai et al., "All File Systems Are Not
//! Created Equal" (OSDI '14) as variants the testbed finds.
//!
//! The store appends each value to `values.log`, then points `current` at
//! it: the pointer (offset, length, checksum of the value, checksum of the
//! pointer) is written to `current.tmp`, synced, renamed over `current`,
//! and the directory synced. Only then does `set` return `Ok`.
//!
//! `tests/alice.rs` runs it in `#[test]`s through `check`; as a binary it
//! is the testbed's whole command line:
//!
//! ```sh
//! cargo run -p durlog-testbed --example pointer_store -- run --seeds 0..2000
//! cargo run -p durlog-testbed --example pointer_store -- --bug no-dir-fsync run --seeds 0..2000
//! cargo run -p durlog-testbed --example pointer_store -- --bug in-place exhaust --ops 3
//! cargo run -p durlog-testbed --example pointer_store -- run --seeds 0..4000 --shard 1/2 --report s1.json
//! cargo run -p durlog-testbed --example pointer_store -- merge s0.json s1.json
//! ```

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::process::ExitCode;

use durlog_testbed::fs::Fs;
use durlog_testbed::{Checked, Faults, Gen, Model, Store, StoreScenario, cli, expect_eq};

/// The update protocol, right or with one of the classic bugs.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Bug {
    #[default]
    None,
    /// The new pointer renamed into place before it is synced.
    RenameUnsynced,
    /// No directory sync after the rename.
    NoDirFsync,
    /// The pointer overwritten in place instead of renamed.
    InPlace,
    /// The value appended but not synced before the pointer names it.
    AppendUnsynced,
}

const LOG: &str = "/store/values.log";
const CURRENT: &str = "/store/current";
const TEMP: &str = "/store/current.tmp";

pub struct PointerStore {
    fs: Fs,
    bug: Bug,
}

impl PointerStore {
    /// Opens the store; the log's name is made durable here, so that no
    /// pointer can name a log a crash loses.
    pub fn open(fs: Fs, bug: Bug) -> io::Result<PointerStore> {
        fs.create_dir_all("/store")?;
        if !fs.exists(LOG)? {
            fs.create(LOG)?.sync_data()?;
        }
        fs.sync_dir("/store")?;
        Ok(PointerStore { fs, bug })
    }

    pub fn set(&self, value: &[u8]) -> io::Result<()> {
        let mut log = self.fs.options().read(true).write(true).open(LOG)?;
        let offset = log.seek(SeekFrom::End(0))?;
        log.write_all(value)?;
        if self.bug != Bug::AppendUnsynced {
            log.sync_data()?;
        }
        let mut pointer = [offset, value.len() as u64, checksum(value)]
            .map(u64::to_le_bytes)
            .concat();
        pointer.extend_from_slice(&checksum(&pointer).to_le_bytes());
        if self.bug == Bug::InPlace {
            let mut current = self.fs.options().write(true).create(true).open(CURRENT)?;
            current.write_all(&pointer)?;
            current.sync_data()?;
            return self.fs.sync_dir("/store");
        }
        if self.fs.remove_file(TEMP).is_ok() {
            durlog_testbed::mark!("pointer store: a pointer a crash left removed");
        }
        let mut temp = self.fs.create(TEMP)?;
        temp.write_all(&pointer)?;
        if self.bug != Bug::RenameUnsynced {
            temp.sync_data()?;
        }
        self.fs.rename(TEMP, CURRENT)?;
        if self.bug != Bug::NoDirFsync {
            self.fs.sync_dir("/store")?;
        }
        Ok(())
    }

    /// The value last set, `None` if none was; an error if the store's
    /// files do not hold a valid one.
    pub fn get(&self) -> io::Result<Option<Vec<u8>>> {
        let pointer = match self.fs.read(CURRENT) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            read => read?,
        };
        let damaged = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let field = |at: usize| u64::from_le_bytes(pointer[at..at + 8].try_into().unwrap());
        if pointer.len() != 32 || checksum(&pointer[..24]) != field(24) {
            return Err(damaged("current: the pointer is damaged"));
        }
        let mut log = self.fs.open(LOG)?;
        let mut value = vec![0u8; field(8) as usize];
        log.seek(SeekFrom::Start(field(0)))?;
        log.read_exact(&mut value)
            .map_err(|error| match error.kind() {
                io::ErrorKind::UnexpectedEof => {
                    damaged("values.log: the pointer names bytes past its end")
                }
                _ => error,
            })?;
        if checksum(&value) != field(16) {
            return Err(damaged(
                "values.log: the value the pointer names is damaged",
            ));
        }
        Ok(Some(value))
    }
}

/// FNV-1a: enough to tell a damaged pointer or value from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
    })
}

// ---- What the testbed needs: the model, and the store against it ----

/// The value the store should hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Value(Option<Vec<u8>>);

impl Model for Value {
    type Op = Vec<u8>; // set the value
    fn draw(rng: &mut Gen) -> Vec<u8> {
        let len = rng.below(200) as u8;
        (0..=len).map(|i| i.wrapping_mul(31) ^ len).collect()
    }
    fn apply(&mut self, value: &Vec<u8>) {
        self.0 = Some(value.clone());
    }
}

impl Store for PointerStore {
    type Model = Value;
    fn apply(&mut self, value: &Vec<u8>) -> io::Result<()> {
        self.set(value)
    }
    fn check(&mut self, model: &Value) -> Checked {
        expect_eq(self.get()?, model.0.clone(), "the value")
    }
}

// ---- The binary ----

/// The store promises to survive power losses and failing syncs; it
/// checksums, but keeps no second copy to survive a flipped bit.
pub fn faults() -> Faults {
    Faults::crash_and_fsync_errors()
}

#[derive(clap::Parser)]
struct Args {
    /// Which update protocol.
    #[arg(long, value_enum, default_value = "none")]
    bug: Bug,
    #[command(subcommand)]
    command: cli::StoreCommand,
}

#[allow(dead_code)] // the tests include this file for its store
fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    let mut command = "cargo run -p durlog-testbed --example pointer_store --".to_string();
    if args.bug != Bug::None {
        let name = clap::ValueEnum::to_possible_value(&args.bug).unwrap();
        command.push_str(&format!(" --bug {}", name.get_name()));
    }
    let bug = args.bug;
    let scenario = StoreScenario::new(&command, move |fs| PointerStore::open(fs, bug), faults());
    cli::store_main(&scenario, args.command)
}

//! durlog-testbed: crash-test your own storage code on a simulated disk
//! that loses power, tears writes, loses unsynced pages and directory
//! entries, fails syncs and flips bits, all from one seed.
//!
//! # Quickstart
//!
//! Say what the store should hold (a [`Model`]: a plain value and the
//! operations it takes) and how the store does it (a [`Store`] on an
//! [`fs::Fs`], the file system facade shaped like `std::fs`); [`check`]
//! does the rest: workloads, power losses during and between operations,
//! reboots, reopenings, and which operations were acknowledged and which
//! may or may not have happened. This store keeps one file per key and
//! replaces it through a temporary file; set `sync_before_rename` to
//! false and the check finds the classic bug.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::io::{self, Write};
//! use durlog_testbed::{check, expect_eq, fs::Fs, Checked, Faults, Gen, Model, Store};
//!
//! /// What the store should hold: a value per key.
//! #[derive(Clone, Debug, Default, PartialEq)]
//! struct Map(BTreeMap<u8, u8>);
//!
//! impl Model for Map {
//!     type Op = (u8, u8); // set key to value
//!     fn draw(rng: &mut Gen) -> (u8, u8) {
//!         (rng.below(3) as u8, rng.below(256) as u8)
//!     }
//!     fn apply(&mut self, &(key, value): &(u8, u8)) {
//!         self.0.insert(key, value);
//!     }
//! }
//!
//! /// One file per key, replaced through a temporary file.
//! struct FileKv { fs: Fs, sync_before_rename: bool }
//!
//! fn open(fs: Fs, sync_before_rename: bool) -> io::Result<FileKv> {
//!     fs.create_dir_all("/kv")?;
//!     Ok(FileKv { fs, sync_before_rename })
//! }
//!
//! impl Store for FileKv {
//!     type Model = Map;
//!     fn apply(&mut self, &(key, value): &(u8, u8)) -> io::Result<()> {
//!         let temp = format!("/kv/{key}.tmp");
//!         let _ = self.fs.remove_file(&temp); // left by a crash
//!         let mut file = self.fs.create(&temp)?;
//!         file.write_all(&[value])?;
//!         if self.sync_before_rename {
//!             file.sync_data()?; // else the rename may land before the data
//!         }
//!         self.fs.rename(&temp, format!("/kv/{key}"))?;
//!         self.fs.sync_dir("/kv")
//!     }
//!     fn check(&mut self, model: &Map) -> Checked {
//!         for key in 0..3 {
//!             let found = match self.fs.read(format!("/kv/{key}")) {
//!                 Err(error) if error.kind() == io::ErrorKind::NotFound => None,
//!                 read => Some(read?),
//!             };
//!             let expected = model.0.get(&key).map(|&value| vec![value]);
//!             expect_eq(found, expected, format!("key {key}"))?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! check(|fs| open(fs, true)).seeds(0..300).faults(Faults::crash_only()).run();
//!
//! let failure = check(|fs| open(fs, false)).seeds(0..300).try_run().unwrap_err();
//! assert!(failure.message.contains("key"), "{failure}");
//! ```
//!
//! In a `#[test]`, a failure panics with the seed, the violation, the
//! shrunk steps with their disk operations and faults, and the commands
//! that replay it (`DURLOG_TESTBED_SEED=...`); the seed is saved to a
//! regression file and runs first from then on ([`check`] lists the
//! variables). [`Check::exhaust`] runs every crash state of short
//! workloads instead of seeds. [`Faults`] says what a store must survive:
//! `crash_only()` for what every store must, `all()` for a store that
//! checksums.
//!
//! # Full control
//!
//! A [`Scenario`] draws its own plan from a seed and runs it, for a system
//! the simple form does not fit (durlog's own simulator, a simulated raft
//! cluster). On it the testbed gives:
//!
//! - [`campaign`]: a range of seeds over threads (`--jobs`) and machines
//!   (`--shard I/N`), `--fail-fast`, progress on stderr and a summary in
//!   seed order, whose digest is the same for any split;
//! - [`shard`]: a shard's report (JSON) and `merge`, which prints exactly
//!   what one machine running the whole range prints;
//! - [`shrink`]: a failing run cut to the fewest actions and faults that
//!   still fail, and the command that replays exactly that;
//! - [`explore`]: every crash state of small workloads, through the
//!   disk's [`durlog_vfs::CrashScript`];
//! - [`seeds`]: named sub-seeds, so that adding a part to a run never
//!   shifts the randomness of another;
//! - a determinism check ([`campaign::check_determinism`]): each seed run
//!   twice and the digests compared;
//! - coverage marks ([`mark!`], [`Scenario::marks`]): points of the code
//!   under test that a campaign must reach;
//! - [`options`]: a scenario's options in one typed form, printed in repro
//!   lines and stored in reports;
//! - [`cli`]: the commands (`run`, `merge`, `repro`, `exhaust`) a
//!   scenario's binary is made of, and [`cli::store_main`], a whole
//!   binary for a [`Store`].
//!
//! Nothing in a run may depend on the wall clock, on threads or on hash
//! order: everything comes from the seed. The testbed runs each seed on
//! one thread and folds the results in seed order.

pub mod campaign;
mod check;
pub mod cli;
pub mod explore;
mod faults;
pub mod options;
mod scenario;
pub mod seeds;
pub mod shard;
pub mod shrink;
mod store;

/// The file system facade a [`Store`] is written against: `std::fs`'s
/// shape, on the real disk ([`fs::Fs::os`]) or on the simulated one.
pub use durlog_vfs::fs;
/// The simulated disk and its faults, for a [`Scenario`] of your own.
pub use durlog_vfs::{FaultConfig, FaultKind, SimVfs, mark};
/// The randomness of plans, for a [`Scenario`] of your own.
pub use rand;
pub use rand_chacha;

pub use campaign::{Progress, Summary, run_campaign};
pub use check::{Check, CheckFailure, Report, check};
pub use faults::Faults;
pub use scenario::{Counts, Marks, Outcome, Scenario, Tally, Violation, panic_message, run_caught};
pub use seeds::{SubSeeds, fold_digests, mix, shard_seeds};
pub use store::{
    Checked, Failure, Gen, Letters, Model, Open, PowerLoss, Step, Store, StoreOptions, StorePlan,
    StoreScenario, expect_eq,
};

//! The `durlog` command's implementation, one module per concern, so that
//! tests drive exactly the code the binary runs.
//!
//! - [`append`]: stdin lines become events; each version is printed only
//!   after the append that made it durable returned.
//! - [`inspect`]: `read`, `dump` and `streams`, all read-only: they open the
//!   log with `Log::open_read_only` or scan it with `durlog::recovery`, so
//!   they never create, truncate or sync anything.
//! - [`retention`]: `purge` and `truncate`, the writer's commands that
//!   shrink a log; like `append`, they take the log's lock.
//! - [`metadata`]: `delete` and `metadata`, a stream's deletion and
//!   metadata (writers, but for `metadata` showing alone).
//! - [`tables`]: the tables of stream metadata and consumer positions, as
//!   `dump`, `verify` and `metadata` show them.
//! - [`state`]: the log's state file, as `dump` and `read` show it.
//! - [`tail`]: every event of the whole log in commit order, through the
//!   engine's filter; with `--follow`, each new one as it appears in the
//!   files; with `--consumer`, from a consumer's position, recorded as it
//!   prints.
//! - [`verify`]: the fsck-style verdict and its exit code.
//! - [`escape`] and [`time`]: the text formats of `read` and `dump`;
//!   [`words`]: counts in the one-line verdicts.
//! - [`error`]: the one-line error every failing command prints.
//!
//! - [`args`]: the command line (clap); `main.rs` only dispatches.

pub mod append;
pub mod args;
pub mod error;
pub mod escape;
pub mod inspect;
pub mod metadata;
pub mod retention;
pub mod state;
pub mod tables;
pub mod tail;
pub mod time;
pub mod verify;
pub mod words;

pub use error::CliError;

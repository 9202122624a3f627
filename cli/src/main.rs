//! `durlog`: append to, read, tail, dump, verify, purge, truncate and list
//! a durlog log directory, and set its streams' metadata and deletions,
//! from the shell. Argument parsing and exit codes only; the commands are
//! in the `durlog_cli` library.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use durlog::Options;
use durlog_cli::CliError;
use durlog_cli::append::{self, AppendArgs};
use durlog_cli::args::{Cli, Command};
use durlog_cli::inspect::{self, ReadArgs, ReadFormat};
use durlog_cli::metadata::{self, MetadataChange};
use durlog_cli::retention;
use durlog_cli::tail::{self, TailArgs};
use durlog_cli::verify::{self, EXIT_USAGE};

/// Exit code of every command but `verify` on an error.
const EXIT_ERROR: u8 = 1;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            if !error.use_stderr() {
                return ExitCode::SUCCESS; // --help, --version
            }
            let is_verify = std::env::args_os().nth(1).as_deref() == Some(OsStr::new("verify"));
            return ExitCode::from(if is_verify { EXIT_USAGE } else { EXIT_ERROR });
        }
    };
    let (name, result) = match &cli.command {
        Command::Verify { dir } => {
            let verdict = verify::run(dir);
            if verdict.exit_code == verify::EXIT_CLEAN {
                println!("{}", verdict.message);
            } else {
                eprintln!("durlog verify: {}", verdict.message);
            }
            return ExitCode::from(verdict.exit_code);
        }
        Command::Append {
            dir,
            stream,
            event_type,
            expected,
            segment_bytes,
        } => {
            let args = AppendArgs {
                dir,
                stream,
                event_type,
                expected: *expected,
            };
            let options = Options {
                segment_bytes: *segment_bytes,
                ..Options::default()
            };
            let result = append::run(
                &args,
                options,
                &mut io::stdin().lock(),
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            );
            ("append", result.map(drop))
        }
        Command::Read {
            dir,
            stream,
            from,
            limit,
            json,
        } => {
            let format = if *json {
                ReadFormat::Json
            } else {
                ReadFormat::Text
            };
            let args = ReadArgs {
                dir,
                stream,
                from: *from,
                limit: *limit,
                format,
            };
            ("read", inspect::read(&args, &mut io::stdout().lock()))
        }
        Command::Tail {
            dir,
            from,
            follow,
            streams,
            types,
            apply_metadata,
            consumer,
            record_every,
            json,
        } => {
            let args = TailArgs {
                dir,
                from: *from,
                follow: *follow,
                streams,
                types,
                apply_metadata: *apply_metadata,
                consumer: consumer.as_deref(),
                record_every: *record_every,
                format: if *json {
                    ReadFormat::Json
                } else {
                    ReadFormat::Text
                },
            };
            let result = tail::run(&args, &mut io::stdout().lock(), &mut io::stderr().lock());
            ("tail", result)
        }
        Command::Delete { dir, stream, hard } => (
            "delete",
            metadata::delete(
                dir,
                stream,
                *hard,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            ),
        ),
        Command::Metadata {
            dir,
            stream,
            max_count,
            max_age,
            truncate_before,
        } => {
            let change = MetadataChange {
                max_count: *max_count,
                max_age: *max_age,
                truncate_before: *truncate_before,
            };
            let result = metadata::metadata(
                dir,
                stream,
                change,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            );
            ("metadata", result)
        }
        Command::Purge { dir, before } => (
            "purge",
            retention::purge(
                dir,
                *before,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            ),
        ),
        Command::Truncate { dir, after } => (
            "truncate",
            retention::truncate(
                dir,
                *after,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            ),
        ),
        Command::Dump { dir } => ("dump", inspect::dump(dir, &mut io::stdout().lock())),
        Command::Streams { dir, prefix } => (
            "streams",
            inspect::streams(dir, prefix, &mut io::stdout().lock()),
        ),
    };
    finish(name, result)
}

fn finish(name: &str, result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of a read-only command's output stopped early
        // (`| head`): what it read is right, so this is not a failure.
        // `append` still fails: a version it could not print is a promise
        // nobody received.
        Err(error) if error.is_broken_pipe() && name != "append" => ExitCode::SUCCESS,
        Err(error) => {
            let _ = io::stdout().flush();
            eprintln!("durlog {name}: {}", error.one_line());
            ExitCode::from(EXIT_ERROR)
        }
    }
}

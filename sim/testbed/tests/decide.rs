//! After a power loss the store's check decides what an operation in doubt
//! did: a store whose recovery shows an operation's effect and then loses
//! it at the next power loss (a repair it never synced) is caught, and the
//! same store with the repair synced passes.

use std::io::{self, Write};

use durlog_testbed::fs::Fs;
use durlog_testbed::{Checked, Faults, Gen, Model, Store, check, expect_eq};

#[derive(Clone, Debug, Default, PartialEq)]
struct Value(Option<u8>);

impl Model for Value {
    type Op = u8;
    fn draw(rng: &mut Gen) -> u8 {
        rng.below(256) as u8
    }
    fn apply(&mut self, value: &u8) {
        self.0 = Some(*value);
    }
}

/// A value installed through an intent file: `pending` is made durable
/// first, then `current` replaced; recovery finishes an install that a
/// crash cut, and may forget to sync it: the reopened store shows the
/// value, and the next power loss takes it back. Only a check that takes
/// what a reopened store shows as decided can tell.
struct Installer {
    fs: Fs,
}

fn open(fs: Fs, sync_repair: bool) -> io::Result<Installer> {
    fs.create_dir_all("/s")?;
    if fs.exists("/s/pending")? {
        // A value and its complement: anything else is a write a crash
        // cut (short, or zeros where a page was lost), nothing to finish.
        let intent = fs.read("/s/pending")?;
        if let [value, check] = intent[..]
            && check == !value
        {
            if sync_repair || !fs.exists("/s/current")? {
                install(&fs, &[value])?;
            } else {
                // The bug: the value written over the old one and never
                // synced, while the intent's removal is.
                fs.options()
                    .write(true)
                    .open("/s/current")?
                    .write_all(&[value])?;
            }
        }
        fs.remove_file("/s/pending")?;
        fs.sync_dir("/s")?;
    }
    Ok(Installer { fs })
}

/// `current` replaced by `value`, durably.
fn install(fs: &Fs, value: &[u8]) -> io::Result<()> {
    let _ = fs.remove_file("/s/current.tmp");
    let mut temp = fs.create("/s/current.tmp")?;
    temp.write_all(value)?;
    temp.sync_data()?;
    fs.rename("/s/current.tmp", "/s/current")?;
    fs.sync_dir("/s")
}

impl Store for Installer {
    type Model = Value;

    fn apply(&mut self, value: &u8) -> io::Result<()> {
        let mut pending = self.fs.create("/s/pending")?;
        pending.write_all(&[*value, !*value])?;
        pending.sync_data()?;
        self.fs.sync_dir("/s")?;
        install(&self.fs, &[*value])?;
        self.fs.remove_file("/s/pending")?;
        self.fs.sync_dir("/s")
    }

    fn check(&mut self, model: &Value) -> Checked {
        let found = match self.fs.read("/s/current") {
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            read => Some(read?),
        };
        expect_eq(found, model.0.map(|value| vec![value]), "current")
    }
}

#[test]
fn a_recovery_that_does_not_sync_its_repair_is_caught() {
    let failure = check(|fs| open(fs, false))
        .seeds(0..3000)
        .faults(Faults::crash_only())
        .without_regressions()
        .try_run()
        .expect_err("an unsynced repair passes");
    assert!(failure.message.contains("current"), "{failure}");
}

#[test]
fn the_same_recovery_with_its_repair_synced_passes() {
    check(|fs| open(fs, true))
        .seeds(0..3000)
        .faults(Faults::crash_only())
        .without_regressions()
        .run();
}

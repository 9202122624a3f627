//! The `std::fs`-shaped facade, `durlog_vfs::fs::Fs`.
//!
//! - A property test runs one random sequence of operations three times:
//!   on `std::fs` itself (the reference), on `Fs::os()` and on `Fs` over a
//!   `SimVfs`, each under its own root, and demands the same transcript
//!   (results, contents, listings, error kinds) and the same final tree.
//!   The reference is what lets it catch a bug of the facade, which would
//!   show on both facade runs alike.
//! - Every combination of open options behaves as std's does.
//! - Crash semantics through the facade on `SimVfs` (every fault off).
//! - Every error names its path, once.

use std::fs as stdfs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use durlog_vfs::fs::Fs;
use durlog_vfs::{FaultConfig, FaultKind, SimVfs, injected_fault};
use proptest::prelude::*;

/// The options an `Open` sets, as std's `OpenOptions` names them.
#[derive(Clone, Copy, Debug)]
struct Flags {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
}

impl Flags {
    fn from_bits(bits: u8) -> Flags {
        let bit = |n: u8| bits & (1 << n) != 0;
        Flags {
            read: bit(0),
            write: bit(1),
            append: bit(2),
            truncate: bit(3),
            create: bit(4),
            create_new: bit(5),
        }
    }
}

/// One step of a sequence. Names are relative to the run's root, which
/// holds a directory `d` from the start. An open puts its handle in
/// `slot`; an operation on a handle takes the `slot`-th open one (modulo
/// how many are open).
#[derive(Clone, Debug)]
enum Op {
    Create {
        slot: usize,
        name: &'static str,
    },
    OpenRead {
        slot: usize,
        name: &'static str,
    },
    Open {
        slot: usize,
        name: &'static str,
        flags: Flags,
    },
    Write {
        slot: usize,
        data: Vec<u8>,
    },
    Read {
        slot: usize,
        len: usize,
    },
    Seek {
        slot: usize,
        to: SeekFrom,
    },
    SetLen {
        slot: usize,
        len: u64,
    },
    Len {
        slot: usize,
    },
    SyncAll {
        slot: usize,
    },
    Close {
        slot: usize,
    },
    FsWrite {
        name: &'static str,
        data: Vec<u8>,
    },
    FsRead {
        name: &'static str,
    },
    FsReadToString {
        name: &'static str,
    },
    Rename {
        from: &'static str,
        to: &'static str,
    },
    Remove {
        name: &'static str,
    },
    ReadDir {
        name: &'static str,
    },
    Exists {
        name: &'static str,
    },
    CreateDirAll {
        name: &'static str,
    },
    SyncDir {
        name: &'static str,
    },
}

/// The names a file is opened at. No directory: `open(2)` opens one
/// read-only on Linux, `SimVfs` refuses, and that is the backends' business.
const FILES: &[&str] = &["a", "b", "d/e", "nodir/f"];
/// Names for whole-file calls, which behave alike on a directory.
const PATHS: &[&str] = &["a", "b", "d/e", "nodir/f", "d"];
/// Names to list, look up or sync; "" is the root.
const DIRS: &[&str] = &["", "d", "a", "nodir"];
const EXISTS: &[&str] = &["", "a", "a/", "a/x", "d", "d/e", "d/sub", "g", "nodir/f"];
const SYNC_DIRS: &[&str] = &["", "d", "nodir"];
const SLOTS: usize = 3;

fn data() -> impl Strategy<Value = Vec<u8>> {
    // Mostly letters, sometimes a byte that is not UTF-8.
    prop::collection::vec(prop_oneof![9 => b'a'..=b'z', 1 => Just(0xff_u8)], 0..10)
}

fn seek() -> impl Strategy<Value = SeekFrom> {
    prop_oneof![
        (0u64..40).prop_map(SeekFrom::Start),
        (-12i64..6).prop_map(SeekFrom::End),
        (-12i64..12).prop_map(SeekFrom::Current),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    use prop::sample::select;
    let slot = 0..SLOTS;
    prop_oneof![
        2 => (slot.clone(), select(FILES)).prop_map(|(slot, name)| Op::Create { slot, name }),
        1 => (slot.clone(), select(FILES)).prop_map(|(slot, name)| Op::OpenRead { slot, name }),
        3 => (slot.clone(), select(FILES), 0u8..64).prop_map(|(slot, name, bits)| Op::Open {
            slot,
            name,
            flags: Flags::from_bits(bits),
        }),
        5 => (slot.clone(), data()).prop_map(|(slot, data)| Op::Write { slot, data }),
        3 => (slot.clone(), 0usize..16).prop_map(|(slot, len)| Op::Read { slot, len }),
        3 => (slot.clone(), seek()).prop_map(|(slot, to)| Op::Seek { slot, to }),
        1 => (slot.clone(), 0u64..24).prop_map(|(slot, len)| Op::SetLen { slot, len }),
        1 => slot.clone().prop_map(|slot| Op::Len { slot }),
        1 => slot.clone().prop_map(|slot| Op::SyncAll { slot }),
        1 => slot.prop_map(|slot| Op::Close { slot }),
        2 => (select(PATHS), data()).prop_map(|(name, data)| Op::FsWrite { name, data }),
        2 => select(PATHS).prop_map(|name| Op::FsRead { name }),
        1 => select(PATHS).prop_map(|name| Op::FsReadToString { name }),
        // Files onto files only: directories are never renamed (the Vfs
        // refuses, std would not), and a file onto a non-empty directory
        // is ENOTEMPTY on Linux, IsADirectory on SimVfs.
        2 => (select(FILES), select(FILES)).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => select(PATHS).prop_map(|name| Op::Remove { name }),
        1 => select(DIRS).prop_map(|name| Op::ReadDir { name }),
        2 => select(EXISTS).prop_map(|name| Op::Exists { name }),
        1 => select(&["d/sub", "g"][..]).prop_map(|name| Op::CreateDirAll { name }),
        1 => select(SYNC_DIRS).prop_map(|name| Op::SyncDir { name }),
    ]
}

/// What the transcript records of an error: its kind, except that a read
/// or write refused by the open mode is "Denied" (std gets EBADF, whose
/// kind `Uncategorized` no one outside std can construct; the facade says
/// `PermissionDenied`).
fn kind(error: &io::Error) -> String {
    let kind = format!("{:?}", error.kind());
    match kind.as_str() {
        "Uncategorized" | "PermissionDenied" => "Denied".to_string(),
        _ => kind,
    }
}

fn outcome<T>(result: io::Result<T>, show: impl FnOnce(T) -> String) -> String {
    match result {
        Ok(value) => show(value),
        Err(error) => format!("err {}", kind(&error)),
    }
}

fn at(root: &Path, name: &str) -> PathBuf {
    if name.is_empty() {
        root.to_path_buf()
    } else {
        root.join(name)
    }
}

/// The calls of the property test, on `std::fs` or on the facade.
trait Backend {
    type File: Read + Write + Seek;
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    fn open_with(&self, path: &Path, flags: Flags) -> io::Result<Self::File>;
    fn set_len(file: &Self::File, len: u64) -> io::Result<()>;
    fn len(file: &Self::File) -> io::Result<u64>;
    fn sync_all(file: &Self::File) -> io::Result<()>;
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn read_to_string(&self, path: &Path) -> io::Result<String>;
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// (path, name, is_dir) of each entry, sorted by name.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<(PathBuf, String, bool)>>;
    fn exists(&self, path: &Path) -> io::Result<bool>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// `std::fs` itself: the reference.
struct Std;

impl Backend for Std {
    type File = stdfs::File;
    fn create(&self, path: &Path) -> io::Result<stdfs::File> {
        // The facade's `create` also reads (see its doc); std's would not.
        stdfs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }
    fn open(&self, path: &Path) -> io::Result<stdfs::File> {
        stdfs::File::open(path)
    }
    fn open_with(&self, path: &Path, flags: Flags) -> io::Result<stdfs::File> {
        stdfs::OpenOptions::new()
            .read(flags.read)
            .write(flags.write)
            .append(flags.append)
            .truncate(flags.truncate)
            .create(flags.create)
            .create_new(flags.create_new)
            .open(path)
    }
    fn set_len(file: &stdfs::File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
    fn len(file: &stdfs::File) -> io::Result<u64> {
        Ok(file.metadata()?.len())
    }
    fn sync_all(file: &stdfs::File) -> io::Result<()> {
        file.sync_all()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        stdfs::read(path)
    }
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        stdfs::read_to_string(path)
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        stdfs::write(path, data)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        stdfs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        stdfs::remove_file(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<(PathBuf, String, bool)>> {
        let mut entries = Vec::new();
        for entry in stdfs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push((entry.path(), name, entry.file_type()?.is_dir()));
        }
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(entries)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        stdfs::exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        stdfs::create_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        stdfs::File::open(path)?.sync_all()
    }
}

impl Backend for Fs {
    type File = durlog_vfs::fs::File;
    fn create(&self, path: &Path) -> io::Result<Self::File> {
        Fs::create(self, path)
    }
    fn open(&self, path: &Path) -> io::Result<Self::File> {
        Fs::open(self, path)
    }
    fn open_with(&self, path: &Path, flags: Flags) -> io::Result<Self::File> {
        self.options()
            .read(flags.read)
            .write(flags.write)
            .append(flags.append)
            .truncate(flags.truncate)
            .create(flags.create)
            .create_new(flags.create_new)
            .open(path)
    }
    fn set_len(file: &Self::File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
    fn len(file: &Self::File) -> io::Result<u64> {
        file.len()
    }
    fn sync_all(file: &Self::File) -> io::Result<()> {
        file.sync_all()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        Fs::read(self, path)
    }
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        Fs::read_to_string(self, path)
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        Fs::write(self, path, data)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        Fs::rename(self, from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Fs::remove_file(self, path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<(PathBuf, String, bool)>> {
        Fs::read_dir(self, path)?
            .map(|entry| {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                Ok((entry.path(), name, entry.is_dir()))
            })
            .collect()
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        Fs::exists(self, path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        Fs::create_dir_all(self, path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        Fs::sync_dir(self, path)
    }
}

fn show_listing(root: &Path, entries: Vec<(PathBuf, String, bool)>) -> String {
    let shown: Vec<String> = entries
        .into_iter()
        .map(|(path, name, is_dir)| {
            let relative = path.strip_prefix(root).unwrap_or(&path).display();
            format!("{name}{} at {relative}", if is_dir { "/" } else { "" })
        })
        .collect();
    format!("[{}]", shown.join(", "))
}

fn bytes(data: Vec<u8>) -> String {
    format!("{:?}", String::from_utf8_lossy(&data))
}

/// One operation on an open handle.
fn file_op<B: Backend>(file: &mut B::File, op: &Op) -> String {
    match op {
        Op::Write { data, .. } => outcome(file.write_all(data), |()| "ok".into()),
        Op::Read { len, .. } => {
            let mut buf = vec![0u8; *len];
            outcome(file.read(&mut buf), |count| {
                buf.truncate(count);
                bytes(buf)
            })
        }
        Op::Seek { to, .. } => outcome(file.seek(*to), |pos| format!("at {pos}")),
        Op::SetLen { len, .. } => outcome(B::set_len(file, *len), |()| "ok".into()),
        Op::Len { .. } => outcome(B::len(file), |len| format!("len {len}")),
        Op::SyncAll { .. } => outcome(B::sync_all(file), |()| "ok".into()),
        _ => unreachable!("not a handle operation: {op:?}"),
    }
}

/// Runs `ops` under `root` (which exists and holds the directory `d`);
/// one line per operation, then the final tree.
fn run<B: Backend>(backend: &B, root: &Path, ops: &[Op]) -> Vec<String> {
    let mut slots: Vec<Option<B::File>> = (0..SLOTS).map(|_| None).collect();
    let mut transcript = Vec::new();
    for op in ops {
        let opened = |result: io::Result<B::File>, slot: &mut Option<B::File>| match result {
            Ok(file) => {
                *slot = Some(file);
                "opened".to_string()
            }
            Err(error) => format!("err {}", kind(&error)),
        };
        let line = match op {
            Op::Create { slot, name } => opened(backend.create(&at(root, name)), &mut slots[*slot]),
            Op::OpenRead { slot, name } => opened(backend.open(&at(root, name)), &mut slots[*slot]),
            Op::Open { slot, name, flags } => opened(
                backend.open_with(&at(root, name), *flags),
                &mut slots[*slot],
            ),
            Op::Close { slot } => format!("closed {}", slots[*slot].take().is_some()),
            Op::Write { slot, .. }
            | Op::Read { slot, .. }
            | Op::Seek { slot, .. }
            | Op::SetLen { slot, .. }
            | Op::Len { slot }
            | Op::SyncAll { slot } => {
                // Any open handle will do: most ops then find one.
                let open = slots.iter().flatten().count().max(1);
                match slots.iter_mut().flatten().nth(slot % open) {
                    Some(file) => file_op::<B>(file, op),
                    None => "no handle".to_string(),
                }
            }
            Op::FsWrite { name, data } => {
                outcome(backend.write(&at(root, name), data), |()| "ok".into())
            }
            Op::FsRead { name } => outcome(backend.read(&at(root, name)), bytes),
            Op::FsReadToString { name } => {
                outcome(backend.read_to_string(&at(root, name)), |text| {
                    format!("{text:?}")
                })
            }
            Op::Rename { from, to } => {
                outcome(backend.rename(&at(root, from), &at(root, to)), |()| {
                    "ok".into()
                })
            }
            Op::Remove { name } => outcome(backend.remove_file(&at(root, name)), |()| "ok".into()),
            Op::ReadDir { name } => outcome(backend.read_dir(&at(root, name)), |entries| {
                show_listing(root, entries)
            }),
            Op::Exists { name } => outcome(backend.exists(&at(root, name)), |e| e.to_string()),
            Op::CreateDirAll { name } => {
                outcome(backend.create_dir_all(&at(root, name)), |()| "ok".into())
            }
            Op::SyncDir { name } => outcome(backend.sync_dir(&at(root, name)), |()| "ok".into()),
        };
        transcript.push(format!("{op:?} -> {line}"));
    }
    tree(backend, root, root, &mut transcript);
    transcript
}

/// Appends every entry under `dir`, recursively, with each file's bytes.
fn tree<B: Backend>(backend: &B, root: &Path, dir: &Path, out: &mut Vec<String>) {
    let entries = backend.read_dir(dir).expect("list a directory of the tree");
    for (path, _, is_dir) in entries {
        let relative = path.strip_prefix(root).expect("under the root").display();
        if is_dir {
            out.push(format!("tree {relative}/"));
            tree(backend, root, &path, out);
        } else {
            let content = backend.read(&path).expect("read a file of the tree");
            out.push(format!("tree {relative} = {}", bytes(content)));
        }
    }
}

/// A fresh root holding the directory `d`, on the real disk.
fn temp_root() -> tempfile::TempDir {
    let temp = tempfile::TempDir::new().expect("create a temporary directory");
    stdfs::create_dir(temp.path().join("d")).expect("create d");
    temp
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn facade_matches_std_on_both_backends(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..48),
    ) {
        let std_root = temp_root();
        let reference = run(&Std, std_root.path(), &ops);

        let os_root = temp_root();
        let os = run(&Fs::os(), os_root.path(), &ops);

        let sim = Fs::from(SimVfs::new(seed));
        let sim_root = Path::new("/fs_facade");
        sim.create_dir_all(sim_root.join("d")).expect("create the simulated root");
        let simulated = run(&sim, sim_root, &ops);

        prop_assert_eq!(&reference, &os, "std::fs (left) and Fs::os() (right) disagree");
        prop_assert_eq!(&os, &simulated, "Fs::os() (left) and Fs over SimVfs (right) disagree");
    }
}

/// Opens `path` with `flags`, then seeks to 1, writes "XY" if writable and
/// reads all from 0 if readable; returns what happened and the file after.
fn options_probe<B: Backend>(backend: &B, path: &Path, flags: Flags) -> Vec<String> {
    let mut seen = Vec::new();
    match backend.open_with(path, flags) {
        Err(error) => seen.push(format!("open err {}", kind(&error))),
        Ok(mut file) => {
            seen.push("opened".to_string());
            file.seek(SeekFrom::Start(1)).expect("seek to 1");
            if flags.write || flags.append {
                seen.push(outcome(file.write_all(b"XY"), |()| "wrote".into()));
                seen.push(outcome(file.stream_position(), |pos| format!("at {pos}")));
            }
            if flags.read {
                file.seek(SeekFrom::Start(0)).expect("seek to 0");
                let mut all = Vec::new();
                seen.push(outcome(file.read_to_end(&mut all), |_| bytes(all)));
            }
        }
    }
    seen.push(outcome(backend.read(path), |content| {
        format!("now {}", bytes(content))
    }));
    seen
}

#[test]
fn every_option_combination_behaves_as_std() {
    for bits in 0u8..64 {
        let flags = Flags::from_bits(bits);
        for existing in [false, true] {
            let std_root = temp_root();
            let os_root = temp_root();
            let sim = Fs::from(SimVfs::new(u64::from(bits)));
            let sim_root = Path::new("/options");
            sim.create_dir_all(sim_root).unwrap();
            if existing {
                stdfs::write(std_root.path().join("f"), b"abcdef").unwrap();
                stdfs::write(os_root.path().join("f"), b"abcdef").unwrap();
                sim.write(sim_root.join("f"), b"abcdef").unwrap();
            }
            let reference = options_probe(&Std, &std_root.path().join("f"), flags);
            let os = options_probe(&Fs::os(), &os_root.path().join("f"), flags);
            let simulated = options_probe(&sim, &sim_root.join("f"), flags);
            assert_eq!(
                reference, os,
                "std vs Fs::os(): {flags:?}, existing {existing}"
            );
            assert_eq!(
                os, simulated,
                "Fs::os() vs SimVfs: {flags:?}, existing {existing}"
            );
        }
    }
}

#[test]
fn append_writes_at_the_end_wherever_the_cursor_is() {
    let sim = SimVfs::new(7);
    let fs = Fs::from(sim.clone());
    fs.create_dir_all("/db").unwrap();
    fs.write("/db/log", b"one").unwrap();
    let mut file = fs
        .options()
        .read(true)
        .append(true)
        .open("/db/log")
        .unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all(b"two").unwrap();
    assert_eq!(file.stream_position().unwrap(), 6);
    // Another handle grows the file: the next append goes after that.
    fs.options()
        .write(true)
        .open("/db/log")
        .unwrap()
        .write_all(b"ONETWOthree")
        .unwrap();
    file.write_all(b"!").unwrap();
    assert_eq!(fs.read("/db/log").unwrap(), b"ONETWOthree!");
    assert_eq!(
        sim.file_contents(Path::new("/db/log")).unwrap(),
        b"ONETWOthree!"
    );
}

#[test]
fn seek_past_the_end_then_write_fills_zeros_and_reads_end_with_zero() {
    let fs = Fs::from(SimVfs::new(3));
    fs.create_dir_all("/db").unwrap();
    let mut file = fs.create("/db/sparse").unwrap();
    file.seek(SeekFrom::Start(4)).unwrap();
    file.write_all(b"ab").unwrap();
    assert_eq!(file.len().unwrap(), 6);
    let mut buf = [9u8; 8];
    assert_eq!(file.read(&mut buf).unwrap(), 0, "the cursor is at the end");
    file.rewind().unwrap();
    assert_eq!(file.read(&mut buf).unwrap(), 6);
    assert_eq!(&buf[..6], b"\0\0\0\0ab");
    assert!(file.seek(SeekFrom::Current(-7)).is_err());
    assert_eq!(
        file.stream_position().unwrap(),
        6,
        "a failed seek moves nothing"
    );
}

/// A disk with every fault off, through the facade, with `/db` durable.
fn sim_db() -> (SimVfs, Fs) {
    let sim = SimVfs::new(11);
    let fs = Fs::from(sim.clone());
    fs.create_dir_all("/db").unwrap();
    (sim, fs)
}

/// Writes `bytes` to `path` and makes file and entry durable.
fn write_durably(fs: &Fs, path: &str, bytes: &[u8]) {
    let mut file = fs.create(path).unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
    fs.sync_dir(Path::new(path).parent().unwrap()).unwrap();
}

#[test]
fn unsynced_writes_are_lost_at_a_crash() {
    let (sim, fs) = sim_db();
    // A durable file overwritten and appended to without a sync.
    write_durably(&fs, "/db/old", b"v1");
    // A new file never synced (after that sync_dir, which would have made
    // its entry durable): neither entry nor data survive.
    fs.write("/db/new", b"hello").unwrap();
    assert_eq!(fs.read("/db/new").unwrap(), b"hello");
    let mut file = fs.options().write(true).open("/db/old").unwrap();
    file.write_all(b"V2 and more").unwrap();
    let mut log = fs.options().append(true).open("/db/old").unwrap();
    log.write_all(b"+tail").unwrap();
    assert_eq!(fs.read("/db/old").unwrap(), b"V2 and more+tail");

    sim.crash();
    assert!(
        !fs.exists("/db/new").unwrap(),
        "an unsynced create survived"
    );
    let error = fs.read("/db/new").unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert_eq!(
        fs.read("/db/old").unwrap(),
        b"v1",
        "cut back to the synced bytes"
    );
    // Handles from before the power loss are dead.
    let error = file.write_all(b"x").unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
}

#[test]
fn synced_data_and_entry_survive_a_crash() {
    let (sim, fs) = sim_db();
    write_durably(&fs, "/db/kept", b"durable bytes");
    let mut file = fs.create("/db/data_synced").unwrap();
    file.write_all(b"data only").unwrap();
    file.sync_data().unwrap();
    fs.sync_dir("/db").unwrap();
    // Data synced but the entry not: the create may be (here: is) undone.
    let mut orphan = fs.create("/db/entry_unsynced").unwrap();
    orphan.write_all(b"lost").unwrap();
    orphan.sync_all().unwrap();

    sim.crash();
    assert_eq!(fs.read("/db/kept").unwrap(), b"durable bytes");
    assert_eq!(fs.read("/db/data_synced").unwrap(), b"data only");
    assert!(!fs.exists("/db/entry_unsynced").unwrap());
    let names: Vec<_> = fs
        .read_dir("/db")
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["data_synced", "kept"]);
}

#[test]
fn a_rename_without_sync_dir_is_undone_at_a_crash() {
    let (sim, fs) = sim_db();
    write_durably(&fs, "/db/current", b"old");
    write_durably(&fs, "/db/current.tmp", b"new");
    fs.rename("/db/current.tmp", "/db/current").unwrap();
    assert_eq!(fs.read("/db/current").unwrap(), b"new");
    assert!(!fs.exists("/db/current.tmp").unwrap());
    let durable = sim.durable_contents(Path::new("/db/current"));
    assert_eq!(
        durable.as_deref(),
        Some(&b"old"[..]),
        "durable before sync_dir"
    );

    sim.crash();
    assert_eq!(fs.read("/db/current").unwrap(), b"old");
    assert_eq!(fs.read("/db/current.tmp").unwrap(), b"new");

    // The same rename, then sync_dir: it holds.
    fs.rename("/db/current.tmp", "/db/current").unwrap();
    fs.sync_dir("/db").unwrap();
    sim.crash();
    assert_eq!(fs.read("/db/current").unwrap(), b"new");
    assert!(!fs.exists("/db/current.tmp").unwrap());
}

#[test]
fn exists_reports_failures_instead_of_absence() {
    let (sim, fs) = sim_db();
    write_durably(&fs, "/db/a", b"x");
    assert!(fs.exists("/db/a").unwrap());
    assert!(fs.exists("/db").unwrap(), "directories exist too");
    assert!(fs.exists("/").unwrap());
    assert!(!fs.exists("/db/b").unwrap());
    assert!(!fs.exists("/nodir/b").unwrap());
    assert_eq!(
        fs.exists("/db/a/x").unwrap_err().kind(),
        io::ErrorKind::NotADirectory
    );
    // Opens fail with EIO now: a read does, exists (a listing) need not.
    sim.set_faults(FaultConfig::none().with(FaultKind::ReadError, 1.0));
    let error = fs.read("/db/a").unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::ReadError));
    assert!(fs.exists("/db/a").unwrap());
    // A disk that is down answers nothing: that is no "false".
    sim.halt();
    let error = fs.exists("/db/a").unwrap_err();
    assert_eq!(injected_fault(&error), Some(FaultKind::Crash));
    assert!(fs.exists("/db/b").is_err());
}

/// Makes each error of the facade (its own and the Vfs's) on `fs` under
/// `root` and requires its message to name the path exactly once.
fn errors_name_their_path(fs: &Fs, root: &Path) {
    let file = root.join("file");
    let missing = root.join("missing");
    fs.write(&file, [0xff, 0xfe]).unwrap();
    let mut read_only = fs.open(&file).unwrap();
    let mut write_only = fs.options().write(true).open(&file).unwrap();
    let cases: Vec<(&Path, io::Error)> = vec![
        (&missing, fs.open(&missing).unwrap_err()),
        (&missing, fs.read(&missing).unwrap_err()),
        (
            &missing,
            fs.options().write(true).open(&missing).unwrap_err(),
        ),
        (
            &file,
            fs.options()
                .read(true)
                .create(true)
                .open(&file)
                .unwrap_err(),
        ),
        (
            &file,
            fs.options()
                .append(true)
                .truncate(true)
                .open(&file)
                .unwrap_err(),
        ),
        (
            &file,
            fs.options()
                .write(true)
                .create_new(true)
                .open(&file)
                .unwrap_err(),
        ),
        (&file, read_only.write(b"x").unwrap_err()),
        (&file, write_only.read(&mut [0u8; 4]).unwrap_err()),
        (&file, read_only.set_len(0).unwrap_err()),
        (&file, read_only.seek(SeekFrom::End(-3)).unwrap_err()),
        (&file, fs.read_to_string(&file).unwrap_err()),
        (&missing, fs.remove_file(&missing).unwrap_err()),
        (&missing, fs.read_dir(&missing).unwrap_err()),
        (&missing, fs.sync_dir(&missing).unwrap_err()),
        // exists passes the listing's error on (so `injected_fault` still
        // tells injected ones apart): it names the directory it listed.
        (&file, fs.exists(file.join("x")).unwrap_err()),
        (&file, fs.exists(root.join("file/")).unwrap_err()),
        (&missing, fs.rename(&missing, &file).unwrap_err()),
        (&file, fs.rename(&missing, &file).unwrap_err()),
    ];
    for (index, (path, error)) in cases.iter().enumerate() {
        let message = error.to_string();
        let named = message.matches(&*path.to_string_lossy()).count();
        assert_eq!(
            named, 1,
            "case {index}: {message:?} names {path:?} {named} times"
        );
    }
}

#[test]
fn errors_name_the_path_on_both_backends() {
    let temp = tempfile::TempDir::new().unwrap();
    errors_name_their_path(&Fs::os(), temp.path());
    let sim = Fs::from(SimVfs::new(5));
    sim.create_dir_all("/errors").unwrap();
    errors_name_their_path(&sim, Path::new("/errors"));
}

#[test]
fn conversions_share_the_backend() {
    let sim = SimVfs::new(9);
    let fs = Fs::from(sim.clone());
    let shared = Fs::from(std::sync::Arc::clone(fs.vfs()));
    let clone = fs.clone();
    fs.create_dir_all("/x").unwrap();
    shared.write("/x/a", b"1").unwrap();
    assert_eq!(clone.read("/x/a").unwrap(), b"1");
    assert_eq!(sim.files(), [PathBuf::from("/x/a")]);
    let _os: Fs = durlog_vfs::PosixVfs::new().into();
}

//! One conformance suite, run against the real file system (`PosixVfs` in a
//! temporary directory) and against `SimVfs` with every fault off: both must
//! pass the same assertions and produce the same transcript of observations.
//!
//! Each scenario is a function over `&dyn Vfs` and a root directory that
//! returns its transcript; `check` runs it on both backends and compares.

use std::io;
use std::path::Path;

use durlog_vfs::{DirEntry, OpenMode, PosixVfs, SimVfs, Vfs, VfsFile, read_exact_at};

type Scenario = fn(&dyn Vfs, &Path) -> Vec<String>;

/// Runs `scenario` on both backends and requires identical transcripts.
fn check(scenario: Scenario) {
    let temp = tempfile::TempDir::new().expect("create a temporary directory");
    let posix = scenario(&PosixVfs::new(), temp.path());

    let sim = SimVfs::new(1);
    let root = Path::new("/conformance");
    sim.create_dir_all(root).expect("create the simulated root");
    let simulated = scenario(&sim, root);

    assert_eq!(
        posix, simulated,
        "PosixVfs (left) and SimVfs (right) disagree"
    );
}

/// The error kind, or "ok": what the transcript records of a result.
fn outcome<T>(result: io::Result<T>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(error) => format!("{:?}", error.kind()),
    }
}

fn create(vfs: &dyn Vfs, path: &Path) -> Box<dyn VfsFile> {
    vfs.open(path, OpenMode::CreateNew)
        .unwrap_or_else(|error| panic!("create {}: {error}", path.display()))
}

fn read_all(file: &dyn VfsFile) -> Vec<u8> {
    let len = file.len().expect("len") as usize;
    let mut buf = vec![0u8; len];
    read_exact_at(file, &mut buf, 0).expect("read the whole file");
    buf
}

fn listing(entries: &[DirEntry]) -> String {
    entries
        .iter()
        .map(|entry| format!("{}{}", entry.name, if entry.is_dir { "/" } else { "" }))
        .collect::<Vec<_>>()
        .join(" ")
}

fn read_after_write(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    assert!(file.is_empty().unwrap());
    file.write_at(b"hello", 0).unwrap();
    let mut buf = [0u8; 16];
    let count = file.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..count], b"hello");
    // A second handle sees what the first wrote.
    let other = vfs.open(&root.join("a"), OpenMode::ReadOnly).unwrap();
    assert_eq!(read_all(&*other), b"hello");
    file.write_at(b" world", 5).unwrap();
    assert_eq!(read_all(&*other), b"hello world");
    vec![
        format!("read {count} bytes"),
        format!("len {}", other.len().unwrap()),
    ]
}

fn positional_overwrite(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"abcdef", 0).unwrap();
    file.write_at(b"XY", 2).unwrap();
    assert_eq!(read_all(&*file), b"abXYef");
    file.write_at(b"123", 5).unwrap();
    assert_eq!(read_all(&*file), b"abXYe123");
    // Across a page boundary.
    let page = vec![7u8; 5000];
    file.write_at(&page, 4000).unwrap();
    file.write_at(b"zz", 4095).unwrap();
    let content = read_all(&*file);
    assert_eq!(content.len(), 9000);
    assert_eq!(&content[4094..4098], &[7, b'z', b'z', 7]);
    vec![String::from_utf8_lossy(&content[..8]).into_owned()]
}

fn truncate(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"0123456789", 0).unwrap();
    file.set_len(4).unwrap();
    assert_eq!(file.len().unwrap(), 4);
    let mut buf = [0u8; 10];
    let count = file.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..count], b"0123");
    file.set_len(0).unwrap();
    assert!(file.is_empty().unwrap());
    vec![format!("read {count} after truncate")]
}

fn extend_with_zeros(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"abc", 0).unwrap();
    file.set_len(8).unwrap();
    assert_eq!(read_all(&*file), b"abc\0\0\0\0\0");
    // Writing past the end leaves a hole of zeros.
    file.write_at(b"z", 20).unwrap();
    let content = read_all(&*file);
    assert_eq!(content.len(), 21);
    assert!(content[3..20].iter().all(|&byte| byte == 0));
    // Truncate, then extend: the old bytes do not come back.
    file.set_len(1).unwrap();
    file.set_len(5).unwrap();
    assert_eq!(read_all(&*file), b"a\0\0\0\0");
    vec![format!("len {}", file.len().unwrap())]
}

fn read_past_end(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"abcdef", 0).unwrap();
    let mut buf = [0u8; 4];
    let mut transcript = Vec::new();
    for offset in [4, 6, 7, 1000] {
        let count = file.read_at(&mut buf, offset).unwrap();
        transcript.push(format!("read at {offset}: {count}"));
    }
    assert_eq!(file.read_at(&mut buf, 4).unwrap(), 2);
    assert_eq!(file.read_at(&mut buf, 6).unwrap(), 0);
    let error = read_exact_at(&*file, &mut buf, 4).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(file.read_at(&mut [], 0).unwrap(), 0);
    transcript
}

/// Reads onto a buffer that holds bytes already: what `read_at` would
/// read, appended (SimVfs copies without zeroing; PosixVfs reads into
/// zeroed room), and an exact read past the end leaves the buffer alone.
fn reads_onto_a_vec(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"abcdefghij", 0).unwrap();
    let mut transcript = Vec::new();
    for (len, offset) in [(4, 0), (4, 8), (4, 10), (0, 3), (10, 0), (3, 1000)] {
        let mut buf = b"xy".to_vec();
        let count = file.read_at_onto(&mut buf, len, offset).unwrap();
        assert_eq!(buf.len(), 2 + count, "exactly what was read is appended");
        transcript.push(format!(
            "onto {len} at {offset}: {count} {:?}",
            String::from_utf8_lossy(&buf)
        ));
    }
    let mut buf = b"xy".to_vec();
    durlog_vfs::read_exact_at_onto(&*file, &mut buf, 5, 2).unwrap();
    assert_eq!(buf, b"xycdefg");
    let error = durlog_vfs::read_exact_at_onto(&*file, &mut buf, 5, 8).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(buf, b"xycdefg", "a failed exact read appends nothing");
    transcript
}

fn directory_listing(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    assert_eq!(vfs.list_dir(root).unwrap(), Vec::new());
    for name in ["b.log", "a.log", "10.log", "9.log"] {
        create(vfs, &root.join(name));
    }
    vfs.create_dir_all(&root.join("c")).unwrap();
    vfs.create_dir_all(&root.join("a")).unwrap();
    let entries = vfs.list_dir(root).unwrap();
    let mut sorted = entries.clone();
    sorted.sort();
    assert_eq!(entries, sorted, "list_dir must be sorted");
    assert_eq!(listing(&entries), "10.log 9.log a/ a.log b.log c/");
    vfs.remove_file(&root.join("a.log")).unwrap();
    let after = vfs.list_dir(root).unwrap();
    assert_eq!(listing(&after), "10.log 9.log a/ b.log c/");
    vec![listing(&entries), listing(&after)]
}

fn create_dir_all(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let deep = root.join("x").join("y").join("z");
    vfs.create_dir_all(&deep).unwrap();
    vfs.create_dir_all(&deep).unwrap(); // already there: no effect
    vfs.create_dir_all(&root.join("x")).unwrap();
    create(vfs, &deep.join("f"));
    assert_eq!(listing(&vfs.list_dir(&root.join("x")).unwrap()), "y/");
    assert_eq!(listing(&vfs.list_dir(&deep).unwrap()), "f");
    // A file where a directory is wanted.
    let over_file = outcome(vfs.create_dir_all(&deep.join("f")));
    assert_eq!(over_file, "AlreadyExists");
    vec![over_file]
}

fn sync_calls(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"durable", 0).unwrap();
    file.sync_data().unwrap();
    file.write_at(b"!", 7).unwrap();
    file.sync_all().unwrap();
    vfs.sync_dir(root).unwrap();
    file.set_len(3).unwrap();
    file.sync_data().unwrap();
    let reader = vfs.open(&root.join("a"), OpenMode::ReadOnly).unwrap();
    reader.sync_data().unwrap(); // a read-only handle may sync
    assert_eq!(read_all(&*reader), b"dur");
    vec![String::from_utf8_lossy(&read_all(&*reader)).into_owned()]
}

fn errors_for_missing_paths(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let missing = root.join("missing");
    let transcript = vec![
        outcome(vfs.open(&missing, OpenMode::ReadOnly)),
        outcome(vfs.open(&missing, OpenMode::ReadWrite)),
        outcome(vfs.open(&missing.join("f"), OpenMode::CreateNew)),
        outcome(vfs.list_dir(&missing)),
        outcome(vfs.sync_dir(&missing)),
        outcome(vfs.remove_file(&missing)),
    ];
    assert!(
        transcript.iter().all(|kind| kind == "NotFound"),
        "{transcript:?}"
    );
    transcript
}

fn create_new_on_existing(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"keep", 0).unwrap();
    vfs.create_dir_all(&root.join("d")).unwrap();
    let transcript = vec![
        outcome(vfs.open(&root.join("a"), OpenMode::CreateNew)),
        outcome(vfs.open(&root.join("d"), OpenMode::CreateNew)),
    ];
    assert_eq!(transcript, ["AlreadyExists", "AlreadyExists"]);
    assert_eq!(
        read_all(&*file),
        b"keep",
        "a failed create must not truncate"
    );
    transcript
}

fn read_only_rejects_writes(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"original", 0).unwrap();
    let reader = vfs.open(&root.join("a"), OpenMode::ReadOnly).unwrap();
    // The kinds differ (EBADF on POSIX, PermissionDenied simulated): compare
    // only that both fail.
    let write_failed = reader.write_at(b"X", 0).is_err();
    let set_len_failed = reader.set_len(1).is_err();
    assert!(write_failed && set_len_failed);
    assert_eq!(read_all(&*reader), b"original");
    let writer = vfs.open(&root.join("a"), OpenMode::ReadWrite).unwrap();
    writer.write_at(b"O", 0).unwrap();
    assert_eq!(read_all(&*reader), b"Original");
    vec![format!(
        "write rejected {write_failed}, set_len rejected {set_len_failed}"
    )]
}

fn remove_keeps_open_handles_working(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("a"));
    file.write_at(b"still here", 0).unwrap();
    vfs.remove_file(&root.join("a")).unwrap();
    let reopened = outcome(vfs.open(&root.join("a"), OpenMode::ReadOnly));
    assert_eq!(reopened, "NotFound");
    assert_eq!(read_all(&*file), b"still here");
    // The name is free again.
    let again = create(vfs, &root.join("a"));
    assert!(again.is_empty().unwrap());
    vec![reopened]
}

fn rename_moves_and_replaces(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let (a, b, c) = (root.join("a"), root.join("b"), root.join("c"));
    let moved = create(vfs, &a);
    moved.write_at(b"moved", 0).unwrap();
    let replaced = create(vfs, &c);
    replaced.write_at(b"replaced", 0).unwrap();
    vfs.rename(&a, &b).unwrap();
    let mut transcript = vec![
        listing(&vfs.list_dir(root).unwrap()),
        outcome(vfs.open(&a, OpenMode::ReadOnly)),
    ];
    assert_eq!(
        read_all(&*vfs.open(&b, OpenMode::ReadOnly).unwrap()),
        b"moved"
    );
    // The handle follows the file to its new name.
    moved.write_at(b"M", 0).unwrap();
    assert_eq!(
        read_all(&*vfs.open(&b, OpenMode::ReadOnly).unwrap()),
        b"Moved"
    );
    // Onto an existing file: replaced; a handle on the old one keeps it.
    vfs.rename(&b, &c).unwrap();
    transcript.push(listing(&vfs.list_dir(root).unwrap()));
    assert_eq!(
        read_all(&*vfs.open(&c, OpenMode::ReadOnly).unwrap()),
        b"Moved"
    );
    assert_eq!(read_all(&*replaced), b"replaced");
    // Onto itself: nothing happens.
    transcript.push(outcome(vfs.rename(&c, &c)));
    transcript.push(listing(&vfs.list_dir(root).unwrap()));
    assert_eq!(transcript, ["b c", "NotFound", "c", "ok", "c"]);
    transcript
}

fn rename_errors_name_both_paths(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = root.join("file");
    let dir = root.join("dir");
    create(vfs, &file);
    vfs.create_dir_all(&dir).unwrap();
    let cases = [
        (root.join("missing"), root.join("to")),
        (dir.clone(), root.join("to")),
        (file.clone(), dir.clone()),
        (file.clone(), root.join("no/such/parent")),
    ];
    let mut transcript = Vec::new();
    for (from, to) in cases {
        let error = vfs.rename(&from, &to).unwrap_err();
        let message = error.to_string();
        for path in [&from, &to] {
            assert!(
                message.contains(&*path.to_string_lossy()),
                "{message} names {}",
                path.display()
            );
        }
        transcript.push(format!("{:?}", error.kind()));
    }
    assert_eq!(
        transcript,
        ["NotFound", "IsADirectory", "IsADirectory", "NotFound"]
    );
    // Nothing moved.
    transcript.push(listing(&vfs.list_dir(root).unwrap()));
    assert_eq!(transcript[4], "dir/ file");
    transcript
}

fn relative_dot_components(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let file = create(vfs, &root.join("./a"));
    file.write_at(b"dot", 0).unwrap();
    let same = vfs.open(&root.join("a"), OpenMode::ReadOnly).unwrap();
    assert_eq!(read_all(&*same), b"dot");
    vec![listing(&vfs.list_dir(&root.join(".")).unwrap())]
}

/// True if `error` names `path`, as every lock error must.
fn names(error: &io::Error, path: &Path) -> bool {
    error.to_string().contains(&*path.to_string_lossy())
}

fn lock_is_exclusive_until_dropped(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let path = root.join("LOCK");
    let first = vfs.lock_file(&path).expect("lock a free file");
    let error = vfs.lock_file(&path).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
    assert!(names(&error, &path), "{error}");
    drop(first);
    let again = vfs.lock_file(&path);
    let transcript = vec![format!("{:?}", error.kind()), outcome(again)];
    assert_eq!(transcript, ["WouldBlock", "ok"]);
    transcript
}

fn lock_creates_the_file_and_keeps_an_existing_one(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let _fresh = vfs.lock_file(&root.join("LOCK")).expect("lock a new file");
    let created = vfs.open(&root.join("LOCK"), OpenMode::ReadOnly).unwrap();
    assert!(created.is_empty().unwrap());
    // Locking never truncates: the file may be another holder's.
    create(vfs, &root.join("data"))
        .write_at(b"keep", 0)
        .unwrap();
    let _existing = vfs.lock_file(&root.join("data")).expect("lock a file");
    let data = vfs.open(&root.join("data"), OpenMode::ReadOnly).unwrap();
    assert_eq!(read_all(&*data), b"keep");
    vec![listing(&vfs.list_dir(root).unwrap())]
}

fn lock_errors_for_missing_directories_and_directories(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let in_missing = root.join("missing/LOCK");
    let dir = root.join("dir");
    vfs.create_dir_all(&dir).unwrap();
    let mut transcript = Vec::new();
    for path in [&in_missing, &dir] {
        let error = vfs.lock_file(path).unwrap_err();
        assert!(names(&error, path), "{error}");
        transcript.push(format!("{:?}", error.kind()));
    }
    assert_eq!(transcript, ["NotFound", "IsADirectory"]);
    transcript.push(listing(&vfs.list_dir(root).unwrap()));
    transcript
}

/// `flock` locks the file, not its name: the lock follows a rename, and a
/// lock file removed and created again is a new, free file.
fn lock_follows_the_file_not_the_name(vfs: &dyn Vfs, root: &Path) -> Vec<String> {
    let (a, b) = (root.join("a"), root.join("b"));
    let _held = vfs.lock_file(&a).unwrap();
    vfs.rename(&a, &b).unwrap();
    let renamed = outcome(vfs.lock_file(&b));
    vfs.remove_file(&b).unwrap();
    let recreated = outcome(vfs.lock_file(&b));
    let transcript = vec![renamed, recreated];
    assert_eq!(transcript, ["WouldBlock", "ok"]);
    transcript
}

#[test]
fn conformance_read_after_write() {
    check(read_after_write);
}

#[test]
fn conformance_reads_onto_a_vec() {
    check(reads_onto_a_vec);
}

#[test]
fn conformance_positional_overwrite() {
    check(positional_overwrite);
}

#[test]
fn conformance_truncate() {
    check(truncate);
}

#[test]
fn conformance_extend_with_zeros() {
    check(extend_with_zeros);
}

#[test]
fn conformance_read_past_end() {
    check(read_past_end);
}

#[test]
fn conformance_directory_listing() {
    check(directory_listing);
}

#[test]
fn conformance_create_dir_all() {
    check(create_dir_all);
}

#[test]
fn conformance_sync_calls() {
    check(sync_calls);
}

#[test]
fn conformance_errors_for_missing_paths() {
    check(errors_for_missing_paths);
}

#[test]
fn conformance_create_new_on_existing() {
    check(create_new_on_existing);
}

#[test]
fn conformance_read_only_rejects_writes() {
    check(read_only_rejects_writes);
}

#[test]
fn conformance_remove_keeps_open_handles_working() {
    check(remove_keeps_open_handles_working);
}

#[test]
fn conformance_rename_moves_and_replaces() {
    check(rename_moves_and_replaces);
}

#[test]
fn conformance_rename_errors_name_both_paths() {
    check(rename_errors_name_both_paths);
}

#[test]
fn conformance_relative_dot_components() {
    check(relative_dot_components);
}

#[test]
fn conformance_lock_is_exclusive_until_dropped() {
    check(lock_is_exclusive_until_dropped);
}

#[test]
fn conformance_lock_creates_the_file_and_keeps_an_existing_one() {
    check(lock_creates_the_file_and_keeps_an_existing_one);
}

#[test]
fn conformance_lock_errors_for_missing_directories_and_directories() {
    check(lock_errors_for_missing_directories_and_directories);
}

#[test]
fn conformance_lock_follows_the_file_not_the_name() {
    check(lock_follows_the_file_not_the_name);
}

#[test]
fn simulated_read_only_write_is_permission_denied() {
    let sim = SimVfs::new(1);
    sim.put_durable_file(Path::new("/d/a"), b"x");
    let reader = sim.open(Path::new("/d/a"), OpenMode::ReadOnly).unwrap();
    let error = reader.write_at(b"y", 0).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::PermissionDenied);
    assert!(error.to_string().contains("/d/a"), "{error}");
}

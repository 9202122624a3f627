"""Regenerates the PosixVfs pitfall patches from the substitutions below:
each plants one bug in the POSIX backend's error handling by replacing one
exact piece of vfs/src/posix.rs. Run from anywhere:
python3 vfs/pitfalls/posix/generate.py. When an `old` string no longer
exists, update it to the backend's current code."""
import os, re, subprocess, shutil, tempfile
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
out = root + '/vfs/pitfalls/posix'
FILE = 'vfs/src/posix.rs'
WRITE = '''            .write_all_at(buf, offset)
            .map_err(|error| self.named("write", error))'''
SYNC = '''        self.file
            .sync_data()
            .map_err(|error| self.named("fdatasync", error))'''
P = [
    ("01-short-write-taken-as-whole",
     "write_at makes one pwrite and ignores its count: a short write passes for a whole one",
     WRITE, '''            // PLANTED (vfs/pitfalls/posix/01): one pwrite, its count ignored.
            .write_at(buf, offset)
            .map(drop)
            .map_err(|error| self.named("write", error))'''),
    ("02-fdatasync-error-ignored",
     "sync_data ignores the error of fdatasync: a failed sync passes for a good one",
     SYNC, '''        // PLANTED (vfs/pitfalls/posix/02): the error of fdatasync dropped.
        let _ = self.file.sync_data();
        Ok(())'''),
    ("03-enospc-taken-as-success",
     "write_at treats ENOSPC as success: a write the disk had no room for is reported done",
     WRITE, '''            .write_all_at(buf, offset)
            // PLANTED (vfs/pitfalls/posix/03): no room is taken for done.
            .or_else(|error| match error.kind() {
                io::ErrorKind::StorageFull => Ok(()),
                _ => Err(error),
            })
            .map_err(|error| self.named("write", error))'''),
    ("04-write-error-without-the-path",
     "write_at returns the bare OS error: the message names neither the call nor the file",
     WRITE, '''            // PLANTED (vfs/pitfalls/posix/04): the error does not name the file.
            .write_all_at(buf, offset)'''),
    ("05-failed-fdatasync-retried",
     "sync_data retries a failed fdatasync and trusts the retry (SPEC 7.13 in the backend): the kernel reported the error once and marked the pages clean, so the retry succeeds without writing them",
     SYNC, '''        self.file
            .sync_data()
            // PLANTED (vfs/pitfalls/posix/05): a failed sync retried, and believed.
            .or_else(|_| self.file.sync_data())
            .map_err(|error| self.named("fdatasync", error))'''),
]
for name, desc, old, new in P:
    scratch = tempfile.mkdtemp(prefix='durlog-posix-pitfall-')
    for side in 'ab':
        os.makedirs(os.path.dirname(f'{scratch}/{side}/{FILE}'), exist_ok=True)
        shutil.copy(f'{root}/{FILE}', f'{scratch}/{side}/{FILE}')
    path = f'{scratch}/b/{FILE}'
    text = open(path).read()
    assert text.count(old) == 1, (name, old)
    open(path, 'w').write(text.replace(old, new))
    diff = subprocess.run(['diff', '-ru', 'a', 'b'], cwd=scratch, capture_output=True, text=True).stdout
    # No timestamps, so a regeneration changes only what changed.
    diff = re.sub(r'^((?:---|\+\+\+) \S+)\t.*$', r'\1', diff, flags=re.M)
    shutil.rmtree(scratch)
    open(f'{out}/{name}.patch', 'w').write(f'# {desc}\n' + diff)
    print(name)

#!/usr/bin/env python3
"""Checks durlog's durability promises from the system calls alone.

Reads an `strace -f -y -xx -s 65536` trace of one `durlog append DIR STREAM`
run and the versions that run printed, and verifies, knowing nothing of the
code (only FORMAT.md's record and batch layout):

  1. every acknowledgement (the write(2) of a version to stdout) comes after
     an fdatasync/fsync of the segment file its record was written to (by
     content: the record whose batch holds that stream and version), and
     that sync began after the record's write had returned;
  2. every segment file the run made (created, or renamed into place) is
     followed by an fsync of its directory before the acknowledgement of
     any record in it or in a later segment;
  3. every directory the run created is followed by an fsync of its parent
     before the first acknowledgement;
  4. every ftruncate of a segment (a cut tail) is followed by a sync of
     that file before the next acknowledgement;
  5. the writer's lock (flock of DIR/durlog.lock) is taken before the first
     write to a segment.

Usage: strace_check.py TRACE STDOUT CWD DIR STREAM [--expect-first N]
Prints what it checked as one line; exits 1 with one line per violation.
"""

import os
import re
import struct
import sys

SEGMENT_NAME = re.compile(rb"^[0-9]{20}\.log$")
DELETED = b" (deleted)"


def crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


CRC_TABLE = crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def unhex(text):
    """strace -xx prints every byte of a string as \\xHH."""
    return bytes.fromhex(text.replace("\\x", ""))


# One argument or return value: a string, a descriptor with its path, or
# anything else (numbers, flags, iovec arrays) kept as text.
FD_WITH_PATH = re.compile(r"^(-?\d+|AT_FDCWD)<((?:\\x[0-9a-f]{2})*)>$")
STRING = re.compile(r'^"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?$')


def split_args(text):
    """Splits at top-level commas (strings hold no commas under -xx)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "[{<(":
            depth += 1
        elif char in "]}>)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


class Call:
    """One system call: name, arguments, result, and where in the trace it
    started and ended (line numbers; a call another thread interrupted
    starts at its `<unfinished ...>` line and ends at its `resumed` line)."""

    def __init__(self, pid, name, args, result, start, end):
        self.pid, self.name, self.args, self.result = pid, name, args, result
        self.start, self.end = start, end

    def ok(self):
        return re.match(r"^-?\d+", self.result) and not self.result.startswith("-1")

    def ret(self):
        return int(re.match(r"^-?\d+", self.result).group(0))

    def fd_path(self, index=0):
        match = FD_WITH_PATH.match(self.args[index])
        if not match:
            return None
        path = unhex(match.group(2))
        if path.endswith(DELETED):
            path = path[: -len(DELETED)]
        return path

    def string(self, index):
        match = STRING.match(self.args[index])
        if not match:
            raise ValueError(f"argument {index} of {self.name} is not a string")
        if match.group(2):
            raise ValueError(f"line {self.start}: {self.name} buffer cut short; raise strace -s")
        return unhex(match.group(1))

    def result_path(self):
        match = re.match(r"^\d+<((?:\\x[0-9a-f]{2})*)>", self.result)
        return unhex(match.group(1)) if match else None


LINE = re.compile(r"^(\d+) +(.*)$")
COMPLETE = re.compile(r"^(\w+)\((.*)\) += (.*)$")
UNFINISHED = re.compile(r"^(\w+)\((.*) <unfinished \.\.\.>$")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)\) += (.*)$")


def parse_trace(path):
    calls, pending = [], {}
    with open(path, encoding="ascii", errors="replace") as trace:
        for number, line in enumerate(trace, 1):
            line = line.rstrip("\n")
            match = LINE.match(line)
            if not match:
                continue
            pid, rest = int(match.group(1)), match.group(2)
            if rest.startswith(("+++", "---")):
                continue
            if m := UNFINISHED.match(rest):
                pending[pid] = (m.group(1), m.group(2), number)
                continue
            if m := RESUMED.match(rest):
                name, head, start = pending.pop(pid, (m.group(1), "", number))
                text, result = head + m.group(2), m.group(3)
            elif m := COMPLETE.match(rest):
                name, text, result, start = m.group(1), m.group(2), m.group(3), number
            else:
                continue
            calls.append(Call(pid, name, split_args(text), result.strip(), start, number))
    return calls


def resolve(cwd, dir_path, path):
    """The absolute path of `path`, relative to `dir_path` (a dirfd's path,
    or None for the working directory)."""
    base = dir_path if dir_path is not None else cwd
    return os.path.normpath(os.path.join(base, path))


def records_in(data):
    """(seq, stream, first_version, count) of each valid record in `data`,
    from its start, stopping at the first bytes that are not one."""
    found, offset = [], 0
    while offset + 16 <= len(data):
        length, crc = struct.unpack_from("<II", data, offset)
        if length > len(data) - offset - 16 or length < 14:
            break
        body = data[offset + 8 : offset + 16 + length]
        if crc32c(body) != crc:
            break
        (seq,) = struct.unpack_from("<Q", data, offset + 8)
        payload = data[offset + 16 : offset + 16 + length]
        (stream_len,) = struct.unpack_from("<H", payload, 0)
        stream = payload[2 : 2 + stream_len]
        first, count = struct.unpack_from("<QI", payload, 2 + stream_len)
        found.append((seq, stream, first, count, offset))
        offset += 16 + length
    return found


class Checker:
    def __init__(self, calls, cwd, log_dir, stream):
        self.calls, self.cwd = calls, cwd.encode()
        self.log_dir = os.path.normpath(os.path.join(cwd, log_dir)).encode()
        self.stream = stream.encode()
        self.violations = []
        self.counts = dict.fromkeys(["acks", "segments", "dirs", "cuts", "syncs"], 0)
        # The sync calls that covered a check: of files, of directories.
        self.file_syncs, self.dir_syncs = set(), set()
        self.reported = set()

    def fail(self, message):
        self.violations.append(message)

    def is_segment(self, path):
        return os.path.dirname(path) == self.log_dir and SEGMENT_NAME.match(
            os.path.basename(path)
        )

    def collect(self):
        """Sorts the calls into what the checks need."""
        self.writes, self.syncs, self.segments, self.dirs, self.cuts = [], [], [], [], []
        self.locks, self.output = [], []
        for call in self.calls:
            name = call.name
            if name in ("openat", "open", "creat") and call.ok():
                flags = call.args[2] if name == "openat" else (call.args[1] if name == "open" else "O_CREAT")
                path = call.result_path()
                if "O_CREAT" in flags and path and self.is_segment(path):
                    self.segments.append((path, call))
            elif name in ("rename", "renameat", "renameat2") and call.ok():
                if name == "rename":
                    target = resolve(self.cwd, None, call.string(1))
                else:
                    target = resolve(self.cwd, call.fd_path(2), call.string(3))
                if self.is_segment(target):
                    self.segments.append((target, call))
            elif name in ("mkdir", "mkdirat") and call.ok():
                if name == "mkdir":
                    path = resolve(self.cwd, None, call.string(0))
                else:
                    path = resolve(self.cwd, call.fd_path(0), call.string(1))
                self.dirs.append((path, call))
            elif name in ("fsync", "fdatasync") and call.ok():
                self.syncs.append((call.fd_path(0), call))
            elif name == "ftruncate" and call.ok() and self.is_segment(call.fd_path(0) or b""):
                self.cuts.append((call.fd_path(0), call))
            elif name == "flock" and call.ok() and "LOCK_EX" in call.args[1]:
                self.locks.append((call.fd_path(0), call))
            elif name in ("write", "pwrite64", "writev", "pwritev", "pwritev2") and call.ok():
                self.collect_write(call)
        self.counts["syncs"] = len(self.syncs)

    def collect_write(self, call):
        path = call.fd_path(0)
        if call.name in ("writev", "pwritev", "pwritev2"):
            bases = re.findall(r'iov_base="((?:\\x[0-9a-f]{2})*)"', call.args[1])
            data = b"".join(unhex(base) for base in bases)
        else:
            data = call.string(1)
        data = data[: call.ret()]  # a short write wrote only a prefix
        if call.args[0].startswith("1<"):
            self.output.append((data, call))
        elif path and self.is_segment(path):
            self.writes.append((path, data, call))

    def synced(self, path, after, before, used):
        """Whether a successful sync of `path` started after line `after`
        and ended before line `before`; the first such is added to `used`."""
        for synced, call in self.syncs:
            if synced == path and call.start > after and call.end < before:
                used.add(call.start)
                return True
        return False

    def acknowledgements(self, printed):
        """(version, the write(2) that printed it) for each printed line."""
        written = b"".join(data for data, _ in self.output)
        if written != printed:
            self.fail(
                f"the trace's writes to stdout ({written[:80]!r}) differ from what the run printed ({printed[:80]!r})"
            )
            return []
        acks, offset = [], 0
        line_start = 0
        for data, call in self.output:
            for index, byte in enumerate(data):
                if byte == ord("\n"):
                    line = printed[line_start : offset + index]
                    acks.append((int(line), call))
                    line_start = offset + index + 1
            offset += len(data)
        return acks

    def record_of(self, version, ack):
        """The last write, before `ack`, of a record holding `version`."""
        found = None
        for path, data, call in self.writes:
            if call.end >= ack.start:
                break
            for seq, stream, first, count, offset in records_in(data):
                if stream == self.stream and first <= version < first + count:
                    found = (path, seq, call)
        return found

    def check(self, printed, expect_first):
        self.collect()
        acks = self.acknowledgements(printed)
        if expect_first is not None and [v for v, _ in acks] != list(
            range(expect_first, expect_first + len(acks))
        ):
            self.fail(f"printed versions {[v for v, _ in acks][:10]}... are not {expect_first}, {expect_first + 1}, ...")
        self.check_dirs(acks)
        for version, ack in acks:
            self.check_ack(version, ack)
        self.check_cuts(acks)
        self.check_lock()
        self.counts["acks"] = len(acks)

    def check_ack(self, version, ack):
        record = self.record_of(version, ack)
        if record is None:
            self.fail(
                f"version {version} printed (trace line {ack.start}) but no write of a record holding it to a segment of {self.log_dir.decode()} precedes it"
            )
            return
        path, seq, write = record
        name = os.path.basename(path).decode()
        if not self.synced(path, write.end, ack.start, self.file_syncs):
            self.fail(
                f"version {version} printed (trace line {ack.start}) without an fdatasync/fsync of {name}, which its record (seq {seq}) was written to at line {write.start}, in between"
            )
        # Every segment made by this run up to the record's own must have
        # its directory entry synced before this acknowledgement (each
        # segment reported once, at the first acknowledgement it fails).
        for segment, made in self.segments:
            if made.end < ack.start and os.path.basename(segment) <= os.path.basename(path):
                directory = os.path.dirname(segment)
                if segment in self.reported:
                    continue
                if not self.synced(directory, made.end, ack.start, self.dir_syncs):
                    self.reported.add(segment)
                    self.fail(
                        f"{os.path.basename(segment).decode()} made at trace line {made.start} ({made.name}), but its directory {directory.decode()} not fsynced before version {version} (in {name}) was printed at line {ack.start}"
                    )

    def check_dirs(self, acks):
        first_ack = acks[0][1].start if acks else float("inf")
        self.counts["segments"] = len(self.segments)
        self.counts["dirs"] = len(self.dirs)
        for directory, made in self.dirs:
            parent = os.path.dirname(directory)
            if not self.synced(parent, made.end, first_ack, self.dir_syncs):
                self.fail(
                    f"directory {directory.decode()} created at trace line {made.start} but its parent {parent.decode()} not fsynced before the first acknowledgement"
                )

    def check_cuts(self, acks):
        for path, cut in self.cuts:
            self.counts["cuts"] += 1
            later = [ack for _, ack in acks if ack.start > cut.end]
            if later and not self.synced(path, cut.end, later[0].start, self.file_syncs):
                self.fail(
                    f"{os.path.basename(path).decode()} cut (ftruncate) at trace line {cut.start} but not synced before the next acknowledgement (line {later[0].start})"
                )

    def check_lock(self):
        lock = os.path.join(self.log_dir, b"durlog.lock")
        held = [call.end for path, call in self.locks if path == lock]
        first_write = self.writes[0][2].start if self.writes else None
        if first_write is not None and not (held and held[0] < first_write):
            self.fail(f"a segment written (trace line {first_write}) before flock of {lock.decode()}")


def main(argv):
    if len(argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    trace, stdout, cwd, log_dir, stream = argv[1:6]
    expect_first = int(argv[7]) if len(argv) > 7 and argv[6] == "--expect-first" else None
    with open(stdout, "rb") as printed:
        printed = printed.read()
    checker = Checker(parse_trace(trace), os.path.realpath(cwd), log_dir, stream)
    checker.check(printed, expect_first)
    c = checker.counts
    print(
        f"{c['acks']} acknowledgements, {len(checker.file_syncs)} file syncs and "
        f"{len(checker.dir_syncs)} directory syncs that cover them ({c['syncs']} syncs in all); "
        f"{c['segments']} new segments, {c['dirs']} new directories, {c['cuts']} cuts"
    )
    for violation in checker.violations[:6]:
        print(f"VIOLATION: {violation}")
    if checker.violations:
        print(f"{len(checker.violations)} violations in all")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

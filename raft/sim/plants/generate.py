"""Regenerates the planted bugs of durlog-raft (and durlog-raft-sim's
harness) from the exact substitutions below: each plants one violation of
openraft's storage contract. Run from anywhere:
python3 raft/sim/plants/generate.py. When an `old` string no longer
exists, update it to the current code (the script says which)."""
import difflib, os, sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
out = os.path.join(root, "raft/sim/plants")
STORE = "raft/src/store.rs"
SHARED = "raft/src/shared.rs"
P = [
("01-flush-before-sync", "The flush callback called before the entries are written and synced (written at the next call instead)", [
 (STORE, "    disk_work: DiskWork,\n    /// See [`LogStore::with_leader_restore`].",
         "    disk_work: DiskWork,\n    deferred: Vec<C::Entry>,\n    /// See [`LogStore::with_leader_restore`]."),
 (STORE, "            disk_work: DiskWork::default(),\n", "            disk_work: DiskWork::default(),\n            deferred: Vec::new(),\n"),
 (STORE, "        let entries: Vec<C::Entry> = entries.into_iter().collect();\n        self.append_durably(entries)\n            .await\n            .map_err(|error| storage_error(error, StorageIOError::write_logs))?;\n        // Every entry is synced: only now may openraft count it as flushed.\n        callback.log_io_completed(Ok(()));",
         "        let entries: Vec<C::Entry> = entries.into_iter().collect();\n        callback.log_io_completed(Ok(()));\n        let earlier = std::mem::replace(&mut self.deferred, entries);\n        self.append_durably(earlier)\n            .await\n            .map_err(|error| storage_error(error, StorageIOError::write_logs))?;"),
 (STORE, "    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {\n",
         "    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {\n        let earlier = std::mem::take(&mut self.deferred);\n        self.append_durably(earlier)\n            .await\n            .map_err(|error| storage_error(error, StorageIOError::write_logs))?;\n"),
 (STORE, "    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {\n",
         "    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {\n        let earlier = std::mem::take(&mut self.deferred);\n        self.append_durably(earlier)\n            .await\n            .map_err(|error| storage_error(error, StorageIOError::write_logs))?;\n"),
]),
("02-vote-not-durable", "save_vote returns before the vote is durable (raft.meta neither synced nor its rename)", [
 ("raft/src/meta.rs", "        file.write_at(&bytes, 0)?;\n        file.sync_data()?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(META_FILE_NAME))?;\n        self.vfs.sync_dir(&self.dir)?;",
                      "        file.write_at(&bytes, 0)?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(META_FILE_NAME))?;"),
]),
("03-truncation-not-durable", "A truncation that returns before it is durable (its records removed at the next append)", [
 (SHARED, "use std::sync::{PoisonError, RwLock, RwLockReadGuard};", "use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard};"),
 (SHARED, "pub(crate) struct Shared<NID: openraft::NodeId> {\n    pub log: Log,\n    pub view: RwLock<View<NID>>,\n}",
         "pub(crate) struct Shared<NID: openraft::NodeId> {\n    pub log: Log,\n    pub view: RwLock<View<NID>>,\n    pub pending_truncate: Mutex<Option<u64>>,\n}"),
 (STORE, "            shared: Arc::new(Shared {\n                log,\n                view: RwLock::new(view),\n            }),",
         "            shared: Arc::new(Shared {\n                log,\n                view: RwLock::new(view),\n                pending_truncate: Mutex::new(None),\n            }),"),
 (STORE, "            shared.log.truncate_after(kept_seq)?;\n            view.last_log_id = last_entry::<C>(&shared.log, &view)?.or(view.last_purged.clone());",
         "            *lock(&shared.pending_truncate) = Some(kept_seq);\n            view.last_log_id = if index > view.first_index() {\n                read_entries::<C>(&shared.log, view.anchor, index - 1, 1)?\n                    .last()\n                    .map(|entry| entry.get_log_id().clone())\n            } else {\n                None\n            }\n            .or(view.last_purged.clone());"),
 (STORE, "        let after_purged = read(&self.shared.view).after_purged();\n        entries.retain",
         "        if let Some(kept_seq) = lock(&self.shared.pending_truncate).take() {\n            self.shared.log.truncate_after(kept_seq)?;\n        }\n        let after_purged = read(&self.shared.view).after_purged();\n        entries.retain"),
]),
("04-purge-past-snapshot", "A purge past what the snapshot covers (every entry up to the last one)", [
 (STORE, "            let mut meta = lock(&meta);\n            let purged_index",
         "            let log_id = read(&shared.view)\n                .last_log_id\n                .clone()\n                .filter(|last| last.index > log_id.index)\n                .unwrap_or(log_id);\n            let mut meta = lock(&meta);\n            let purged_index"),
]),
("05-read-beyond-last", "A reader that reads one index past the last log id", [
 ("raft/src/reader.rs", "        let end = end.min(view.end_index());", "        let end = end.min(view.end_index() + 1);"),
]),
("06-meta-believed-from-cache", "raft.meta believed as the page cache holds it, not made durable first (the bug the simulator found, reverted)", [
 ("raft/src/meta.rs", "                file.sync_data()?;\n                vfs.sync_dir(dir)?;\n                body", "                body"),
]),
("07-log-state-forgets-purge", "After a restart, a log emptied by a purge reports no last log id (openraft's contract: the last purged id)", [
 (STORE, "    view.last_log_id = last_entry::<C>(log, &view)?.or(view.last_purged.clone());\n    if !view.is_empty()",
         "    view.last_log_id = last_entry::<C>(log, &view)?;\n    if !view.is_empty()"),
]),
("08-truncate-and-rejoin", "The naive recovery 'truncate at the damage and rejoin': the damaged log cut at the damage, and the node votes at once (no reach kept, so no gate)", [
 ("raft/src/repair.rs", "    body.repair = body.repair.max(Some(reach));", "    body.repair = None;"),
]),
("09-delete-and-rejoin", "The naive recovery 'delete the damaged segments and rejoin': the damaged segment removed whole with every later one, and the node votes at once (no reach kept, so no gate)", [
 ("raft/src/repair.rs", "    body.repair = body.repair.max(Some(reach));", "    body.repair = None;"),
 ("raft/src/repair.rs", "        if *seq == damaged_seq && offset > 0 {", "        if *seq == damaged_seq && offset > u64::MAX - 1 {"),
]),
("10-reach-ignores-later-segments", "The repair's reach read from the damaged segment only, not the later ones", [
 ("raft/src/repair.rs", "    let reach = reach_of::<C>(meta.body(), &contents, offset);", "    let reach = reach_of::<C>(meta.body(), &contents[..1], offset);"),
]),
("11-meta-renamed-unsynced", "raft.meta renamed into place before its bytes are synced (the directory still synced): a power loss may leave the new name over lost pages", [
 ("raft/src/meta.rs", "        file.write_at(&bytes, 0)?;\n        file.sync_data()?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(META_FILE_NAME))?;",
                      "        file.write_at(&bytes, 0)?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(META_FILE_NAME))?;"),
]),
("12-snapshot-renamed-unsynced", "sm.snapshot renamed into place before its bytes are synced (the directory still synced)", [
 ("raft/src/snapshot_file.rs", "        file.write_at(&bytes, 0)?;\n        file.sync_data()?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(SNAPSHOT_FILE_NAME))?;",
                      "        file.write_at(&bytes, 0)?;\n        drop(file);\n        self.vfs.rename(&temp, &self.dir.join(SNAPSHOT_FILE_NAME))?;"),
]),
("13-purge-before-snapshot-durable", "A purge that does not wait for the state machine's snapshot it purges up to (openraft purges as soon as it hands a received snapshot to the state machine's task)", [
 (STORE, "        self.limit\n            .reached(log_id.index)\n            .await\n            .map_err(Error::SnapshotFailed)?;\n", ""),
]),
("14-replication-reads-past-purge", "Replication's read of a range whose start was purged returns the entries after the purge (the suffix) rather than none", [
 ("raft/src/reader.rs", "        if entries\n            .first()\n            .is_some_and(|entry| entry.get_log_id().index != start)\n        {\n            return Ok(Vec::new());\n        }\n        Ok(entries)",
                        "        Ok(entries)"),
]),
("15-replication-read-error-swallowed", "Replication's read that fails (EIO) returns no entries instead of the error: openraft takes it for a heartbeat, and the read error goes unseen", [
 ("raft/src/reader.rs", "        let entries = self.try_get_log_entries(start..end).await?;\n        // From `start` on",
                        "        let entries = self.try_get_log_entries(start..end).await.unwrap_or_default();\n        // From `start` on"),
]),
("16-reach-ignores-copies", "The repair's reach leaves valid copies of earlier records (a misdirected or stale write) uncounted, as if they were the log's own bytes", [
 ("raft/src/repair.rs", "                // write): it stands where later records may have been.\n                uncovered += record.len as u64;\n",
                        "                // write): it stands where later records may have been.\n"),
]),
("17-reach-rounded-down", "The repair's reach counts the bytes no valid record covers in whole smallest records, rounded down", [
 ("raft/src/repair.rs", "    let extra = uncovered.div_ceil(SMALLEST_RECORD_BYTES);", "    let extra = uncovered / SMALLEST_RECORD_BYTES;"),
]),
("18-reach-ignores-uncovered-bytes", "The repair's reach leaves bytes after the damage that no valid record covers uncounted (only valid records and the damaged record's seq count)", [
 ("raft/src/repair.rs", "                uncovered += u64::from(position > 0 || at as u64 >= offset);\n", ""),
]),
("19-reach-term-from-records", "The repair's reach takes its term from the records it found only, not the vote: with no valid record after the damage, term 0", [
 ("raft/src/repair.rs", "    let vote_term = body.vote.as_ref().map_or(0, |vote| vote.leader_id().term);\n", ""),
 ("raft/src/repair.rs", "            term: vote_term.max(found.map_or(0, |id| id.leader_id.term)),",
                        "            term: found.map_or(0, |id| id.leader_id.term),"),
]),
("20-reach-counts-bytes-as-entries", "The repair's reach counts each byte no valid record covers as an entry, not each smallest record: safe, but the node waits for far more entries than its log can have held", [
 ("raft/src/repair.rs", "    let extra = uncovered.div_ceil(SMALLEST_RECORD_BYTES);", "    let extra = uncovered;"),
]),
]

def main():
    status = 0
    for name, title, subs in P:
        originals, changed = {}, {}
        for path, old, new in subs:
            text = changed.get(path) or open(os.path.join(root, path)).read()
            originals.setdefault(path, text)
            if text.count(old) != 1:
                print(f"{name}: {path}: the old text is not there exactly once; update it", file=sys.stderr)
                status = 1
                break
            changed[path] = text.replace(old, new)
        else:
            lines = [f"{title}\n", "\n"]
            for path in sorted(changed):
                lines += difflib.unified_diff(originals[path].splitlines(True), changed[path].splitlines(True), "a/" + path, "b/" + path)
            with open(os.path.join(out, name + ".patch"), "w") as patch:
                patch.writelines(lines)
    sys.exit(status)

main()

//! What a power loss resolves, per the fault model in the `sim` module
//! doc: first every pending name of every directory with unsynced changes,
//! then every file with dirty pages or an unsynced size, each decision
//! drawn in a fixed order; then the disk is down, and every handle opened
//! before is dead, until `reboot`.

use std::path::Path;
use std::sync::Arc;

use super::Disk;
use super::dirs::Node;
use crate::sim::fault::FaultKind;
use crate::sim::fault_log::FaultEvent;
use crate::sim::trace::TraceKind;

impl Disk {
    /// Power is lost: resolves the page cache per the fault model, kills
    /// every handle, releases every lock, and leaves the disk down.
    pub(crate) fn power_loss(&mut self) {
        if self.halted {
            return;
        }
        self.halted = true;
        self.generation += 1;
        if let Some(scripted) = &mut self.script {
            scripted.begin_power_loss(self.op_count);
        }
        // The processes holding them died with the power, and the kernel
        // releases a dead process's flocks.
        self.locks.clear();
        self.fault_on_path(FaultEvent::touching(FaultKind::Crash, 0, 0), Path::new(""));
        let no_path = Arc::clone(&self.no_path);
        self.record(TraceKind::Crash, &no_path, 0, 0, 0, true);
        self.resolve_dirs();
        self.resolve_files();
    }

    fn resolve_dirs(&mut self) {
        let weight = self.weights[FaultKind::LostDirEntry.index()];
        for dir_path in std::mem::take(&mut self.dirty_dirs) {
            let mut dir = self
                .dirs
                .remove(dir_path.as_os_str())
                .expect("dirty dir exists");
            for name in std::mem::take(&mut dir.pending) {
                let current = dir.entries.get(&name).cloned();
                if Node::same(current.as_ref(), dir.durable.get(&name)) {
                    continue;
                }
                if self.crash_keeps(FaultKind::LostDirEntry, weight) {
                    let created = u64::from(current.is_some());
                    let entry = dir_path.join(&name);
                    let event = FaultEvent::touching(FaultKind::LostDirEntry, 0, created);
                    self.fault_on_path(event, &entry);
                    let kind = TraceKind::Fault(FaultKind::LostDirEntry);
                    self.record_path(kind, &entry, 0, created, true);
                    match current {
                        Some(node) => dir.durable.insert(name, node),
                        None => dir.durable.remove(&name),
                    };
                } else {
                    // The visible change is undone: the files involved
                    // learn which names they are visible under now.
                    let full: Arc<Path> = Arc::from(dir_path.join(&name));
                    if let Some(Node::File(node)) = &current {
                        node.unlink(&full);
                    }
                    match dir.durable.get(&name) {
                        Some(node) => {
                            if let Node::File(file) = node {
                                file.link(Arc::clone(&full), false);
                            }
                            dir.entries.insert(name, node.clone())
                        }
                        None => dir.entries.remove(&name),
                    };
                }
            }
            self.dirs.insert(dir_path.into_os_string(), dir);
        }
    }

    fn resolve_files(&mut self) {
        let page_weight = self.weights[FaultKind::LostUnsyncedPages.index()];
        let size_weight = self.weights[FaultKind::UnsyncedSizeChange.index()];
        let mut outcomes = Vec::new();
        for node in std::mem::take(&mut self.dirty_files).into_values() {
            // A script spends no decision on a file the crash left with no
            // name: no Open can ever read what it holds. (The RNG draws for
            // it all the same, so that seeds keep their outcomes.)
            let unreachable = self.script.is_some() && !node.is_visible();
            let mut data = node.lock();
            let mut keeps = |kind: FaultKind| {
                let weight = match kind {
                    FaultKind::UnsyncedSizeChange => size_weight,
                    _ => page_weight,
                };
                !unreachable && self.crash_keeps(kind, weight)
            };
            data.resolve_crash(&mut keeps, &mut outcomes);
            data.in_dirty_files = false;
            drop(data);
            for outcome in outcomes.drain(..) {
                // A size change is traced as its two sizes; the log gives
                // the bytes between them, which is what it decided.
                let (low, high) = if outcome.fault == FaultKind::UnsyncedSizeChange {
                    let (a, b) = (outcome.offset, outcome.len);
                    (a.min(b), a.max(b))
                } else {
                    (outcome.offset, outcome.offset + outcome.len)
                };
                let event = FaultEvent::touching(outcome.fault, low, high - low);
                self.fault_on_file_traced_as(event, &node, outcome.offset, outcome.len);
            }
        }
    }

    pub(crate) fn reboot(&mut self) {
        if self.halted {
            self.halted = false;
            let no_path = Arc::clone(&self.no_path);
            self.record(TraceKind::Reboot, &no_path, 0, 0, 0, true);
        }
    }
}

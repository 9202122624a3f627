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
use crate::sim::file::chance;
use crate::sim::trace::TraceKind;

impl Disk {
    /// Power is lost: resolves the page cache per the fault model, kills
    /// every handle, and leaves the disk down.
    pub(crate) fn power_loss(&mut self) {
        if self.halted {
            return;
        }
        self.halted = true;
        self.generation += 1;
        self.count_fault(FaultKind::Crash);
        let no_path = Arc::clone(&self.no_path);
        self.record(TraceKind::Crash, &no_path, 0, 0, 0, true);
        self.resolve_dirs();
        self.resolve_files();
    }

    fn resolve_dirs(&mut self) {
        let weight = self.weights[FaultKind::LostDirEntry.index()];
        for dir_path in std::mem::take(&mut self.dirty_dirs) {
            let mut dir = self.dirs.remove(&dir_path).expect("dirty dir exists");
            for name in std::mem::take(&mut dir.pending) {
                let current = dir.entries.get(&name).cloned();
                if Node::same(current.as_ref(), dir.durable.get(&name)) {
                    continue;
                }
                if weight > 0.0 && chance(&mut self.rng, weight) {
                    self.count_fault(FaultKind::LostDirEntry);
                    let created = u64::from(current.is_some());
                    self.record_path(
                        TraceKind::Fault(FaultKind::LostDirEntry),
                        &dir_path.join(&name),
                        0,
                        created,
                        true,
                    );
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
            self.dirs.insert(dir_path, dir);
        }
    }

    fn resolve_files(&mut self) {
        let page_weight = self.weights[FaultKind::LostUnsyncedPages.index()];
        let size_weight = self.weights[FaultKind::UnsyncedSizeChange.index()];
        let mut outcomes = Vec::new();
        for node in std::mem::take(&mut self.dirty_files).into_values() {
            let mut data = node.lock();
            data.resolve_crash(&mut self.rng, page_weight, size_weight, &mut outcomes);
            data.in_dirty_files = false;
            drop(data);
            for outcome in outcomes.drain(..) {
                self.fault_on_file(outcome.fault, &node, outcome.offset, outcome.len);
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

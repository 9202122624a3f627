//! Faults at rest, inspection (the damage list, the fault log) and setup:
//! what a simulator or a test calls besides the `Vfs` operations. None of
//! it is counted, so the armed crash never fires during it; of it only the
//! bit flips are traced.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::dirs::{Dir, Node, normalize, split};
use super::{Disk, error, not_found};
use crate::sim::fault::{Damage, FaultKind};
use crate::sim::fault_log::FaultEvent;
use crate::sim::file::{FileData, FileNode};
use crate::sim::trace::TraceEvent;

impl Disk {
    fn visible_file(&self, path: &Path) -> Option<&Arc<FileNode>> {
        match self.lookup(&normalize(path)) {
            Some(Node::File(node)) => Some(node),
            _ => None,
        }
    }

    pub(crate) fn flip_bit_at_rest(&mut self, path: &Path, bit: u64) -> io::Result<Damage> {
        let normal = normalize(path);
        let Some(node) = self.visible_file(&normal).cloned() else {
            return Err(not_found("flip bit in", &normal));
        };
        let mut data = node.lock();
        let durable_bits = data.durable_bytes().len() as u64 * 8;
        if bit >= durable_bits {
            return Err(error(
                io::ErrorKind::InvalidInput,
                "flip bit in",
                &normal,
                &format!("bit {bit} is beyond the {durable_bits} durable bits"),
            ));
        }
        data.flip_durable_bit(bit);
        drop(data);
        let event = FaultEvent {
            bit: Some((bit % 8) as u8),
            ..FaultEvent::touching(FaultKind::BitFlipAtRest, bit / 8, 1)
        };
        // Named as the file reports itself, which is `normal` unless the
        // file has two names (see `FileNode`): as `damage()` will say.
        let position = self.fault_on_file(event, &node);
        Ok(self.fault_log.event(position).damage())
    }

    pub(crate) fn flip_random_bit_at_rest(&mut self) -> Option<Damage> {
        let candidates: Vec<PathBuf> = self
            .files()
            .into_iter()
            .filter(|path| {
                self.visible_file(path)
                    .is_some_and(|node| !node.lock().durable_bytes().is_empty())
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let path = candidates[self.below(candidates.len() as u64) as usize].clone();
        let durable_bits = self.visible_file(&path)?.lock().durable_bytes().len() as u64 * 8;
        let bit = self.below(durable_bits);
        self.flip_bit_at_rest(&path, bit).ok()
    }

    pub(crate) fn damage(&self) -> Vec<Damage> {
        self.fault_log.damage()
    }

    pub(crate) fn duplicated_writes(&self) -> Vec<FaultEvent> {
        self.fault_log.copies()
    }

    pub(crate) fn fault_counts(&self) -> BTreeMap<FaultKind, u64> {
        self.fault_log.counts()
    }

    pub(crate) fn fault_log_len(&self) -> usize {
        self.fault_log.len()
    }

    pub(crate) fn fault_log_since(&self, mark: usize) -> Vec<FaultEvent> {
        self.fault_log.since(mark)
    }

    pub(crate) fn trace(&self) -> Vec<TraceEvent> {
        self.trace.events.clone()
    }

    pub(crate) fn clear_trace(&mut self) {
        self.trace.events.clear();
    }

    pub(crate) fn trace_digest(&self) -> u64 {
        self.trace.digest
    }

    pub(crate) fn set_trace_recording(&mut self, on: bool) {
        self.trace.recording = on;
    }

    pub(crate) fn with_file_contents<R>(
        &self,
        path: &Path,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        self.visible_file(path).map(|node| f(node.lock().cached()))
    }

    pub(crate) fn with_dir_contents<R>(
        &self,
        dir: &Path,
        f: impl FnOnce(&[(&str, Option<&[u8]>)]) -> R,
    ) -> Option<R> {
        let entries = &self.dirs.get(normalize(dir).as_os_str())?.entries;
        // Every file's lock held, then the names and bytes lent to `f`.
        let locked: Vec<_> = (entries.iter())
            .map(|(name, node)| {
                let data = match node {
                    Node::File(file) => Some(file.lock()),
                    Node::Dir => None,
                };
                (super::dirs::name_text(name), data)
            })
            .collect();
        let lent: Vec<(&str, Option<&[u8]>)> = (locked.iter())
            .map(|(name, data)| (name.as_ref(), data.as_ref().map(|data| data.cached())))
            .collect();
        Some(f(&lent))
    }

    pub(crate) fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let path = normalize(path);
        let (parent, name) = split(&path, "").ok()?;
        match self.dirs.get(parent.as_os_str())?.durable.get(name)? {
            Node::File(node) => Some(node.lock().durable_bytes().to_vec()),
            Node::Dir => None,
        }
    }

    pub(crate) fn put_durable_file(&mut self, path: &Path, bytes: &[u8]) {
        let path = normalize(path);
        let (parent, name) = split(&path, "put_durable_file").expect("a file path");
        self.create_dirs(parent)
            .unwrap_or_else(|error| panic!("put_durable_file: {error}"));
        let node = Arc::new(FileNode::new(
            self.next_file_id,
            Arc::from(path.as_ref()),
            FileData::durable(bytes),
        ));
        self.next_file_id += 1;
        let dir = (self.dirs.get_mut(parent.as_os_str())).expect("created above");
        assert!(
            !matches!(dir.entries.get(name), Some(Node::Dir)),
            "put_durable_file: {} is a directory",
            path.display()
        );
        let old = dir
            .entries
            .insert(name.to_owned(), Node::File(Arc::clone(&node)));
        dir.durable.insert(name.to_owned(), Node::File(node));
        dir.pending.remove(name);
        if let Some(Node::File(old)) = old {
            old.unlink(&path);
        }
    }

    pub(crate) fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .dirs
            .iter()
            .flat_map(|(dir_path, dir)| {
                let dir_path = Path::new(dir_path);
                dir.entries
                    .iter()
                    .filter_map(move |(name, node)| match node {
                        Node::File(_) => Some(dir_path.join(name)),
                        Node::Dir => None,
                    })
            })
            .collect();
        files.sort();
        files
    }

    /// A 128-bit hash of the durable state: every directory, its durable
    /// entries, and each file's durable bytes, with each file identified by
    /// the order it is first met in (so two names of one file differ from
    /// two files with the same bytes). After a power loss this is the whole
    /// disk as the next Open finds it.
    pub(crate) fn image_digest(&self) -> u128 {
        let mut hasher = ImageHasher::default();
        let mut files: BTreeMap<u64, u64> = BTreeMap::new();
        // In the order of paths (by component), as when they were keys.
        let mut dirs: Vec<(&Path, &Dir)> = (self.dirs.iter())
            .map(|(path, dir)| (Path::new(path), dir))
            .collect();
        dirs.sort_by_key(|(path, _)| *path);
        for (dir_path, dir) in dirs {
            hasher.bytes(dir_path.as_os_str().as_encoded_bytes());
            for (name, node) in &dir.durable {
                hasher.bytes(name.as_encoded_bytes());
                let Node::File(node) = node else {
                    hasher.word(u64::MAX);
                    continue;
                };
                let next = files.len() as u64;
                let index = *files.entry(node.id).or_insert(next);
                hasher.word(index);
                if index == next {
                    hasher.bytes(node.lock().durable_bytes());
                }
            }
        }
        hasher.finish()
    }

    pub(crate) fn dirty_page_count(&self) -> u64 {
        self.dirty_files
            .values()
            .map(|node| node.lock().dirty_page_count() as u64)
            .sum()
    }
}

/// Two independent 64-bit lanes of SplitMix64's finalizer over 8-byte
/// words: fixed keys, the same on every machine, and 128 bits so that a
/// million images collide with a chance of about 10^-27.
#[derive(Default)]
struct ImageHasher {
    low: u64,
    high: u64,
}

impl ImageHasher {
    fn word(&mut self, word: u64) {
        self.low = splitmix(self.low ^ word);
        self.high = splitmix(self.high.rotate_left(29) ^ word ^ 0x6a09_e667_f3bc_c908);
    }

    /// The length first, so that `bytes` calls cannot run into each other.
    /// Blocks of 32 bytes go through eight chains, two per word of the
    /// block (as `word` takes each word into two): the same two lanes of
    /// 64 bits for each word, but eight independent chains where `word`
    /// has two dependent ones, so the processor runs them side by side.
    /// Their ends are then taken in as words.
    fn bytes(&mut self, bytes: &[u8]) {
        self.word(bytes.len() as u64);
        let mut blocks = bytes.chunks_exact(32);
        if bytes.len() >= 32 {
            let mut lanes = [0u64; 8];
            for (index, lane) in lanes.iter_mut().enumerate() {
                let start = if index % 2 == 0 { self.low } else { self.high };
                *lane = splitmix(start ^ index as u64);
            }
            for block in &mut blocks {
                for (position, word) in block.chunks_exact(8).enumerate() {
                    let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                    let [low, high] = &mut lanes[2 * position..2 * position + 2] else {
                        unreachable!("two lanes a word")
                    };
                    *low = splitmix(*low ^ word);
                    *high = splitmix(high.rotate_left(29) ^ word ^ 0x6a09_e667_f3bc_c908);
                }
            }
            lanes.into_iter().for_each(|lane| self.word(lane));
        }
        for chunk in blocks.remainder().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(word));
        }
    }

    fn finish(&self) -> u128 {
        (u128::from(self.high) << 64) | u128::from(self.low)
    }
}

fn splitmix(word: u64) -> u64 {
    let mut z = word.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::{ImageHasher, splitmix};
    use std::collections::BTreeSet;

    /// SplitMix64's published first outputs from state 0 (Steele, Lea and
    /// Flood, 2014): each step adds the gamma, then finalizes.
    #[test]
    fn splitmix_is_splitmix64() {
        assert_eq!(splitmix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix(0x9e37_79b9_7f4a_7c15), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(splitmix(0x3c6e_f372_fe94_f82a), 0x06c4_5d18_8009_454f);
    }

    /// Exhaust checks each image once by its digest: byte strings that
    /// differ in one byte, in length, or in where they split into two
    /// `bytes` calls must not collide.
    #[test]
    fn near_images_have_distinct_digests() {
        let mut inputs = BTreeSet::new();
        for len in (0..=24).chain([31, 32, 33, 64, 70]) {
            for at in 0..=len {
                for value in [0u8, 1, 0x80, 0xff] {
                    let mut bytes = vec![0u8; len];
                    if at < len {
                        bytes[at] = value;
                    }
                    inputs.insert((bytes.clone(), None));
                    inputs.insert((bytes, Some(at)));
                }
            }
        }
        let digests: BTreeSet<u128> = inputs
            .iter()
            .map(|(bytes, split)| {
                let mut hasher = ImageHasher::default();
                match split {
                    None => hasher.bytes(bytes),
                    Some(at) => {
                        hasher.bytes(&bytes[..*at]);
                        hasher.bytes(&bytes[*at..]);
                    }
                }
                hasher.finish()
            })
            .collect();
        assert!(inputs.len() > 1_000, "{} inputs", inputs.len());
        assert_eq!(
            digests.len(),
            inputs.len(),
            "two distinct images share a digest"
        );
    }
}

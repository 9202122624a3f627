//! What a run did, as a digest of every event and, when asked, as lines.
//!
//! The digest is FNV-1a over each event's fields (not its text, which
//! would cost a `format!` per message), with the simulated time: two runs
//! with the same digest sent the same messages at the same instants, took
//! the same client outcomes and injected the same faults. Each node's disk
//! adds its own `SimVfs::trace_digest` (every disk operation) at the end.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem;
use std::sync::{Arc, Mutex};

use durlog_raft::events::NodeId;

use crate::exec;

/// One thing that happened, for the digest and the trace.
#[derive(Clone, Debug, Hash)]
pub enum Event {
    /// A request or response left on a link.
    Send {
        from: NodeId,
        to: NodeId,
        kind: &'static str,
    },
    /// A response arrived.
    Reply {
        from: NodeId,
        to: NodeId,
        kind: &'static str,
    },
    /// A message was lost when sent.
    Lost {
        from: NodeId,
        to: NodeId,
        kind: &'static str,
    },
    /// A message arrived on a cut link, or at a node that is down.
    Dropped {
        from: NodeId,
        to: NodeId,
        kind: &'static str,
    },
    /// A request was sent twice.
    Duplicate {
        from: NodeId,
        to: NodeId,
        kind: &'static str,
    },
    /// Something the harness did or saw (a fault, a client outcome, a
    /// leader): its own words.
    Note { node: NodeId, what: String },
}

/// FNV-1a, 64 bits: machine-independent and cheap.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Text written into a digest as the bytes of a `str`.
struct TextInto<'a>(&'a mut Fnv);

impl fmt::Write for TextInto<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.write(text.as_bytes());
        Ok(())
    }
}

#[derive(Default)]
struct State {
    digest: Fnv,
    events: u64,
    /// The lines, when the run traces.
    lines: Option<Vec<String>>,
}

/// The run's trace; clones share it.
#[derive(Clone, Default)]
pub struct Trace {
    state: Arc<Mutex<State>>,
}

impl Trace {
    /// A trace that keeps lines if `lines` (else only the digest).
    pub fn new(lines: bool) -> Trace {
        let trace = Trace::default();
        if lines {
            trace.state.lock().expect("trace").lines = Some(Vec::new());
        }
        trace
    }

    /// Records `event` at the current simulated time.
    pub fn record(&self, event: Event) {
        let now_ns = exec::try_with(|inner| inner.now_ns()).unwrap_or(0);
        let mut state = self.state.lock().expect("trace");
        now_ns.hash(&mut state.digest);
        event.hash(&mut state.digest);
        state.events += 1;
        if let Some(lines) = &mut state.lines {
            lines.push(format!(
                "{:>10.3} ms  {}",
                now_ns as f64 / 1e6,
                describe(&event)
            ));
        }
    }

    /// Records a note by the harness about `node` (0: the cluster).
    ///
    /// Without lines the text goes straight into the digest, hashed as
    /// `Event::Note`'s derived `Hash` would hash it (FNV-1a takes bytes in
    /// any pieces alike), so no `String` is built: a `format!` per client
    /// operation was 3% of a run.
    pub fn note(&self, node: NodeId, what: impl fmt::Display) {
        if self.keeps_lines() {
            self.record(Event::Note {
                node,
                what: what.to_string(),
            });
            return;
        }
        let now_ns = exec::try_with(|inner| inner.now_ns()).unwrap_or(0);
        let mut state = self.state.lock().expect("trace");
        let digest = &mut state.digest;
        now_ns.hash(digest);
        mem::discriminant(&Event::Note {
            node,
            what: String::new(),
        })
        .hash(digest);
        node.hash(digest);
        fmt::write(&mut TextInto(digest), format_args!("{what}")).expect("hashing text");
        // `str`'s `Hash` ends the text with 0xff.
        digest.write_u8(0xff);
        state.events += 1;
    }

    /// Adds a line to the trace only (not to the digest): what a node's
    /// disk did, which its own digest covers.
    pub fn line(&self, node: NodeId, what: impl std::fmt::Display) {
        self.plain_line(format!("n{node} disk: {what}"));
    }

    /// Adds `text` at the current time to the lines only (timers fired:
    /// the digest counts them at the end).
    pub fn plain_line(&self, text: String) {
        let now_ns = exec::try_with(|inner| inner.now_ns()).unwrap_or(0);
        let mut state = self.state.lock().expect("trace");
        if let Some(lines) = &mut state.lines {
            lines.push(format!("{:>10.3} ms  {text}", now_ns as f64 / 1e6));
        }
    }

    /// True if lines are kept: callers skip building notes' text otherwise.
    pub fn keeps_lines(&self) -> bool {
        self.state.lock().expect("trace").lines.is_some()
    }

    /// Folds `value` into the digest (a disk's digest, a final count).
    pub fn fold(&self, value: u64) {
        value.hash(&mut self.state.lock().expect("trace").digest);
    }

    /// The digest so far.
    pub fn digest(&self) -> u64 {
        self.state.lock().expect("trace").digest.finish()
    }

    /// How many events were recorded.
    pub fn events(&self) -> u64 {
        self.state.lock().expect("trace").events
    }

    /// The lines kept (empty unless the run traces).
    pub fn lines(&self) -> Vec<String> {
        self.state
            .lock()
            .expect("trace")
            .lines
            .clone()
            .unwrap_or_default()
    }
}

fn describe(event: &Event) -> String {
    match event {
        Event::Send { from, to, kind } => format!("n{from} -> n{to} {kind}"),
        Event::Reply { from, to, kind } => format!("n{from} -> n{to} {kind} reply"),
        Event::Lost { from, to, kind } => format!("n{from} -> n{to} {kind} LOST"),
        Event::Dropped { from, to, kind } => {
            format!("n{from} -> n{to} {kind} dropped (cut or down)")
        }
        Event::Duplicate { from, to, kind } => format!("n{from} -> n{to} {kind} duplicated"),
        Event::Note { node: 0, what } => format!("cluster: {what}"),
        Event::Note { node, what } => format!("n{node}: {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note hashed straight from its text must leave the digest the
    /// `Event` it stands for leaves: the runs' digests are kept across
    /// commits.
    #[test]
    fn a_note_hashes_as_its_event() {
        let texts = [
            "",
            "up",
            "op 17: write EventRequest { stream: \"s3\" }",
            "ü→ok",
        ];
        for node in [0, 1, 5] {
            for text in texts {
                let (direct, built) = (Trace::new(false), Trace::new(false));
                direct.note(node, format_args!("{text}"));
                built.record(Event::Note {
                    node,
                    what: text.to_owned(),
                });
                assert_eq!(direct.digest(), built.digest(), "node {node}, {text:?}");
                assert_eq!(direct.events(), built.events());
                // With lines kept, the same digest and the line.
                let lined = Trace::new(true);
                lined.note(node, text);
                assert_eq!(lined.digest(), built.digest(), "node {node}, {text:?}");
                assert_eq!(lined.lines().len(), 1);
            }
        }
    }
}

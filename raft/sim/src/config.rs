//! The type configuration of a simulated node: durlog-raft's events types
//! on the simulator's runtime, and where a node keeps its store (here, so
//! that `excuse.rs`, whose types `node.rs` uses, need not import
//! `node.rs` back).

use std::io::Cursor;

use durlog_raft::events::{EventRequest, EventResponse};
use openraft::{BasicNode, Entry};

use crate::runtime::SimRuntime;

/// Where each node keeps its store on its disk.
pub const STORE_DIR: &str = "/node";

openraft::declare_raft_types!(
    /// durlog-raft's events, on simulated time.
    pub SimConfig:
        D = EventRequest,
        R = EventResponse,
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<SimConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = SimRuntime,
);

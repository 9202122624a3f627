//! A simulated node: its disk (a `SimVfs` of its own), its process (an
//! openraft `Raft` whose tasks the executor owns as the node's), and the
//! ways a process ends: killed (the disk's cache survives, as the
//! operating system's page cache does) or powered off (the disk's crash
//! model decides what survives).

use std::path::Path;
use std::sync::Arc;

use durlog::vfs::{FaultConfig, SimVfs};
use durlog::{NextSegment, Options, Tuning};
use durlog_raft::events::{NodeId, StateMachine};
use durlog_raft::repair::{RepairGate, RepairReport};
use durlog_raft::{DiskWork, LogStore};
use openraft::{Config, Raft};

use crate::config::{STORE_DIR, SimConfig};
use crate::excuse::{Injected, Refusal};
use crate::exec::{self, Executor};
use crate::net::{Network, NetworkFactory};
use crate::probe::{EntryKey, Probe, ProbedMachine, ProbedStore};

/// The epoch durlog's event times count from (any fixed value: the
/// simulated clock adds to it, so a run's record bytes are its own).
const EPOCH_NS: i64 = 1_700_000_000_000_000_000;

/// Whether a node's process runs.
pub enum Status {
    /// Booting or running.
    Up(Raft<SimConfig>),
    /// Not running; a restart may bring it back.
    Down,
    /// Its log's Open refused: it stays down (counted, and named by any
    /// excuse).
    Refused(String),
}

/// Why a node did not start.
#[derive(Debug)]
pub enum StartError {
    /// An I/O error (an injected EIO, a power loss): a restart may succeed.
    Io(String),
    /// The store refused (damage): the node stays down.
    Refused(Refusal),
}

impl StartError {
    fn of(error: &durlog_raft::Error, what: &str) -> StartError {
        match error {
            durlog_raft::Error::Io(_) | durlog_raft::Error::Log(durlog::Error::Io(_)) => {
                StartError::Io(format!("{what}{error}"))
            }
            _ => StartError::Refused(Refusal::of(error, what)),
        }
    }
}

/// One node of a run.
pub struct Node {
    pub id: NodeId,
    pub vfs: SimVfs,
    /// The disk's faults while faults are on.
    pub faults: FaultConfig,
    pub status: Status,
    pub probe: Probe,
    pub machine: Option<StateMachine<SimConfig>>,
    pub boots: u64,
    /// durlog's segment size for this node's log.
    pub segment_bytes: u64,
    /// The running store's repair gate (closed while it repairs).
    pub gate: Option<Arc<RepairGate>>,
    /// What the last start's open repaired.
    pub repair: RepairReport,
    /// Damage the harness wrote to this disk itself (misdirected writes at
    /// rest), which the disk's own fault log does not hold.
    pub injected: Vec<Injected>,
    /// The disk's fault log length when this process's Open began: the
    /// faults since can explain its errors.
    pub started_mark: usize,
    /// The fault log length up to which every read error that fired is
    /// accounted for (it failed the call that drew it).
    pub accounted_mark: usize,
}

impl Node {
    pub fn new(id: NodeId, disk_seed: u64, faults: FaultConfig, segment_bytes: u64) -> Node {
        let vfs = SimVfs::with_faults(disk_seed, faults.clone());
        vfs.set_trace_recording(false);
        Node {
            id,
            vfs,
            faults,
            status: Status::Down,
            probe: Probe::default(),
            machine: None,
            boots: 0,
            segment_bytes,
            gate: None,
            repair: RepairReport::default(),
            injected: Vec::new(),
            started_mark: 0,
            accounted_mark: 0,
        }
    }

    pub fn raft(&self) -> Option<&Raft<SimConfig>> {
        match &self.status {
            Status::Up(raft) => Some(raft),
            _ => None,
        }
    }

    pub fn is_up(&self) -> bool {
        matches!(self.status, Status::Up(_))
    }

    /// True while the running store repairs (out of elections).
    pub fn is_repairing(&self) -> bool {
        self.is_up()
            && self
                .gate
                .as_ref()
                .is_some_and(|gate| !gate.allows_elections())
    }

    fn options(&self) -> (Options, Tuning) {
        let options = Options {
            segment_bytes: self.segment_bytes,
            now: Some(Arc::new(|| {
                EPOCH_NS + exec::try_with(|inner| inner.now_ns()).unwrap_or(0) as i64
            })),
            ..Options::default()
        };
        // No thread of durlog's own, and no yields: one thread runs
        // everything.
        let tuning = Tuning::default().with(|tuning| {
            tuning.next_segment = NextSegment::CreateAtRoll;
            tuning.gather_yields = 0;
        });
        (options, tuning)
    }

    /// Opens the store (recovery runs here) and boots the process; `Err`
    /// with why not: an I/O error may pass (a retry may succeed), a
    /// refusal (damage) keeps the node down.
    pub fn start(
        &mut self,
        exec: &Executor,
        network: &Network,
        config: &Arc<Config>,
    ) -> Result<(), StartError> {
        let (options, tuning) = self.options();
        let vfs: Arc<dyn durlog::vfs::Vfs> = Arc::new(self.vfs.clone());
        let store =
            LogStore::<SimConfig>::open_for_repair(vfs, Path::new(STORE_DIR), options, tuning)
                .map_err(|error| StartError::of(&error, ""))?
                .with_disk_work(DiskWork::Inline)
                .with_leader_restore(false);
        self.reset_probe(&store)
            .map_err(|text| StartError::Refused(Refusal::of_log(text)))?;
        self.repair = store.repair_report().clone();
        let gate = store.repair_gate();
        let vfs: Arc<dyn durlog::vfs::Vfs> = Arc::new(self.vfs.clone());
        let machine = StateMachine::<SimConfig>::durable(vfs, Path::new(STORE_DIR))
            .map_err(|error| StartError::of(&error, "the state machine's snapshot: "))?;
        machine.limit_purges(store.purge_limit());
        self.machine = Some(machine.clone());
        let store = ProbedStore {
            inner: store,
            probe: self.probe.clone(),
        };
        let machine = ProbedMachine {
            inner: machine,
            probe: self.probe.clone(),
        };
        let factory = NetworkFactory {
            network: network.clone(),
            from: self.id,
        };
        let id = self.id;
        let raft = boot(exec, id, config, factory, store, machine).map_err(StartError::Io)?;
        // A repairing node stands for no election (durlog_raft::repair).
        raft.runtime_config().elect(gate.allows_elections());
        network.attach(id, raft.clone(), Arc::clone(&gate));
        self.gate = Some(gate);
        self.status = Status::Up(raft);
        self.boots += 1;
        Ok(())
    }

    /// The probe's view of the store, from what its recovery shows (read
    /// with the disk's faults off: the checker's read must not draw them).
    fn reset_probe(&mut self, store: &LogStore<SimConfig>) -> Result<(), String> {
        self.vfs.set_faults(FaultConfig::none());
        let entries = store.entries();
        self.vfs.set_faults(self.faults.clone());
        let entries = entries.map_err(|error| format!("reading the recovered log: {error}"))?;
        let (vote, state) = store.state();
        let mut probe = self.probe.lock();
        probe.log = entries
            .iter()
            .map(|entry| (entry.log_id.index, EntryKey::of(entry)))
            .collect();
        probe.last_purged = state.last_purged_log_id;
        probe.vote = vote;
        Ok(())
    }

    /// Ends the process: every task of the node is dropped, and the store
    /// with them. The disk is left as it is (`power_off` for a crash).
    pub fn kill(&mut self, exec: &Executor, network: &Network) {
        network.detach(self.id);
        if matches!(self.status, Status::Up(_)) {
            self.status = Status::Down;
        }
        self.machine = None;
        exec.kill(self.id);
    }

    /// Power loss now (if the disk is not already down): the disk's crash
    /// model resolves its cache, and the process dies.
    pub fn power_off(&mut self, exec: &Executor, network: &Network) {
        if !self.vfs.is_halted() {
            self.vfs.halt();
        }
        self.kill(exec, network);
        self.vfs.reboot();
    }
}

/// Runs `Raft::new` as node `id` (so that every task it spawns is the
/// node's) to its end: it reads the store's state and spawns the core.
fn boot(
    exec: &Executor,
    id: NodeId,
    config: &Arc<Config>,
    factory: NetworkFactory,
    store: ProbedStore,
    machine: ProbedMachine,
) -> Result<Raft<SimConfig>, String> {
    let slot = Arc::new(std::sync::Mutex::new(None));
    let (config, result) = (Arc::clone(config), Arc::clone(&slot));
    exec.spawn_as(id, async move {
        let raft = Raft::new(id, config, factory, store, machine).await;
        *result.lock().expect("boot slot") = Some(raft.map_err(|error| error.to_string()));
    });
    // Raft::new awaits only the store and the state machine, which answer
    // at once: the boot task ends within this instant.
    while slot.lock().expect("boot slot").is_none() {
        if exec.poll_one().is_none() {
            return Err("Raft::new did not finish at once".to_owned());
        }
    }
    slot.lock().expect("boot slot").take().expect("filled")
}

//! The executor: one thread, simulated time, tasks polled in a fixed order.
//!
//! Every task belongs to an [`Owner`]: the harness (clients, the network's
//! wires) or one node. A task spawned from inside another inherits its
//! owner, so everything a node's `Raft` spawns (core, state-machine worker,
//! replication streams, vote requests) is that node's, and killing the
//! node's process drops exactly those tasks, at once, as a process death
//! would.
//!
//! Order is the only source of behaviour here, and it is fixed: woken
//! tasks run first in, first out; a task woken twice before it runs is
//! queued once; when nothing is ready the clock jumps to the earliest
//! timer, and timers due at the same instant fire in the order they were
//! set. Nothing reads the wall clock, no thread is started, and no tokio
//! runtime runs (openraft's tokio channels need none).
//!
//! The executor lives in a thread-local while a run uses it
//! ([`Executor::enter`]): openraft's `AsyncRuntime` is a set of static
//! functions (`spawn`, `sleep`, `now`), which find it there.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use durlog_testbed::SubSeeds;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Who a task belongs to: 0 is the harness, `n` is node `n`.
pub type Owner = u64;

/// The harness's owner id.
pub const HARNESS: Owner = 0;

/// The family of the owners' sub-seeds, indexed by owner.
const OWNER_SEED: &str = "owner";

/// The seed of `owner`'s generator, a sub-seed of the executor's: each
/// owner draws from its own, so that one node drawing more never shifts
/// what another draws.
pub(crate) fn owner_seed(rng_seed: u64, owner: Owner) -> u64 {
    SubSeeds::new(rng_seed).indexed(OWNER_SEED, owner)
}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Task {
    owner: Owner,
    future: BoxFuture,
    /// Made once, at the spawn: each poll lends it.
    waker: Waker,
    /// The waker's own state (whether the task is queued).
    wakes: Arc<TaskWaker>,
}

/// Tasks woken and not yet run, in wake order, by (slot, id). Behind a
/// mutex only because a `Waker` must be `Send + Sync`; one thread ever
/// touches it.
type ReadyQueue = Arc<Mutex<VecDeque<(usize, u64)>>>;

struct TaskWaker {
    slot: usize,
    id: u64,
    /// In the ready queue now: a task woken twice before it runs is
    /// queued once.
    queued: AtomicBool,
    ready: ReadyQueue,
}

impl TaskWaker {
    fn queue(&self) {
        if !self.queued.swap(true, Ordering::Relaxed) {
            self.ready
                .lock()
                .expect("ready queue")
                .push_back((self.slot, self.id));
        }
    }
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.queue();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.queue();
    }
}

/// The live tasks, in slots used again once free. A task's id counts up
/// from 1 and is never reused: it tells a task from the one its slot held
/// before, and it orders the tasks wherever many are dropped at once.
#[derive(Default)]
struct Tasks {
    /// (the id of the task last given the slot, the task while it lives;
    /// `None` too while it is polled).
    slots: Vec<(u64, Option<Task>)>,
    free: Vec<usize>,
}

impl Tasks {
    /// The slot the next task will take.
    fn next_slot(&self) -> usize {
        self.free.last().copied().unwrap_or(self.slots.len())
    }

    fn insert(&mut self, slot: usize, id: u64, task: Task) {
        debug_assert_eq!(slot, self.next_slot());
        match self.free.pop() {
            Some(_) => self.slots[slot] = (id, Some(task)),
            None => self.slots.push((id, Some(task))),
        }
    }

    /// Takes task `id` out of `slot` to poll it; `None` if it is gone.
    fn take(&mut self, slot: usize, id: u64) -> Option<Task> {
        match self.slots.get_mut(slot) {
            Some((held, task)) if *held == id => task.take(),
            _ => None,
        }
    }

    /// After a poll: `task` back in its slot, or the slot free.
    fn put_back(&mut self, slot: usize, task: Option<Task>) {
        let live = task.is_some();
        self.slots[slot].1 = task;
        if !live {
            self.free.push(slot);
        }
    }

    /// Takes out every task `keep` refuses, in the order they were spawned.
    fn remove_unless(&mut self, keep: impl Fn(&Task) -> bool) -> Vec<Task> {
        let mut removed: Vec<(u64, Task)> = Vec::new();
        for (slot, (id, task)) in self.slots.iter_mut().enumerate() {
            if task.as_ref().is_some_and(|task| !keep(task)) {
                removed.extend(task.take().map(|task| (*id, task)));
                self.free.push(slot);
            }
        }
        removed.sort_by_key(|&(id, _)| id);
        removed.into_iter().map(|(_, task)| task).collect()
    }

    fn live(&self) -> impl Iterator<Item = &Task> {
        self.slots.iter().filter_map(|(_, task)| task.as_ref())
    }
}

pub(crate) struct Inner {
    now_ns: Cell<u64>,
    next_task: Cell<u64>,
    tasks: RefCell<Tasks>,
    ready: ReadyQueue,
    /// (deadline, order set) -> the waker of the sleeping task, and its
    /// owner.
    timers: RefCell<BTreeMap<(u64, u64), (Waker, Owner)>>,
    /// The owners of the timers fired, when a trace asks for them.
    fired: RefCell<Option<Vec<Owner>>>,
    next_timer: Cell<u64>,
    current_owner: Cell<Owner>,
    /// Each owner's generator (election timeouts), from the run's seed.
    rngs: RefCell<BTreeMap<Owner, ChaCha8Rng>>,
    rng_seed: u64,
    polls: Cell<u64>,
    timers_fired: Cell<u64>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Inner>>> = const { RefCell::new(None) };
}

/// Runs `f` on the executor entered on this thread.
///
/// # Panics
/// Outside [`Executor::enter`]: openraft's runtime calls must come from a
/// simulated run.
pub(crate) fn with<T>(f: impl FnOnce(&Inner) -> T) -> T {
    CURRENT.with(|current| {
        let current = current.borrow();
        let inner = current
            .as_ref()
            .expect("no durlog-raft-sim executor entered on this thread");
        f(inner)
    })
}

/// Like [`with`], but `None` outside a run (for destructors, which may run
/// after the run ends).
pub(crate) fn try_with<T>(f: impl FnOnce(&Inner) -> T) -> Option<T> {
    CURRENT.with(|current| current.borrow().as_ref().map(|inner| f(inner)))
}

/// One simulated run's executor.
pub struct Executor {
    inner: Rc<Inner>,
}

/// Leaves the executor when dropped (see [`Executor::enter`]).
pub struct Entered {
    _private: (),
}

impl Drop for Entered {
    fn drop(&mut self) {
        let old = CURRENT.with(|current| current.borrow_mut().take());
        // Dropped outside the borrow: the tasks' destructors may look for
        // the executor, and find none.
        drop(old);
    }
}

impl Executor {
    /// An executor at time 0 whose owners' generators derive from
    /// `rng_seed`.
    pub fn new(rng_seed: u64) -> Executor {
        Executor {
            inner: Rc::new(Inner {
                now_ns: Cell::new(0),
                next_task: Cell::new(1),
                tasks: RefCell::default(),
                ready: Arc::default(),
                timers: RefCell::new(BTreeMap::new()),
                fired: RefCell::new(None),
                next_timer: Cell::new(0),
                current_owner: Cell::new(HARNESS),
                rngs: RefCell::new(BTreeMap::new()),
                rng_seed,
                polls: Cell::new(0),
                timers_fired: Cell::new(0),
            }),
        }
    }

    /// Makes this executor the thread's until the guard drops.
    ///
    /// # Panics
    /// If another is entered: one run per thread at a time.
    pub fn enter(&self) -> Entered {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            assert!(current.is_none(), "an executor is already entered");
            *current = Some(Rc::clone(&self.inner));
        });
        Entered { _private: () }
    }

    /// Simulated nanoseconds since the run began.
    pub fn now_ns(&self) -> u64 {
        self.inner.now_ns.get()
    }

    /// How many polls and timer firings so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.inner.polls.get(), self.inner.timers_fired.get())
    }

    /// Spawns a task for `owner` from outside any task.
    pub fn spawn_as<F>(&self, owner: Owner, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.spawn_boxed(owner, Box::pin(future));
    }

    /// Polls the next ready task; returns its owner, or `None` if no task
    /// is ready (the caller then checks, and moves the clock).
    pub fn poll_one(&self) -> Option<Owner> {
        let (slot, mut task) = loop {
            let (slot, id) = self.inner.ready.lock().expect("ready queue").pop_front()?;
            // A task killed (or finished) after it was woken is gone: the
            // next one runs.
            let task = self.inner.tasks.borrow_mut().take(slot, id);
            if let Some(task) = task {
                task.wakes.queued.store(false, Ordering::Relaxed);
                break (slot, task);
            }
        };
        let previous = self.inner.current_owner.replace(task.owner);
        self.inner.polls.set(self.inner.polls.get() + 1);
        let poll = task
            .future
            .as_mut()
            .poll(&mut Context::from_waker(&task.waker));
        self.inner.current_owner.set(previous);
        let owner = task.owner;
        // A finished task is dropped before the table is borrowed: its
        // destructor may wake or spawn.
        let task = poll.is_pending().then_some(task);
        self.inner.tasks.borrow_mut().put_back(slot, task);
        Some(owner)
    }

    /// Moves the clock to the earliest timer due at or before `limit_ns`
    /// and fires every timer due then; if none is due by `limit_ns`, moves
    /// the clock to `limit_ns` and returns false.
    pub fn advance(&self, limit_ns: u64) -> bool {
        let mut timers = self.inner.timers.borrow_mut();
        let Some((&(deadline, _), _)) = timers.first_key_value() else {
            self.inner.now_ns.set(limit_ns.max(self.inner.now_ns.get()));
            return false;
        };
        if deadline > limit_ns {
            self.inner.now_ns.set(limit_ns.max(self.inner.now_ns.get()));
            return false;
        }
        self.inner.now_ns.set(deadline.max(self.inner.now_ns.get()));
        let mut due = Vec::new();
        while let Some(entry) = timers.first_entry() {
            if entry.key().0 > deadline {
                break;
            }
            due.push(entry.remove());
        }
        drop(timers);
        self.inner
            .timers_fired
            .set(self.inner.timers_fired.get() + due.len() as u64);
        if let Some(fired) = self.inner.fired.borrow_mut().as_mut() {
            fired.extend(due.iter().map(|(_, owner)| *owner));
        }
        for (waker, _) in due {
            waker.wake();
        }
        true
    }

    /// From now on, remembers whose timers fire (for a trace).
    pub fn record_timers(&self) {
        *self.inner.fired.borrow_mut() = Some(Vec::new());
    }

    /// The owners whose timers fired since the last call (empty unless
    /// `record_timers`), in firing order.
    pub fn take_fired(&self) -> Vec<Owner> {
        self.inner
            .fired
            .borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// True if some task is ready to run now.
    pub fn has_ready(&self) -> bool {
        !self.inner.ready.lock().expect("ready queue").is_empty()
    }

    /// Drops every task of `owner` now (its process died). Their
    /// destructors run after the task table is released, so that they may
    /// wake or spawn.
    pub fn kill(&self, owner: Owner) -> usize {
        let killed = self
            .inner
            .tasks
            .borrow_mut()
            .remove_unless(|task| task.owner != owner);
        let count = killed.len();
        drop(killed);
        count
    }

    /// How many tasks `owner` has.
    pub fn task_count(&self, owner: Owner) -> usize {
        let tasks = self.inner.tasks.borrow();
        tasks.live().filter(|task| task.owner == owner).count()
    }

    /// Drops every task (the end of a run), destructors outside the table.
    pub fn clear(&self) {
        let all = self.inner.tasks.borrow_mut().remove_unless(|_| false);
        drop(all);
        self.inner.timers.borrow_mut().clear();
    }
}

impl Inner {
    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns.get()
    }

    pub(crate) fn current_owner(&self) -> Owner {
        self.current_owner.get()
    }

    pub(crate) fn spawn_boxed(&self, owner: Owner, future: BoxFuture) {
        let id = self.next_task.get();
        self.next_task.set(id + 1);
        let slot = self.tasks.borrow().next_slot();
        let wakes = Arc::new(TaskWaker {
            slot,
            id,
            queued: AtomicBool::new(false),
            ready: Arc::clone(&self.ready),
        });
        let waker = Waker::from(Arc::clone(&wakes));
        wakes.queue();
        self.tasks.borrow_mut().insert(
            slot,
            id,
            Task {
                owner,
                future,
                waker,
                wakes,
            },
        );
    }

    /// Registers (or re-registers) a timer; returns its key.
    pub(crate) fn set_timer(
        &self,
        key: Option<(u64, u64)>,
        deadline_ns: u64,
        waker: &Waker,
    ) -> (u64, u64) {
        let mut timers = self.timers.borrow_mut();
        if let Some(key) = key
            && let Some((existing, _)) = timers.get_mut(&key)
        {
            existing.clone_from(waker);
            return key;
        }
        let order = self.next_timer.get();
        self.next_timer.set(order + 1);
        let key = (deadline_ns, order);
        timers.insert(key, (waker.clone(), self.current_owner.get()));
        key
    }

    pub(crate) fn cancel_timer(&self, key: (u64, u64)) {
        self.timers.borrow_mut().remove(&key);
    }

    /// The next 64 random bits of the running task's owner.
    pub(crate) fn next_u64(&self) -> u64 {
        let owner = self.current_owner.get();
        let mut rngs = self.rngs.borrow_mut();
        let rng = rngs
            .entry(owner)
            .or_insert_with(|| ChaCha8Rng::seed_from_u64(owner_seed(self.rng_seed, owner)));
        rng.next_u64()
    }
}

/// Gives `Poll::Pending` once, after waking itself: lets other ready
/// tasks run first.
#[derive(Debug, Default)]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Shared<T> = Arc<Mutex<Vec<T>>>;

    /// A task that notes each poll, leaves its waker in `wakers`, and
    /// stays pending; when dropped it notes that too.
    struct Probe {
        name: u32,
        polls: Shared<u32>,
        wakers: Arc<Mutex<BTreeMap<u32, Waker>>>,
        drops: Shared<u32>,
    }

    impl Future for Probe {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.lock().unwrap().push(self.name);
            self.wakers
                .lock()
                .unwrap()
                .insert(self.name, cx.waker().clone());
            Poll::Pending
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.drops.lock().unwrap().push(self.name);
        }
    }

    #[derive(Default)]
    struct Probes {
        polls: Shared<u32>,
        wakers: Arc<Mutex<BTreeMap<u32, Waker>>>,
        drops: Shared<u32>,
    }

    impl Probes {
        fn spawn(&self, exec: &Executor, owner: Owner, name: u32) {
            let probe = Probe {
                name,
                polls: Arc::clone(&self.polls),
                wakers: Arc::clone(&self.wakers),
                drops: Arc::clone(&self.drops),
            };
            exec.spawn_as(owner, probe);
        }

        fn wake(&self, name: u32) {
            self.wakers.lock().unwrap()[&name].wake_by_ref();
        }

        fn taken(list: &Shared<u32>) -> Vec<u32> {
            std::mem::take(&mut *list.lock().unwrap())
        }
    }

    fn run_ready(exec: &Executor) {
        while exec.poll_one().is_some() {}
    }

    #[test]
    fn woken_tasks_run_in_wake_order_and_once() {
        let exec = Executor::new(0);
        let probes = Probes::default();
        for name in 1..=3 {
            probes.spawn(&exec, 1, name);
        }
        run_ready(&exec);
        assert_eq!(Probes::taken(&probes.polls), [1, 2, 3]);
        for name in [3, 1, 3, 2, 1] {
            probes.wake(name);
        }
        run_ready(&exec);
        assert_eq!(Probes::taken(&probes.polls), [3, 1, 2]);
        probes.wake(2);
        run_ready(&exec);
        assert_eq!(Probes::taken(&probes.polls), [2], "queued again once run");
    }

    #[test]
    fn a_slot_used_again_is_not_woken_by_the_task_before() {
        let exec = Executor::new(0);
        let probes = Probes::default();
        probes.spawn(&exec, 1, 1);
        run_ready(&exec);
        assert_eq!(exec.kill(1), 1);
        probes.spawn(&exec, 2, 2);
        run_ready(&exec);
        assert_eq!(Probes::taken(&probes.polls), [1, 2]);
        probes.wake(1);
        assert_eq!(exec.poll_one(), None, "the killed task's waker ran another");
        assert!(Probes::taken(&probes.polls).is_empty());
        probes.wake(2);
        assert_eq!(exec.poll_one(), Some(2));
    }

    #[test]
    fn a_kill_drops_the_owners_tasks_in_spawn_order() {
        let exec = Executor::new(0);
        let probes = Probes::default();
        exec.spawn_as(1, async {});
        probes.spawn(&exec, 1, 2);
        probes.spawn(&exec, 3, 3);
        run_ready(&exec);
        // The first task finished: the next takes its slot, before the others'.
        probes.spawn(&exec, 1, 4);
        probes.spawn(&exec, 1, 5);
        run_ready(&exec);
        assert_eq!(exec.task_count(1), 3);
        assert_eq!(exec.kill(1), 3);
        assert_eq!(Probes::taken(&probes.drops), [2, 4, 5]);
        assert_eq!(exec.task_count(3), 1);
        exec.clear();
        assert_eq!(Probes::taken(&probes.drops), [3]);
    }
}

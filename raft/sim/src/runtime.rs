//! [`SimRuntime`]: openraft's `AsyncRuntime` on the [`exec`](crate::exec)
//! executor. Spawned tasks inherit their owner, time is the executor's
//! simulated clock, and `thread_rng` (the election timeouts) is the running
//! owner's generator seeded from the run's seed.
//!
//! openraft 0.9 reaches tokio only through its sync types (channels,
//! mutexes, `watch`) and `tokio::select!`. Its core's `select!` is
//! `biased` (no randomness); the one unbiased `select!` on a node's path is
//! the replication stream's back-off after an `Unreachable` error, which the
//! simulated network never returns (it answers `Network` errors or lets
//! openraft's timeouts fire). `watch` spreads waiters over 8 `Notify`s by
//! tokio's thread RNG, which only orders two waiters of one channel; no two
//! tasks of a run wait on one `watch` (the harness reads metrics with
//! `borrow`). README.md has the evidence: the same seeds, in fresh
//! processes (fresh tokio RNG seeds), give the same digests.

use std::fmt;
use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend};

use crate::exec;

/// The simulated clock's instant: nanoseconds since the run began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimInstant(pub u64);

impl SimInstant {
    fn nanos(duration: Duration) -> u64 {
        u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Add<Duration> for SimInstant {
    type Output = SimInstant;
    fn add(self, rhs: Duration) -> SimInstant {
        SimInstant(self.0.saturating_add(SimInstant::nanos(rhs)))
    }
}

impl AddAssign<Duration> for SimInstant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for SimInstant {
    type Output = SimInstant;
    fn sub(self, rhs: Duration) -> SimInstant {
        SimInstant(self.0.saturating_sub(SimInstant::nanos(rhs)))
    }
}

impl SubAssign<Duration> for SimInstant {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl Sub<SimInstant> for SimInstant {
    type Output = Duration;
    fn sub(self, rhs: SimInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(rhs.0))
    }
}

impl openraft::Instant for SimInstant {
    fn now() -> SimInstant {
        SimInstant(exec::with(|inner| inner.now_ns()))
    }
}

/// A timer of the simulated clock.
#[derive(Debug)]
pub struct Sleep {
    deadline_ns: u64,
    key: Option<(u64, u64)>,
}

impl Sleep {
    /// A sleep until `deadline`.
    pub fn until(deadline: SimInstant) -> Sleep {
        Sleep {
            deadline_ns: deadline.0,
            key: None,
        }
    }

    /// A sleep of `duration` from now.
    pub fn new(duration: Duration) -> Sleep {
        Sleep::until(<SimInstant as openraft::Instant>::now() + duration)
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline_ns;
        let key = self.key;
        let (done, key) = exec::with(|inner| {
            if inner.now_ns() >= deadline {
                if let Some(key) = key {
                    inner.cancel_timer(key);
                }
                (true, None)
            } else {
                (false, Some(inner.set_timer(key, deadline, cx.waker())))
            }
        });
        self.key = key;
        if done { Poll::Ready(()) } else { Poll::Pending }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            exec::try_with(|inner| inner.cancel_timer(key));
        }
    }
}

/// `future`, or [`Elapsed`] once the deadline passes.
pub struct Timeout<F: Future> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A timeout's deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline elapsed (simulated clock)")
    }
}

impl std::error::Error for Elapsed {}

/// Why a task gave no output: its owner was killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task dropped: its node's process was killed")
    }
}

impl std::error::Error for Cancelled {}

struct JoinSlot<T> {
    output: Option<Result<T, Cancelled>>,
    waker: Option<Waker>,
}

/// Awaits a spawned task's output.
pub struct JoinHandle<T> {
    slot: Arc<Mutex<JoinSlot<T>>>,
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, Cancelled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.slot.lock().expect("join slot");
        match slot.output.take() {
            Some(output) => Poll::Ready(output),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Fills the slot with `Cancelled` if the task is dropped before it ends.
struct SlotGuard<T> {
    slot: Arc<Mutex<JoinSlot<T>>>,
    done: bool,
}

impl<T> SlotGuard<T> {
    fn finish(&mut self, output: Result<T, Cancelled>) {
        self.done = true;
        let waker = {
            let mut slot = self.slot.lock().expect("join slot");
            slot.output = Some(output);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for SlotGuard<T> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(Err(Cancelled));
        }
    }
}

/// Spawns `future` for the running task's owner; its handle gives its
/// output, or `Cancelled` if the owner is killed first.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn_on(exec::with(|inner| inner.current_owner()), future)
}

/// Spawns `future` for `owner` (a message delivered to a node runs as the
/// node's).
pub fn spawn_on<F>(owner: exec::Owner, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let slot = Arc::new(Mutex::new(JoinSlot {
        output: None,
        waker: None,
    }));
    let mut guard = SlotGuard {
        slot: Arc::clone(&slot),
        done: false,
    };
    let task = Box::pin(async move {
        let output = future.await;
        guard.finish(Ok(output));
    });
    exec::with(|inner| inner.spawn_boxed(owner, task));
    JoinHandle { slot }
}

/// `first`'s output if it completes before `second`, else `None`.
pub async fn race<A: Future, B: Future>(first: A, second: B) -> Option<A::Output> {
    let mut first = Box::pin(first);
    let mut second = Box::pin(second);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = first.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        match second.as_mut().poll(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// The running owner's random bits (rand 0.8's `Rng`, as openraft 0.9
/// asks).
#[derive(Debug)]
pub struct SimRng;

impl rand_core_06::RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        exec::with(|inner| inner.next_u64())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core_06::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// openraft's runtime in a simulated run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SimRuntime;

impl AsyncRuntime for SimRuntime {
    type JoinError = Cancelled;
    type JoinHandle<T: OptionalSend + 'static> = JoinHandle<T>;
    type Sleep = Sleep;
    type Instant = SimInstant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = Timeout<T>;
    type ThreadLocalRng = SimRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;

    fn spawn<T>(future: T) -> JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        spawn(future)
    }

    fn sleep(duration: Duration) -> Sleep {
        Sleep::new(duration)
    }

    fn sleep_until(deadline: SimInstant) -> Sleep {
        Sleep::until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Timeout<F> {
        Timeout {
            future: Box::pin(future),
            sleep: Sleep::new(duration),
        }
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: SimInstant,
        future: F,
    ) -> Timeout<F> {
        Timeout {
            future: Box::pin(future),
            sleep: Sleep::until(deadline),
        }
    }

    fn is_panic(_join_error: &Cancelled) -> bool {
        // A panic is not caught: it unwinds through the executor and fails
        // the run.
        false
    }

    fn thread_rng() -> SimRng {
        SimRng
    }

    fn oneshot<T: OptionalSend>() -> (TokioOneShotSender<T>, tokio::sync::oneshot::Receiver<T>) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(sender), receiver)
    }
}

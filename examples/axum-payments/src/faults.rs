//! Failure injection: make the next charge fail at a chosen step, as a crash or a lost connection
//! would, to show that the transaction leaves nothing half done; or hold the next payment at a
//! step, as a paused process would, to make its write late.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// A step of a charge, inside its transaction, or of a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The key is acquired; the account is not debited yet.
    BeforeCharge,
    /// The account is debited and the charge inserted; the key is not completed yet.
    AfterCharge,
    /// The key is completed; the transaction is not committed yet.
    BeforeCommit,
    /// A payment has arrived with its fencing token; nothing is read or written yet.
    BeforePayment,
}

/// Armed failures and holds, shared by the handlers. Each fires once.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<Armed>>);

#[derive(Debug, Default)]
struct Armed {
    failures: Vec<Step>,
    holds: Vec<(Step, Hold)>,
}

/// The handler's side of a hold: says it got there, then waits to be let go.
#[derive(Debug)]
struct Hold {
    reached: oneshot::Sender<()>,
    released: oneshot::Receiver<()>,
}

/// The test's side of a hold armed by [`Faults::hold_once_at`].
#[derive(Debug)]
pub struct Held {
    reached: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

impl Held {
    /// Waits until a request is held at the step.
    pub async fn reached(&mut self) {
        // An error means the handler was dropped: there is nothing left to wait for.
        let _ = (&mut self.reached).await;
    }

    /// Lets the held request go on (dropping the `Held` does too).
    pub fn release(self) {
        let _ = self.release.send(());
    }
}

impl Faults {
    /// Makes the next charge that reaches `step` fail there.
    pub fn fail_once_at(&self, step: Step) {
        self.armed().failures.push(step);
    }

    /// Makes the next request that reaches `step` wait there until the returned [`Held`] is
    /// released or dropped.
    pub fn hold_once_at(&self, step: Step) -> Held {
        let (reached, reached_rx) = oneshot::channel();
        let (release, released) = oneshot::channel();
        self.armed().holds.push((step, Hold { reached, released }));
        Held {
            reached: reached_rx,
            release,
        }
    }

    /// Fails with `step` if a failure is armed there, disarming it (the handler's `?` makes it
    /// an [`AppError::Injected`](crate::AppError::Injected)).
    pub(crate) fn check(&self, step: Step) -> Result<(), Step> {
        let mut armed = self.armed();
        match armed.failures.iter().position(|s| *s == step) {
            Some(at) => {
                armed.failures.remove(at);
                Err(step)
            }
            None => Ok(()),
        }
    }

    /// Waits at `step` if a hold is armed there, disarming it.
    pub(crate) async fn hold(&self, step: Step) {
        let hold = {
            let mut armed = self.armed();
            let at = armed.holds.iter().position(|(s, _)| *s == step);
            at.map(|at| armed.holds.remove(at).1)
        };
        if let Some(Hold { reached, released }) = hold {
            let _ = reached.send(());
            // Released, or the test's side dropped: go on either way.
            let _ = released.await;
        }
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

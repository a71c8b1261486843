//! Failure injection: make the next charge fail at a chosen step, as a crash or a lost connection
//! would, to show that the transaction leaves nothing half done.

use std::sync::{Arc, Mutex, PoisonError};

/// A step of a charge, inside its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The key is acquired; the account is not debited yet.
    BeforeCharge,
    /// The account is debited and the charge inserted; the key is not completed yet.
    AfterCharge,
    /// The key is completed; the transaction is not committed yet.
    BeforeCommit,
}

/// Armed failures, shared by the handlers. Each fires once.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<Vec<Step>>>);

impl Faults {
    /// Makes the next charge that reaches `step` fail there.
    pub fn fail_once_at(&self, step: Step) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(step);
    }

    /// Fails with `step` if a failure is armed there, disarming it (the handler's `?` makes it
    /// an [`AppError::Injected`](crate::AppError::Injected)).
    pub(crate) fn check(&self, step: Step) -> Result<(), Step> {
        let mut armed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match armed.iter().position(|s| *s == step) {
            Some(at) => {
                armed.remove(at);
                Err(step)
            }
            None => Ok(()),
        }
    }
}

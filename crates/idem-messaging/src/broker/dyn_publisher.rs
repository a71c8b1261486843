//! [`DynPublisher`] and [`BoxPublisher`]: a publisher chosen at run time (`idem relay --broker`).

use std::fmt;

use futures_util::future::BoxFuture;

use crate::{Confirmations, Envelope, Publisher};

/// The object-safe form of [`Publisher`], implemented for every publisher. Use [`BoxPublisher`]
/// rather than this trait directly.
pub trait DynPublisher: Send + Sync {
    /// [`Publisher::publish_batch`], boxed.
    fn publish_batch_boxed<'a>(&'a self, batch: &'a [Envelope]) -> BoxFuture<'a, Confirmations>;
}

impl<P: Publisher> DynPublisher for P {
    fn publish_batch_boxed<'a>(&'a self, batch: &'a [Envelope]) -> BoxFuture<'a, Confirmations> {
        Box::pin(self.publish_batch(batch))
    }
}

/// Any publisher, behind one type: what a relay uses when the broker is picked from a URL.
///
/// # Examples
///
/// ```
/// use idem_messaging::{BoxPublisher, Confirmations, Envelope, Publisher};
///
/// struct Nowhere;
///
/// impl Publisher for Nowhere {
///     async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
///         batch.iter().map(|_| Ok(())).collect()
///     }
/// }
///
/// let publisher = BoxPublisher::new(Nowhere);
/// # drop(publisher);
/// ```
pub struct BoxPublisher(Box<dyn DynPublisher>);

impl BoxPublisher {
    /// Boxes `publisher`.
    pub fn new(publisher: impl Publisher + 'static) -> Self {
        Self(Box::new(publisher))
    }
}

impl Publisher for BoxPublisher {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        self.0.publish_batch_boxed(batch).await
    }
}

impl fmt::Debug for BoxPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxPublisher").finish_non_exhaustive()
    }
}

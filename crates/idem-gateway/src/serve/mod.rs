//! [`Gateway`]: `idem serve`, startable in-process.
//!
//! The stack for each client request is: the request log line, errors turned into 502/504
//! problems, the idempotency layer, and the [`Proxy`](crate::proxy::Proxy). Keyed requests run in the layer's
//! engine: a client that disconnects does not cancel the forwarded call (the engine finishes it
//! in a task of its own), and its result is stored for the retry. [`serve`](crate::cli::serve)
//! is the whole `idem serve` command.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), idem_gateway::Error> {
//! use idem_gateway::{Config, Gateway};
//!
//! let mut config = Config::new("http://127.0.0.1:3000".parse()?);
//! config.listen = "127.0.0.1:0".parse().unwrap();
//! config.admin_listen = "127.0.0.1:0".parse().unwrap();
//! config.store = "memory://".parse()?;
//! let gateway = Gateway::bind(config).await?;
//! println!("proxying on {}, admin on {}", gateway.addr(), gateway.admin_addr());
//! gateway.run(idem_gateway::shutdown_signal()).await
//! # }
//! ```
//!
//! The parts: [`Gateway`] opens the store and binds the sockets, then runs the accept loop
//! (`accept`), the admin listener (`admin_server`) and the purge of expired records (`purge`)
//! until the shutdown signal (`signal`).

mod accept;
pub(crate) mod admin_server;
pub(crate) mod command;
pub mod config;
mod connections;
mod gateway;
pub mod logging;
mod metrics_recorder;
mod purge;
mod signal;

pub use self::{config::Config, gateway::Gateway, signal::shutdown_signal};

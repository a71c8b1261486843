//! `idem keys show|forget|purge`: an operator's view of the store, without a running gateway.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_gateway::{cli::KeysCommand, keys};
//!
//! let dir = tempfile::tempdir()?;
//! let store = format!("sqlite://{}", dir.path().join("idem.db").display());
//! let purge = idem_gateway::Cli::parse_from_env_and_file(["idem", "keys", "purge", "--store", &store])?;
//! let idem_gateway::cli::Command::Keys(command) = purge.command else { unreachable!() };
//! assert_eq!(keys::run(command).await?, "purged 0 expired records");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use idem_core::{Address, Scope, Store};

use crate::{
    Error, RecordView, StoreUrl,
    cli::{KeyArgs, KeysCommand},
    error::KeysError,
    forget::{Forgotten, forget},
    key_files,
};

/// How many expired records one store call removes.
const PURGE_BATCH: usize = 1000;

/// Runs a `keys` subcommand and returns what to print.
pub async fn run(command: KeysCommand) -> Result<String, Error> {
    match command {
        KeysCommand::Show(args) => {
            let (store, address) = open(&args).await?;
            let record = store
                .get(&address)
                .await?
                .ok_or_else(|| not_found(&address))?;
            let view = RecordView::new(&address, &record);
            Ok(serde_json::to_string_pretty(&view).expect("a record view serializes"))
        }
        KeysCommand::Forget(args) => {
            let (store, address) = open(&args.key).await?;
            match forget(&store, &address, args.force).await? {
                Forgotten::Removed => {}
                Forgotten::NotFound => return Err(not_found(&address)),
                Forgotten::Processing => {
                    return Err(KeysError::KeyProcessing {
                        key_digest: address.key.digest(),
                        scope: address.scope.to_string(),
                    }
                    .into());
                }
            }
            Ok(format!(
                "forgot key {} in scope {}",
                address.key.digest(),
                address.scope
            ))
        }
        KeysCommand::Purge(args) => {
            let store = args.store.open().await?;
            let mut purged = 0;
            loop {
                let n = store.purge_expired(PURGE_BATCH).await?;
                purged += n;
                if n < PURGE_BATCH {
                    break;
                }
            }
            Ok(match args.store {
                StoreUrl::Redis(_) => format!(
                    "purged {purged} expired records (Redis removes expired records by itself)"
                ),
                _ => format!("purged {purged} expired records"),
            })
        }
    }
}

async fn open(args: &KeyArgs) -> Result<(idem_core::DynStore, Address), Error> {
    let ring = args
        .encryption_key_file
        .as_deref()
        .map(key_files::key_ring)
        .transpose()?;
    let store = key_files::sealed(args.store.store.open().await?, ring.as_ref());
    let address = Address::new(args.scope.unwrap_or(Scope::ANONYMOUS), args.key.clone());
    Ok((store, address))
}

fn not_found(address: &Address) -> Error {
    KeysError::KeyNotFound {
        key_digest: address.key.digest(),
        scope: address.scope.to_string(),
    }
    .into()
}

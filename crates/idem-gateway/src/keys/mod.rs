//! `idem keys list|show|forget|purge`: an operator's view of the store, without a running
//! gateway.
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

use std::{
    fmt::Write as _,
    time::{Duration, SystemTime},
};

use idem_core::{Address, ListPage, ListQuery, Listed, RecordState, Scope, Store, Timestamp};

use crate::{
    Error, HumanDuration, StoreUrl,
    admin::{Forgotten, KeyList, ListedView, RecordView, forget},
    cli::{KeyArgs, KeysCommand, ListArgs},
    error::KeysError,
    store::{AtRest, KeyedDigests, Sealing, key_files},
};

/// How many expired records one store call removes.
const PURGE_BATCH: usize = 1000;

/// Runs a `keys` subcommand and returns what to print.
pub async fn run(command: KeysCommand) -> Result<String, Error> {
    match command {
        KeysCommand::List(args) => {
            let store = args.store.store.open().await?;
            let page = store.list(&list_query(&args)).await?;
            Ok(if args.json {
                serde_json::to_string_pretty(&KeyList::new(&page)).expect("a key list serializes")
            } else {
                table(&page, Timestamp::from_system_time(SystemTime::now()))
            })
        }
        KeysCommand::Show(args) => {
            let (store, address) = open(&args).await?;
            let record = store
                .get(&address)
                .await?
                .ok_or_else(|| not_found(&address))?;
            let stream = crate::admin::stream_of(&store, &address, &record).await;
            let view = RecordView::new(&address, &record).with_stream(stream);
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

fn list_query(args: &ListArgs) -> ListQuery {
    let mut query = ListQuery::new(usize::from(args.limit));
    query.state = args.state;
    query.older_than = args.older_than.map(|age| age.0);
    query.scope = args.scope;
    query.cursor = args.cursor;
    query
}

/// The width of the digests in the table: enough to tell records apart; `--json` prints them
/// whole.
const SHORT_HEX: usize = 16;

/// A page as a table, one record per line, ages counted to `now`; then the next page's cursor.
fn table(page: &ListPage, now: Timestamp) -> String {
    let mut out = format!(
        "{:<10}  {:>6}  {:<24}  {:>8}  {:<6}  {:<w$}  {:<w$}\n",
        "STATE",
        "TOKEN",
        "CREATED",
        "AGE",
        "STATUS",
        "SCOPE",
        "KEY SHA-256",
        w = SHORT_HEX
    );
    for listed in &page.records {
        let _ = writeln!(out, "{}", row(listed, now));
    }
    match page.next {
        Some(cursor) => {
            let _ = write!(
                out,
                "{} records; the next page: --cursor {cursor}",
                page.records.len()
            );
        }
        None => {
            let _ = write!(out, "{} records; the last page", page.records.len());
        }
    }
    out
}

fn row(listed: &Listed, now: Timestamp) -> String {
    let view = ListedView::new(listed);
    let record = &listed.record;
    let age = HumanDuration(std::time::Duration::from_secs(
        now.saturating_since(record.created_at).as_secs(),
    ));
    let status = match (&record.state, view.fields.status) {
        (RecordState::Processing { .. }, _) => "-".to_owned(),
        (RecordState::Completed { .. }, Some(status)) => status.to_string(),
        (RecordState::Completed { .. }, None) => "sealed".to_owned(),
    };
    format!(
        "{:<10}  {:>6}  {:<24}  {:>8}  {:<6}  {}  {}",
        view.fields.state,
        view.fields.token,
        view.fields.created_at,
        age.to_string(),
        status,
        &view.scope[..SHORT_HEX],
        &view.key_sha256[..SHORT_HEX],
    )
}

async fn open(args: &KeyArgs) -> Result<(idem_core::DynStore, Address), Error> {
    let sealing = args
        .encryption_key_file
        .as_deref()
        .map(key_files::key_ring)
        .transpose()?
        // An operator's view replays nothing: a record in clear is shown as it is.
        .map(|ring| Sealing {
            ring,
            accept_plaintext: true,
        });
    let digests = args
        .digest_key_file
        .as_deref()
        .map(key_files::digest_key)
        .transpose()?
        // Records stored before the key was turned on are found for as long as they live.
        .map(|key| KeyedDigests {
            key,
            changeover: Duration::MAX,
        });
    let store = args
        .store
        .store
        .open_at_rest(&AtRest { sealing, digests })
        .await?;
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

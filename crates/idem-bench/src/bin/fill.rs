//! Fills a store with completed records through the store's own API, as the gateway would have
//! written them for the load harness's requests, many at a time: the stored-keys curve needs
//! millions of keys, which would take hours through the gateway on SQLite or PostgreSQL.
//!
//! `idem-bench-fill --store sqlite:///tmp/idem.db --keys 1000000 --from 0 --ttl 1s`
//!
//! Each key `fill-N` (N from `--from`) is acquired and completed with the upstream's response
//! (`201`, its headers and its 99-byte JSON body) and the fingerprint of the harness's request,
//! so that the records are the size and shape of the gateway's. SQLite is opened with
//! `synchronous=NORMAL`: what is filled need not survive a power loss, and the records are the
//! same. Progress goes to stderr every two seconds.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures_util::{StreamExt as _, TryStreamExt as _};
use idem_core::{
    Acquisition, Address, DynStore, Fingerprint, FingerprintMode, Outcome, Store as _, StoreError,
    StoredResponse, Terms,
};
use idem_gateway::{HumanDuration, StoreUrl};
use idem_sqlite::Synchronous;

/// The request bench/wrk/payment.lua sends, fingerprinted as the gateway does (JSON mode).
const REQUEST_BODY: &[u8] = br#"{"amount":1000,"currency":"eur","source":"tok_visa"}"#;
/// The body idem-bench-upstream answers with.
const RESPONSE_BODY: &[u8] = br#"{"id":"ch_3PqR8s2eZvKYlo2C0","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}"#;

/// Fill a store with completed records.
#[derive(Debug, Parser)]
struct Args {
    /// The store, as `idem serve --store` takes it.
    #[arg(long, value_name = "URL")]
    store: StoreUrl,
    /// How many records to write.
    #[arg(long, value_name = "N")]
    keys: u64,
    /// The number of the first key (`fill-N`), so that fills add up without colliding.
    #[arg(long, value_name = "N", default_value_t = 0)]
    from: u64,
    /// How long each record is replayed (a short one fills expired records to purge).
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    ttl: HumanDuration,
    /// How many records are written at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    concurrency: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(fill(args))
}

async fn fill(args: Args) -> anyhow::Result<()> {
    let url = match args.store {
        StoreUrl::Sqlite(options) => StoreUrl::Sqlite(options.synchronous(Synchronous::Normal)),
        other => other,
    };
    let store = url.open().await.context("opening the store")?;
    let fingerprint = Fingerprint::builder(FingerprintMode::Json)
        .method("POST")
        .path("/")
        .query(None)
        .body(Some("application/json"), REQUEST_BODY);
    let outcome = Outcome::from(
        StoredResponse::new(201)
            .header("content-type", "application/json")
            .header("content-length", RESPONSE_BODY.len().to_string())
            .header("date", "Tue, 01 Dec 2026 00:00:00 GMT")
            .body(RESPONSE_BODY),
    );
    let terms = Terms {
        lease: Duration::from_secs(30),
        ttl: args.ttl.0,
    };
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = tokio::spawn(report_progress(Arc::clone(&done), args.keys, started));
    let filled = futures_util::stream::iter(args.from..args.from + args.keys)
        .map(|n| {
            let (store, done) = (&store, &done);
            let (fingerprint, outcome) = (&fingerprint, &outcome);
            async move {
                put(store, n, fingerprint, outcome, terms).await?;
                done.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .try_collect::<()>()
        .await;
    progress.abort();
    filled?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "filled {} keys in {seconds:.1} s ({:.0} keys/s)",
        args.keys,
        args.keys as f64 / seconds
    );
    Ok(())
}

/// How often a store call that failed as unavailable is tried again, and how long apart.
const ATTEMPTS: u32 = 20;
const BACKOFF: Duration = Duration::from_millis(50);

/// Acquires and completes `fill-N`.
async fn put(
    store: &DynStore,
    n: u64,
    fingerprint: &Fingerprint,
    outcome: &Outcome,
    terms: Terms,
) -> anyhow::Result<()> {
    let key = format!("fill-{n:010}").parse().context("a fill key")?;
    let address = Address::anonymous(key);
    let acquired = retried(|| store.acquire(&address, fingerprint, terms)).await?;
    let lease = match acquired {
        Acquisition::Acquired(lease) => lease,
        other => bail!("fill-{n:010} was already there ({other:?}): fill from another --from"),
    };
    retried(|| store.complete(&address, lease.token, outcome, terms.ttl)).await?;
    Ok(())
}

/// `call`, tried again while the store answers that it is unavailable (SQLite's "database is
/// locked" when a write waited longer than its busy timeout), up to [`ATTEMPTS`] times. Both
/// calls are safe to repeat: an acquire that failed wrote nothing, and a completion with the
/// same token completes the same record.
async fn retried<T, F>(mut call: impl FnMut() -> F) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(StoreError::Unavailable(error)) if attempt < ATTEMPTS => {
                eprintln!("  store unavailable ({error}), trying again");
                tokio::time::sleep(BACKOFF * attempt).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

async fn report_progress(done: Arc<AtomicU64>, total: u64, started: Instant) {
    let mut ticks = tokio::time::interval(Duration::from_secs(2));
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let done = done.load(Ordering::Relaxed);
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "  filled {done} of {total} keys ({:.0}%, {:.0} keys/s)",
            done as f64 * 100.0 / total.max(1) as f64,
            done as f64 / seconds
        );
    }
}

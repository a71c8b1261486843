//! The scenario every broker goes through, the relay processes, the consumer's handler, and the
//! final checks.

#![allow(unreachable_pub)] // shared with the broker modules of this test only

use std::{
    collections::HashMap,
    future::Future,
    io::Write,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use idem_messaging::{
    ConsumerName, Error, Handled, Inbox, Incoming, MessageId, Outbox, OutboxMessage,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::Notify,
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

use crate::{
    journal::Journal,
    ledger::{FaultDb, Table},
};

/// Messages per run: `IDEM_FAULT_MESSAGES`, 2,000 by default (the CI form).
pub fn message_count() -> usize {
    std::env::var("IDEM_FAULT_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000)
}

/// Ordering keys: every message has one, and the relays keep per-key order.
const KEYS: usize = 100;
/// Producers, each owning the keys equal to its number modulo their count.
const PRODUCERS: usize = 4;
/// Messages per business transaction; every tenth transaction rolls back.
const PER_TRANSACTION: usize = 50;
/// The relays' lease: how soon the claims of a relay that hangs go to the others (a killed relay's
/// go at once, with its connections).
const LEASE: Duration = Duration::from_secs(2);

/// A broker the scenario can run on.
pub trait FaultBroker {
    /// For the table.
    const NAME: &'static str;
    /// The URL the relay processes publish to.
    fn relay_url(&self) -> String;
    /// The outbox messages' destination.
    fn destination(&self) -> String;
    /// What [`restart`](Self::restart) does, as the table says it.
    const RESTART: &'static str = "broker restarts";
    /// How many messages the producers may commit ahead of the consumer, for a server that
    /// slows down with its backlog (unbounded by default).
    const MAX_AHEAD: usize = usize::MAX;
    /// Environment variables for the relay processes besides the broker URL (credentials).
    fn relay_env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Stops the broker and starts it again, with its data; or, where the broker cannot keep
    /// its data across a restart, takes it away for a while.
    fn restart(&mut self) -> impl Future<Output = ()>;
    /// Consumes the destination until `consumer.stop`, reconnecting whenever it must, handing
    /// every message to [`Consumer::handle`].
    fn spawn_consumer<D: FaultDb>(&self, consumer: Consumer<D>) -> JoinHandle<()>;
}

/// What the consumer side counts.
#[derive(Default)]
pub struct Tally {
    processed: AtomicUsize,
    skipped: AtomicUsize,
    crashes: AtomicUsize,
}

/// The ledger consumer: its handler books one ledger row per message, in the inbox transaction.
pub struct Consumer<D: FaultDb> {
    schema: Arc<D>,
    inbox: Inbox<D::DB>,
    name: ConsumerName,
    tally: Arc<Tally>,
    crash_at: usize,
    journal: Journal,
    pub stop: CancellationToken,
}

/// What the consumer loop does after a message.
#[must_use]
pub enum Next {
    /// Take the next message.
    Continue,
    /// Drop the connection and start again: the consumer crashed after a commit, before the
    /// ack, or could not settle a message.
    Reconnect,
}

impl<D: FaultDb> Clone for Consumer<D> {
    fn clone(&self) -> Self {
        Self {
            schema: Arc::clone(&self.schema),
            inbox: self.inbox.clone(),
            name: self.name.clone(),
            tally: Arc::clone(&self.tally),
            crash_at: self.crash_at,
            journal: self.journal.clone(),
            stop: self.stop.clone(),
        }
    }
}

impl<D: FaultDb> Consumer<D> {
    /// Records what went wrong on the consumer's side (a lost connection, a failed receive), for
    /// the journal a failed run prints.
    pub fn note(&self, line: impl Into<String>) {
        self.journal.write("consumer", line);
    }

    /// Notes a failure to reach the broker, then waits a moment before the consumer tries again.
    pub async fn retry_after(&self, failure: impl Into<String>) {
        self.note(failure);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// Handles one message. Once `crash_at` messages are processed, the next first delivery is
    /// committed and then abandoned without an ack, as by a consumer that died at that instant.
    pub async fn handle<M: Incoming>(&self, message: M) -> Next {
        if self.tally.processed.load(Ordering::SeqCst) >= self.crash_at
            && self.tally.crashes.load(Ordering::SeqCst) == 0
        {
            let id: MessageId = message.message_id().unwrap().parse().unwrap();
            let entry = std::str::from_utf8(message.payload()).unwrap().to_owned();
            let handled = self
                .inbox
                .handle(self.schema.pool(), &self.name, &id, |tx| {
                    Box::pin(async {
                        self.schema
                            .insert(&mut **tx, Table::Ledger, id.as_str(), &entry)
                            .await;
                        Ok::<_, Error>(())
                    })
                })
                .await
                .unwrap();
            return match handled {
                Handled::Processed(()) => {
                    self.tally.processed.fetch_add(1, Ordering::SeqCst);
                    self.tally.crashes.fetch_add(1, Ordering::SeqCst);
                    self.note(format!(
                        "crashes on purpose after committing {id}, before its ack"
                    ));
                    drop(message); // never acknowledged
                    Next::Reconnect
                }
                Handled::Duplicate => {
                    self.tally.skipped.fetch_add(1, Ordering::SeqCst);
                    match message.ack().await {
                        Ok(()) => Next::Continue,
                        Err(error) => {
                            self.note(format!("cannot acknowledge a duplicate: {error}"));
                            Next::Reconnect
                        }
                    }
                }
            };
        }
        let outcome = self
            .inbox
            .consume(self.schema.pool(), &self.name, message, |tx, message| {
                Box::pin(async move {
                    let entry = std::str::from_utf8(message.payload()).unwrap();
                    let id = message.message_id().unwrap();
                    self.schema
                        .insert(&mut **tx, Table::Ledger, id, entry)
                        .await;
                    Ok::<_, Error>(())
                })
            })
            .await;
        match outcome {
            Ok(Handled::Processed(())) => {
                self.tally.processed.fetch_add(1, Ordering::SeqCst);
                Next::Continue
            }
            Ok(Handled::Duplicate) => {
                self.tally.skipped.fetch_add(1, Ordering::SeqCst);
                Next::Continue
            }
            // The broker went away mid-message: whatever committed is skipped on redelivery.
            Err(error @ Error::Settle(_)) => {
                self.note(format!("cannot settle a message, reconnecting: {error}"));
                Next::Reconnect
            }
            Err(error) => panic!("the ledger consumer failed: {error}"),
        }
    }
}

/// A relay process (`idem-fault-relay`) and what it says on stdout.
struct RelayChild {
    name: String,
    child: Child,
    halted: Arc<Notify>,
    /// Its batches with confirmations.
    batches: Arc<AtomicUsize>,
}

impl RelayChild {
    /// Starts the relay `name`; its confirmations count in `confirmed`, its other output goes to
    /// `journal`.
    fn spawn(
        name: &str,
        schema: &impl FaultDb,
        broker: &impl FaultBroker,
        halt_after: Option<u32>,
        confirmed: &Arc<AtomicUsize>,
        journal: &Journal,
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem-fault-relay"));
        command
            .envs(broker.relay_env())
            .env("IDEM_STORE", schema.url())
            .env("IDEM_BROKER", broker.relay_url())
            .env("IDEM_OUTBOX_SCHEMA", schema.schema())
            .env("IDEM_RELAY_NAME", name)
            .env("IDEM_RELAY_BATCH_SIZE", "50")
            .env("IDEM_RELAY_LEASE_MS", LEASE.as_millis().to_string())
            .env("IDEM_RELAY_POLL_MS", "100")
            .env("IDEM_RELAY_ORDERING", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(batches) = halt_after {
            command.env("IDEM_FAULT_HALT_AFTER", batches.to_string());
        }
        let mut child = command.spawn().expect("start idem-fault-relay");
        journal.capture(name, child.stderr.take().unwrap());
        let halted = Arc::new(Notify::new());
        let batches = Arc::new(AtomicUsize::new(0));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn({
            let (halted, confirmed, batches) = (
                Arc::clone(&halted),
                Arc::clone(confirmed),
                Arc::clone(&batches),
            );
            let (name, journal) = (name.to_owned(), journal.clone());
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(count) = line.strip_prefix("confirmed ") {
                        confirmed.fetch_add(count.parse().unwrap(), Ordering::SeqCst);
                        batches.fetch_add(1, Ordering::SeqCst);
                    } else if line == "halted" {
                        halted.notify_one();
                    } else {
                        journal.write(&name, line);
                    }
                }
            }
        });
        Self {
            name: name.to_owned(),
            child,
            halted,
            batches,
        }
    }

    /// Waits for the relay to say `halted`, for at most `deadline`; fails at once if it exits.
    async fn halt(&mut self, deadline: Duration) -> Result<(), String> {
        tokio::select! {
            () = self.halted.notified() => Ok(()),
            status = self.child.wait() => Err(format!(
                "it exited ({}; its output is in the journal below)",
                status.map_or_else(|error| error.to_string(), |status| status.to_string())
            )),
            () = tokio::time::sleep(deadline) => Err(format!("not within {deadline:?}")),
        }
    }

    /// SIGKILL.
    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM, then waits for the graceful exit.
    async fn terminate(mut self) {
        let pid = self.child.id().unwrap();
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .unwrap();
        assert!(sent.success());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the relay stops within 30 s of SIGTERM")
            .unwrap();
        assert!(status.success(), "the relay exited with {status}");
    }
}

/// Enqueues `count` messages from [`PRODUCERS`] tasks, in business transactions that also
/// record each message in `sent`; every tenth transaction rolls back. A transaction starts only
/// when its messages keep the producers at most `max_ahead` messages ahead of the consumer's
/// `tally`. Returns how many committed.
async fn produce<D: FaultDb>(
    schema: Arc<D>,
    destination: String,
    count: usize,
    tally: Arc<Tally>,
    max_ahead: usize,
) -> usize {
    let outbox = schema.outbox().await;
    // Messages committed or being committed, across the producers.
    let reserved = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (schema, outbox, destination) =
                (Arc::clone(&schema), outbox.clone(), destination.clone());
            let (tally, reserved) = (Arc::clone(&tally), Arc::clone(&reserved));
            let share = count / PRODUCERS + usize::from(producer < count % PRODUCERS);
            tokio::spawn(async move {
                let keys: Vec<usize> = (producer..KEYS).step_by(PRODUCERS).collect();
                let mut next = vec![0_usize; KEYS];
                let (mut committed, mut transactions) = (0, 0);
                while committed < share {
                    transactions += 1;
                    let rollback = transactions % 10 == 0;
                    let size = PER_TRANSACTION.min(share - committed);
                    reserve(&reserved, &tally, size, max_ahead).await;
                    let mut planned = next.clone();
                    let mut tx = schema.pool().begin().await.unwrap();
                    for n in 0..size {
                        let key = keys[(committed + n) % keys.len()];
                        let entry = format!("k{key}:{}", planned[key]);
                        planned[key] += 1;
                        let message = OutboxMessage::new(destination.clone(), entry.clone())
                            .ordering_key(format!("k{key}"));
                        let id = outbox.enqueue(&mut *tx, message).await.unwrap();
                        schema
                            .insert(&mut *tx, Table::Sent, id.as_str(), &entry)
                            .await;
                    }
                    if rollback {
                        tx.rollback().await.unwrap();
                        reserved.fetch_sub(size, Ordering::SeqCst);
                    } else {
                        tx.commit().await.unwrap();
                        next = planned;
                        committed += size;
                    }
                }
                committed
            })
        })
        .collect();
    let mut committed = 0;
    for task in tasks {
        committed += task.await.unwrap();
    }
    committed
}

/// Waits until `size` more messages keep the producers at most `max_ahead` ahead of what the
/// consumer processed, and reserves them.
async fn reserve(reserved: &AtomicUsize, tally: &Tally, size: usize, max_ahead: usize) {
    loop {
        let processed = tally.processed.load(Ordering::SeqCst);
        let taken = reserved.load(Ordering::SeqCst);
        let ahead = (taken + size).saturating_sub(processed);
        if (ahead <= max_ahead || taken <= processed)
            && reserved
                .compare_exchange(taken, taken + size, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The outcome, as printed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    sent: i64,
    published: usize,
    effects: i64,
    skipped: usize,
    lost: i64,
    duplicated: i64,
    unexpected: i64,
    order_violations: usize,
    dead_letters: usize,
    relays_killed: usize,
    consumer_crashes: usize,
    broker_restarts: usize,
    /// Each relay's batches with confirmations, as the table says it.
    relay_batches: String,
}

/// Runs the scenario on `broker` with the outbox and the consumer's inbox in `schema`, prints
/// what it found, and asserts that nothing was lost, duplicated, made up or reordered. What the
/// relays and the consumer say goes to `journal`.
pub async fn run<B: FaultBroker, D: FaultDb>(mut broker: B, schema: D, journal: &Journal) {
    let started = Instant::now();
    let messages = message_count();
    let schema = Arc::new(schema);
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let tally = Arc::new(Tally::default());
    let stop = CancellationToken::new();
    let consumer = broker.spawn_consumer(Consumer {
        schema: Arc::clone(&schema),
        inbox,
        name: "ledger".parse().unwrap(),
        tally: Arc::clone(&tally),
        crash_at: messages / 4,
        journal: journal.clone(),
        stop: stop.clone(),
    });

    // The first relay runs alone until it stops dead after its third confirmed batch; then it
    // is SIGKILLed and two relays compete to the end. Alone, because with ordering on a relay
    // with a backlog holds the head of every key in its two claims (the batch it publishes and
    // the next, claimed meanwhile: 100 keys, batches of 50), so a second relay started beside it
    // gets a batch only when it claims in the instant between the first one's commit and its
    // next claim: whichever relay claims first publishes nearly everything, and a relay-a
    // started half a second after relay-b never reaches its third batch.
    let confirmed = Arc::new(AtomicUsize::new(0));
    let mut doomed = RelayChild::spawn("relay-a", &*schema, &broker, Some(3), &confirmed, journal);
    let producers = tokio::spawn(produce(
        Arc::clone(&schema),
        broker.destination(),
        messages,
        Arc::clone(&tally),
        B::MAX_AHEAD,
    ));

    let deadline = Duration::from_secs(120) + Duration::from_millis(messages as u64 * 20);
    let standing = Standing {
        schema: &*schema,
        outbox: &outbox,
        tally: &tally,
        confirmed: &confirmed,
    };
    if let Err(why) = doomed.halt(deadline).await {
        let now = standing.describe(&[&doomed]).await;
        panic!("relay-a did not reach its third batch: {why}; {now}");
    }
    // Confirmed by the broker, not marked sent: SIGKILL, and two relays in its place.
    let doomed_batches = doomed.batches.load(Ordering::SeqCst);
    doomed.kill().await;
    let replacement = RelayChild::spawn("relay-a2", &*schema, &broker, None, &confirmed, journal);
    let steady = RelayChild::spawn("relay-b", &*schema, &broker, None, &confirmed, journal);

    let halfway = tokio::time::timeout(deadline, async {
        while tally.processed.load(Ordering::SeqCst) < messages / 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if halfway.is_err() {
        let now = standing.describe(&[&replacement, &steady]).await;
        panic!("half of the messages did not reach the ledger within {deadline:?}: {now}");
    }
    broker.restart().await;

    let sent = producers.await.unwrap();
    let done = tokio::time::timeout(deadline, async {
        loop {
            let effects = schema
                .count("SELECT count(DISTINCT message_id) FROM {schema}.ledger")
                .await;
            if effects >= sent as i64 && outbox.pending(schema.pool()).await.unwrap() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let unfinished = match done {
        Ok(()) => None,
        Err(_) => Some(standing.describe(&[&replacement, &steady]).await),
    };
    // Stray copies still on their way (redeliveries after an ack wait) get the time to arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let relay_batches = format!(
        "relay-a {doomed_batches}, {}",
        batches_of(&[&replacement, &steady])
    );
    replacement.terminate().await;
    steady.terminate().await;
    stop.cancel();
    consumer.await.unwrap();

    let report = Report {
        sent: schema.count("SELECT count(*) FROM {schema}.sent").await,
        published: confirmed.load(Ordering::SeqCst),
        effects: schema.count("SELECT count(*) FROM {schema}.ledger").await,
        skipped: tally.skipped.load(Ordering::SeqCst),
        lost: schema
            .count(
                "SELECT count(*) FROM {schema}.sent AS s WHERE NOT EXISTS \
                 (SELECT 1 FROM {schema}.ledger AS l WHERE l.message_id = s.message_id)",
            )
            .await,
        duplicated: schema
            .count("SELECT count(*) - count(DISTINCT message_id) FROM {schema}.ledger")
            .await,
        unexpected: schema
            .count(
                "SELECT count(*) FROM {schema}.ledger AS l WHERE NOT EXISTS \
                 (SELECT 1 FROM {schema}.sent AS s \
                  WHERE s.message_id = l.message_id AND s.entry = l.entry)",
            )
            .await,
        order_violations: order_violations(&schema.entries().await),
        dead_letters: outbox
            .dead_letters(schema.pool(), 1000)
            .await
            .unwrap()
            .len(),
        relays_killed: 1,
        consumer_crashes: tally.crashes.load(Ordering::SeqCst),
        broker_restarts: 1,
        relay_batches,
    };
    print::<B, D>(messages, &report, started.elapsed());
    assert_eq!(sent as i64, report.sent);
    if let Some(now) = unfinished {
        panic!("not every committed message reached the ledger within {deadline:?}: {now}");
    }
    assert_eq!(report.effects, report.sent);
    assert_eq!(report.lost, 0);
    assert_eq!(report.duplicated, 0);
    assert_eq!(report.unexpected, 0);
    assert_eq!(report.order_violations, 0);
    assert_eq!(report.dead_letters, 0);
    assert_eq!(report.consumer_crashes, 1);
    assert!(report.published >= report.sent as usize, "{report:?}");
    // The crashed consumer's message came back (each broker's way) and was skipped.
    assert!(report.skipped >= 1, "{report:?}");
}

/// What a wait that timed out says of where the run stands.
struct Standing<'a, D: FaultDb> {
    schema: &'a D,
    outbox: &'a Outbox<D::DB>,
    tally: &'a Tally,
    confirmed: &'a AtomicUsize,
}

impl<D: FaultDb> Standing<'_, D> {
    async fn describe(&self, relays: &[&RelayChild]) -> String {
        let committed = self
            .schema
            .count("SELECT count(*) FROM {schema}.sent")
            .await;
        let pending = match self.outbox.pending(self.schema.pool()).await {
            Ok(pending) => pending.to_string(),
            Err(error) => format!("unknown ({error})"),
        };
        format!(
            "{committed} messages committed, {pending} pending in the outbox, {} confirmed by \
             the broker, {} processed by the consumer; batches confirmed: {}",
            self.confirmed.load(Ordering::SeqCst),
            self.tally.processed.load(Ordering::SeqCst),
            batches_of(relays)
        )
    }
}

/// Each relay's batches with confirmations so far: `relay-b 12, relay-a2 9`.
fn batches_of(relays: &[&RelayChild]) -> String {
    let batches: Vec<String> = relays
        .iter()
        .map(|relay| format!("{} {}", relay.name, relay.batches.load(Ordering::SeqCst)))
        .collect();
    batches.join(", ")
}

/// Messages of a key booked out of their enqueue order: `entries` are the ledger's, in the
/// consumer's processing order; each key's must read 0, 1, 2…
fn order_violations(entries: &[String]) -> usize {
    let mut expected: HashMap<String, usize> = HashMap::new();
    let mut violations = 0;
    for entry in entries {
        let (key, n) = entry.split_once(':').unwrap();
        let n: usize = n.parse().unwrap();
        let next = expected.entry(key.to_owned()).or_default();
        if n != *next {
            violations += 1;
        }
        *next = n + 1;
    }
    violations
}

/// Straight to stderr, so that the table shows even when the test passes.
fn print<B: FaultBroker, D: FaultDb>(messages: usize, report: &Report, elapsed: Duration) {
    let rows: [(&str, String); 13] = [
        ("sent (committed in the outbox)", report.sent.to_string()),
        (
            "published attempts (broker confirmations)",
            report.published.to_string(),
        ),
        ("effects (ledger rows)", report.effects.to_string()),
        ("copies skipped by the inbox", report.skipped.to_string()),
        ("lost (committed, no effect)", report.lost.to_string()),
        ("duplicated effects", report.duplicated.to_string()),
        ("unexpected effects", report.unexpected.to_string()),
        (
            "per-key order violations (ordering on)",
            report.order_violations.to_string(),
        ),
        ("dead letters", report.dead_letters.to_string()),
        (
            "relays SIGKILLed after publish, before mark-sent",
            report.relays_killed.to_string(),
        ),
        (
            "consumer crashes after commit, before ack",
            report.consumer_crashes.to_string(),
        ),
        (B::RESTART, report.broker_restarts.to_string()),
        ("batches confirmed, per relay", report.relay_batches.clone()),
    ];
    let mut table = format!(
        "\nfault test, {}, the outbox and the inbox on {}: {messages} messages, {KEYS} keys, 2 \
         relays, {:.1} s\n",
        B::NAME,
        D::NAME,
        elapsed.as_secs_f64()
    );
    table.push_str("| check | count |\n| --- | ---: |\n");
    for (name, value) in rows {
        table.push_str(&format!("| {name} | {value} |\n"));
    }
    let _ = std::io::stderr().write_all(table.as_bytes());
}

/// Whether something accepts connections on `port`.
pub async fn listening(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok()
}

/// Waits until `port` is `up` (or down), for at most 60 s.
pub async fn wait_port(port: u16, up: bool) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while listening(port).await != up {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "port {port} did not become {}",
            if up { "open" } else { "closed" }
        )
    });
}

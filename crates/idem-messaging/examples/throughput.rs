//! Messaging throughput, each figure against a baseline measured in the same run:
//!
//! - relay throughput per broker (outbox → broker, confirmed, marked sent) against the broker's
//!   raw publish throughput from the same client library (`lapin`, `async-nats`, `rdkafka`,
//!   `aws-sdk-sqs`), publishing the same messages in batches of the same size, each batch's
//!   confirmations awaited together (target ≥ 0.5×);
//! - inbox overhead: handler transactions per second with the inbox against the same handler
//!   without it (target ≥ 0.7×).
//!
//! ```sh
//! IDEM_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! IDEM_TEST_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/%2f' \
//! IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 IDEM_TEST_KAFKA_URL=127.0.0.1:9092 \
//! IDEM_TEST_SQS_URL=http://127.0.0.1:9324 \
//! cargo run --release -p idem-messaging --all-features --example throughput
//! ```
//!
//! `IDEM_BENCH_MESSAGES` (default 20,000) sets the messages per relay run, `IDEM_BENCH_BATCH`
//! (default 100, the relay's default) the batch size of both sides. Kafka runs against the
//! broker at `IDEM_TEST_KAFKA_URL` (tansu in the project's scripts), or librdkafka's
//! in-process mock cluster without it. SQS runs against the SQS-compatible server at
//! `IDEM_TEST_SQS_URL` (moto's), with `IDEM_BENCH_SQS_MESSAGES` (default 1,000) messages into a
//! standard queue of each side's own: moto slows down with the messages a queue holds, so both
//! sides see the same growth. Any other broker whose variable is unset is skipped.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use idem_messaging::{
    Confirmations, ConsumerName, Envelope, Error, MessageId, Outbox, OutboxMessage, OutboxOptions,
    PgInbox, Publisher, Relay, amqp::AmqpPublisher, kafka::KafkaPublisher, nats::NatsPublisher,
    sqs::SqsPublisher,
};
use sqlx::{AssertSqlSafe, PgPool, postgres::PgPoolOptions};
use tokio_util::sync::CancellationToken;

/// Rounds of each measurement; the best is kept.
const ROUNDS: usize = 2;
/// Concurrent handlers in the inbox measurement.
const HANDLERS: usize = 8;
/// Handler transactions per inbox round.
const TRANSACTIONS: usize = 4_000;

/// Messages per relay batch, and per raw batch: `IDEM_BENCH_BATCH`, 100 by default.
fn batch_size() -> usize {
    std::env::var("IDEM_BENCH_BATCH")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

fn payload(n: usize) -> String {
    format!(
        "{{\"payment\":{n},\"amount\":\"10.00\",\"currency\":\"EUR\",\"pad\":\"{:064}\"}}",
        n
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let postgres =
        std::env::var("IDEM_TEST_POSTGRES_URL").context("IDEM_TEST_POSTGRES_URL is not set")?;
    let messages: usize = std::env::var("IDEM_BENCH_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&postgres)
        .await?;
    let schema = format!("idem_bench_{}", std::process::id());
    sqlx::query(AssertSqlSafe(format!(r#"CREATE SCHEMA "{schema}""#)))
        .execute(&pool)
        .await?;
    let result = run(&pool, &schema, messages).await;
    sqlx::query(AssertSqlSafe(format!(r#"DROP SCHEMA "{schema}" CASCADE"#)))
        .execute(&pool)
        .await?;
    result
}

async fn run(pool: &PgPool, schema: &str, messages: usize) -> anyhow::Result<()> {
    let outbox = Outbox::new(OutboxOptions::new().schema(schema.parse()?));
    outbox.migrate(pool).await?;
    println!(
        "{messages} messages of {} bytes, batches of {}, best of {ROUNDS}\n",
        payload(0).len(),
        batch_size()
    );
    println!("| broker | raw publish (client library) | relay | ratio | target |");
    println!("| --- | --- | --- | --- | --- |");

    if let Ok(url) = std::env::var("IDEM_TEST_AMQP_URL") {
        let queue = format!("idem_bench_{}", std::process::id());
        let raw = amqp_raw(&url, &queue, messages).await?;
        let relay = relay(
            pool,
            &outbox,
            AmqpPublisher::new(url.clone()),
            &queue,
            messages,
        )
        .await?;
        row("RabbitMQ (lapin, confirms)", raw, relay);
        amqp_delete(&url, &queue).await?;
    }
    if let Ok(url) = std::env::var("IDEM_TEST_NATS_URL") {
        let (stream, subject) = (
            format!("IDEM_BENCH_{}", std::process::id()),
            format!("idem_bench.{}", std::process::id()),
        );
        let jetstream = async_nats::jetstream::new(async_nats::connect(&url).await?);
        jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await?;
        let raw = nats_raw(&jetstream, &subject, messages).await?;
        let relay = relay(
            pool,
            &outbox,
            NatsPublisher::new(url.clone()),
            &subject,
            messages,
        )
        .await?;
        row("NATS JetStream (async-nats, PubAck)", raw, relay);
        jetstream.delete_stream(&stream).await?;
    }
    if let Ok(servers) = std::env::var("IDEM_TEST_KAFKA_URL") {
        let topic = format!("idem-bench-{}", std::process::id());
        kafka_create_topic(&servers, &topic).await?;
        let raw = kafka_raw(&servers, &topic, messages).await?;
        let relay = relay(
            pool,
            &outbox,
            KafkaPublisher::new(&servers),
            &topic,
            messages,
        )
        .await?;
        row("Kafka, tansu (rdkafka, acks=all)", raw, relay);
    } else {
        let cluster = rdkafka::mocking::MockCluster::new(3)?;
        cluster.create_topic("bench", 3, 3)?;
        let servers = cluster.bootstrap_servers();
        let raw = kafka_raw(&servers, "bench", messages).await?;
        let relay = relay(
            pool,
            &outbox,
            KafkaPublisher::new(&servers),
            "bench",
            messages,
        )
        .await?;
        row("Kafka, mock cluster (rdkafka, acks=all)", raw, relay);
    }
    if let Ok(endpoint) = std::env::var("IDEM_TEST_SQS_URL") {
        let messages: usize = std::env::var("IDEM_BENCH_SQS_MESSAGES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000);
        let client = sqs_client(&endpoint);
        let (raw_queue, relay_queue) = (
            sqs_queue(&client, "raw").await?,
            sqs_queue(&client, "relay").await?,
        );
        let raw = sqs_raw(&client, &raw_queue, messages).await?;
        let relay = relay(
            pool,
            &outbox,
            SqsPublisher::new(client.clone()),
            &relay_queue,
            messages,
        )
        .await?;
        row(
            &format!("Amazon SQS, moto (aws-sdk-sqs, SendMessageBatch), {messages} messages"),
            raw,
            relay,
        );
        for queue in [raw_queue, relay_queue] {
            client.delete_queue().queue_url(queue).send().await?;
        }
    }

    // The relay's own ceiling: the same runs with a publisher that confirms at once.
    let ceiling = relay(pool, &outbox, Discard, "nowhere", messages).await?;
    println!("| none (confirms at once: the outbox's own ceiling) | | {ceiling:.0} msg/s | | |");

    inbox(pool, schema).await
}

/// Confirms every message without sending it anywhere.
struct Discard;

impl Publisher for Discard {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        batch.iter().map(|_| Ok(())).collect()
    }
}

fn row(broker: &str, raw: f64, relay: f64) {
    println!(
        "| {broker} | {raw:.0} msg/s | {relay:.0} msg/s | {:.2}× | ≥ 0.5× |",
        relay / raw
    );
}

/// The best of `ROUNDS` runs of `round`, each returning its elapsed time, as messages per second.
async fn best<F, Fut>(messages: usize, mut round: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Duration>>,
{
    let mut best = Duration::MAX;
    for _ in 0..ROUNDS {
        best = best.min(round().await?);
    }
    Ok(messages as f64 / best.as_secs_f64())
}

/// Counts the confirmed messages of a shared publisher.
struct Counted<P> {
    inner: Arc<P>,
    confirmed: Arc<AtomicUsize>,
}

impl<P: Publisher> Publisher for Counted<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let confirmations = self.inner.publish_batch(batch).await;
        let ok = confirmations.iter().filter(|c| c.is_ok()).count();
        self.confirmed.fetch_add(ok, Ordering::SeqCst);
        confirmations
    }
}

/// Enqueues `messages` (untimed), then times one relay (`Relay::run`) draining the outbox.
async fn relay<P: Publisher + 'static>(
    pool: &PgPool,
    outbox: &Outbox,
    publisher: P,
    destination: &str,
    messages: usize,
) -> anyhow::Result<f64> {
    let publisher = Arc::new(publisher);
    let counted = || Counted {
        inner: Arc::clone(&publisher),
        confirmed: Arc::new(AtomicUsize::new(0)),
    };
    // Connects the publisher, outside the measurement.
    Relay::new(pool.clone(), outbox.clone(), counted())
        .run_once()
        .await?;
    best(messages, || async {
        for chunk in 0..messages.div_ceil(1000) {
            let mut tx = pool.begin().await?;
            for n in chunk * 1000..((chunk + 1) * 1000).min(messages) {
                outbox
                    .enqueue(&mut tx, OutboxMessage::new(destination, payload(n)))
                    .await?;
            }
            tx.commit().await?;
        }
        let publisher = counted();
        let confirmed = Arc::clone(&publisher.confirmed);
        let relay =
            Relay::new(pool.clone(), outbox.clone(), publisher).batch_size(batch_size() as u32);
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { relay.run(shutdown).await }
        });
        while confirmed.load(Ordering::SeqCst) < messages {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let elapsed = started.elapsed();
        shutdown.cancel();
        task.await?;
        anyhow::ensure!(
            outbox.pending(pool).await? == 0,
            "the relay left messages behind"
        );
        Ok(elapsed)
    })
    .await
}

async fn amqp_raw(url: &str, queue: &str, messages: usize) -> anyhow::Result<f64> {
    use lapin::{
        BasicProperties, Connection, ConnectionProperties,
        options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions},
        types::FieldTable,
    };
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let payloads: Vec<String> = (0..messages).map(payload).collect();
    let rate = best(messages, || async {
        let started = Instant::now();
        for batch in payloads.chunks(batch_size()) {
            let mut confirms = Vec::with_capacity(batch_size());
            for body in batch {
                let properties = BasicProperties::default()
                    .with_message_id(MessageId::from(uuid::Uuid::now_v7()).as_str().into())
                    .with_delivery_mode(2);
                confirms.push(
                    channel
                        .basic_publish(
                            "".into(),
                            queue.into(),
                            BasicPublishOptions {
                                mandatory: true,
                                ..BasicPublishOptions::default()
                            },
                            body.as_bytes(),
                            properties,
                        )
                        .await?,
                );
            }
            for confirm in confirms {
                anyhow::ensure!(confirm.await?.is_ack(), "nacked");
            }
        }
        Ok(started.elapsed())
    })
    .await?;
    connection.close(200, "done".into()).await?;
    Ok(rate)
}

async fn amqp_delete(url: &str, queue: &str) -> anyhow::Result<()> {
    let connection =
        lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .queue_delete(queue.into(), lapin::options::QueueDeleteOptions::default())
        .await?;
    connection.close(200, "done".into()).await?;
    Ok(())
}

async fn nats_raw(
    jetstream: &async_nats::jetstream::Context,
    subject: &str,
    messages: usize,
) -> anyhow::Result<f64> {
    let payloads: Vec<String> = (0..messages).map(payload).collect();
    best(messages, || async {
        let started = Instant::now();
        for batch in payloads.chunks(batch_size()) {
            let mut acks = Vec::with_capacity(batch_size());
            for body in batch {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(
                    "Nats-Msg-Id",
                    MessageId::from(uuid::Uuid::now_v7()).as_str(),
                );
                acks.push(
                    jetstream
                        .publish_with_headers(subject.to_owned(), headers, body.clone().into())
                        .await?,
                );
            }
            for ack in acks {
                ack.await?;
            }
        }
        Ok(started.elapsed())
    })
    .await
}

async fn kafka_create_topic(servers: &str, topic: &str) -> anyhow::Result<()> {
    use rdkafka::{
        ClientConfig,
        admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
        client::DefaultClientContext,
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()?;
    for created in admin
        .create_topics(
            &[NewTopic::new(topic, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?
    {
        created.map_err(|(topic, code)| anyhow::anyhow!("cannot create {topic}: {code}"))?;
    }
    Ok(())
}

async fn kafka_raw(servers: &str, topic: &str, messages: usize) -> anyhow::Result<f64> {
    use rdkafka::{
        ClientConfig,
        message::{Header, OwnedHeaders},
        producer::{FutureProducer, FutureRecord},
    };
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()?;
    let payloads: Vec<String> = (0..messages).map(payload).collect();
    best(messages, || async {
        let started = Instant::now();
        for batch in payloads.chunks(batch_size()) {
            let mut deliveries = Vec::with_capacity(batch_size());
            for body in batch {
                let id = MessageId::from(uuid::Uuid::now_v7());
                let headers = OwnedHeaders::new().insert(Header {
                    key: "message-id",
                    value: Some(id.as_str()),
                });
                let record = FutureRecord::<str, str>::to(topic)
                    .payload(body)
                    .headers(headers);
                deliveries.push(producer.send_result(record).map_err(|(error, _)| error)?);
            }
            for delivery in deliveries {
                delivery.await?.map_err(|(error, _)| error)?;
            }
        }
        Ok(started.elapsed())
    })
    .await
}

fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("bench", "bench", None, None, "idem-bench"))
        .http_client(idem_messaging::sqs::http_client())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// A standard queue of its own: its name.
async fn sqs_queue(client: &aws_sdk_sqs::Client, side: &str) -> anyhow::Result<String> {
    let name = format!("idem-bench-{side}-{}", std::process::id());
    client.create_queue().queue_name(&name).send().await?;
    Ok(name)
}

/// `SendMessageBatch` requests of 10 (SQS's most), a batch's requests sent together, with the
/// message id as an attribute, as [`SqsPublisher`] sends them.
async fn sqs_raw(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    messages: usize,
) -> anyhow::Result<f64> {
    use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
    let url = client
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await?
        .queue_url()
        .context("no queue URL")?
        .to_owned();
    let payloads: Vec<String> = (0..messages).map(payload).collect();
    best(messages, || async {
        let started = Instant::now();
        for batch in payloads.chunks(batch_size()) {
            let requests = batch.chunks(10).map(|chunk| {
                let entries = chunk.iter().enumerate().map(|(i, body)| {
                    let id = MessageId::from(uuid::Uuid::now_v7());
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .message_attributes(
                            "message-id",
                            MessageAttributeValue::builder()
                                .data_type("String")
                                .string_value(id.as_str())
                                .build()
                                .expect("type and value are set"),
                        )
                        .build()
                        .expect("id and body are set")
                });
                client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries.collect()))
                    .send()
            });
            for sent in futures_util::future::join_all(requests).await {
                anyhow::ensure!(sent?.failed().is_empty(), "SQS refused an entry");
            }
        }
        Ok(started.elapsed())
    })
    .await
}

/// Handler transactions per second: `BEGIN; INSERT ledger; COMMIT` against the same with the
/// inbox's row first, `HANDLERS` at a time.
async fn inbox(pool: &PgPool, schema: &str) -> anyhow::Result<()> {
    let ledger = format!(r#""{schema}".ledger"#);
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {ledger} (id bigserial PRIMARY KEY, message_id text NOT NULL, entry text NOT NULL)"
    )))
    .execute(pool)
    .await?;
    let inbox = PgInbox::new(idem_messaging::InboxOptions::new().schema(schema.parse()?));
    inbox.migrate(pool).await?;
    let insert: Arc<str> =
        format!("INSERT INTO {ledger} (message_id, entry) VALUES ($1, $2)").into();
    let consumer: ConsumerName = "ledger".parse()?;

    let mut without = Duration::MAX;
    let mut with = Duration::MAX;
    for round in 0..ROUNDS {
        without = without.min(
            concurrently(|n| {
                let (pool, insert) = (pool.clone(), Arc::clone(&insert));
                async move {
                    let mut tx = pool.begin().await?;
                    sqlx::query(AssertSqlSafe(Arc::clone(&insert)))
                        .bind(format!("plain-{round}-{n}"))
                        .bind(payload(n))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                }
            })
            .await?,
        );
        with = with.min(
            concurrently(|n| {
                let (pool, insert, inbox, consumer) = (
                    pool.clone(),
                    Arc::clone(&insert),
                    inbox.clone(),
                    consumer.clone(),
                );
                async move {
                    let id: MessageId = format!("inbox-{round}-{n}").parse()?;
                    let entry = id.to_string();
                    inbox
                        .handle(&pool, &consumer, &id, |tx| {
                            Box::pin(async move {
                                sqlx::query(AssertSqlSafe(insert))
                                    .bind(entry)
                                    .bind(payload(n))
                                    .execute(&mut **tx)
                                    .await?;
                                Ok::<_, Error>(())
                            })
                        })
                        .await?;
                    Ok(())
                }
            })
            .await?,
        );
    }
    let rate = |elapsed: Duration| TRANSACTIONS as f64 / elapsed.as_secs_f64();
    println!("\n{TRANSACTIONS} handler transactions, {HANDLERS} at a time, best of {ROUNDS}\n");
    println!("| handler | transactions/s | ratio | target |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| without the inbox (BEGIN; INSERT; COMMIT) | {:.0} | | |",
        rate(without)
    );
    println!(
        "| with the inbox (`Inbox::handle`) | {:.0} | {:.2}× | ≥ 0.7× |",
        rate(with),
        rate(with) / rate(without)
    );
    Ok(())
}

/// Runs `TRANSACTIONS` calls of `transaction`, `HANDLERS` at a time; returns the elapsed time.
async fn concurrently<F, Fut>(transaction: F) -> anyhow::Result<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..TRANSACTIONS {
        if tasks.len() >= HANDLERS {
            tasks.join_next().await.unwrap()??;
        }
        tasks.spawn(transaction(n));
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(started.elapsed())
}

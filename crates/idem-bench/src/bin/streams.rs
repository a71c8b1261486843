//! A client of streamed responses for the load harness (`scripts/load streams`): `--streams`
//! requests for the upstream's event stream (`/events`), `--concurrency` at a time, each worker
//! on a keep-alive HTTP/1.1 connection of its own, and with a new `Idempotency-Key` each when
//! `--keys`. It measures, for each stream, the time to its first byte and to its end, and, with
//! `--pid`, what that process's resident memory grew by while every worker had a stream open,
//! per open stream. It checks that every stream was whole (200, `--events` events).
//!
//! Prints one JSON object: `{"streams":…,"ttfb_p50_ms":…,"ttfb_p99_ms":…,"total_p50_ms":…,
//! "total_p99_ms":…,"rss_per_stream_kib":…}`.
//!
//! `idem-bench-streams http://127.0.0.1:8080/events?count=100&every_ms=10 --keys --pid 1234`

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, Uri, client::conn::http1};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, sync::Barrier};

#[derive(Parser)]
struct Args {
    /// The event stream's URL.
    url: Uri,
    /// How many streams to read in all.
    #[arg(long, default_value_t = 128)]
    streams: usize,
    /// How many at a time.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The events each stream has.
    #[arg(long, default_value_t = 100)]
    events: usize,
    /// Send a new `Idempotency-Key` with each request.
    #[arg(long)]
    keys: bool,
    /// The processes (nginx's workers, say) whose resident memory per open stream is measured,
    /// summed.
    #[arg(long)]
    pid: Vec<u32>,
}

/// One stream's times.
struct Timing {
    first_byte: Duration,
    total: Duration,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let authority = args.url.authority().context("the URL has no host")?.clone();
    let started = Arc::new(AtomicUsize::new(0));
    // Every worker's first stream, open at once: the moment memory is read.
    let all_open = Arc::new(Barrier::new(args.concurrency + 1));
    let idle_rss = rss_kib(&args.pid)?;
    let run_id = std::process::id();
    let key = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let stream = TcpStream::connect(authority.as_str()).await?;
        stream.set_nodelay(true)?;
        let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let (started, all_open, key, url) = (
            Arc::clone(&started),
            Arc::clone(&all_open),
            Arc::clone(&key),
            args.url.clone(),
        );
        let (streams, events, keys) = (args.streams, args.events, args.keys);
        workers.push(tokio::spawn(async move {
            let mut timings = Vec::new();
            let mut first = true;
            while started.fetch_add(1, Ordering::SeqCst) < streams {
                let mut request =
                    Request::post(url.clone()).header("host", url.host().unwrap_or(""));
                if keys {
                    let n = key.fetch_add(1, Ordering::SeqCst);
                    request = request.header("idempotency-key", format!("stream-{run_id}-{n}"));
                }
                let request = request.body(Empty::<Bytes>::new())?;
                sender.ready().await?;
                let start = Instant::now();
                let response = sender.send_request(request).await?;
                ensure!(response.status() == 200, "status {}", response.status());
                let mut body = response.into_body();
                let mut first_byte = None;
                let mut text = Vec::new();
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame?.into_data() {
                        first_byte.get_or_insert_with(|| start.elapsed());
                        text.extend_from_slice(&data);
                        if std::mem::take(&mut first) {
                            all_open.wait().await;
                        }
                    }
                }
                let received = text.windows(2).filter(|w| w == b"\n\n").count();
                ensure!(received == events, "{received} events of {events}");
                timings.push(Timing {
                    first_byte: first_byte.context("no byte")?,
                    total: start.elapsed(),
                });
            }
            if first {
                all_open.wait().await;
            }
            anyhow::Ok(timings)
        }));
    }
    all_open.wait().await;
    let open_rss = rss_kib(&args.pid)?;
    let mut timings = Vec::new();
    for worker in workers {
        timings.extend(worker.await??);
    }
    if timings.len() != args.streams {
        bail!("{} streams of {}", timings.len(), args.streams);
    }
    let per_stream = match (idle_rss, open_rss) {
        (Some(idle), Some(open)) => {
            let grown = open.saturating_sub(idle) as f64;
            format!("{:.1}", grown / args.concurrency as f64)
        }
        _ => "null".to_owned(),
    };
    let ms = |pick: fn(&Timing) -> Duration, q: f64| {
        let mut values: Vec<f64> = timings
            .iter()
            .map(|t| pick(t).as_secs_f64() * 1e3)
            .collect();
        values.sort_by(f64::total_cmp);
        let at = ((values.len() - 1) as f64 * q).round() as usize;
        values[at]
    };
    println!(
        "{{\"streams\":{},\"ttfb_p50_ms\":{:.2},\"ttfb_p99_ms\":{:.2},\"total_p50_ms\":{:.1},\
         \"total_p99_ms\":{:.1},\"rss_per_stream_kib\":{per_stream}}}",
        timings.len(),
        ms(|t| t.first_byte, 0.5),
        ms(|t| t.first_byte, 0.99),
        ms(|t| t.total, 0.5),
        ms(|t| t.total, 0.99),
    );
    Ok(())
}

/// The resident memory of the processes `pids`, summed, in KiB (`VmRSS`); `None` without any.
fn rss_kib(pids: &[u32]) -> anyhow::Result<Option<u64>> {
    if pids.is_empty() {
        return Ok(None);
    }
    let mut sum = 0;
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        sum += status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .context("no VmRSS")?;
    }
    Ok(Some(sum))
}

//! [`run`]: one chaos run, from starting the servers to the report.

use std::{ffi::OsString, path::Path, time::Duration};

use clap::ValueEnum as _;
use idem_gateway::HumanDuration;

use crate::{
    Error, FaultKind, GatewayId, InFlight, Report, RunArgs, Schedule, admin,
    callers::{self, CallerSettings},
    check::{self, Settings, check},
    faults::max_clock_offset,
    gateway_process::{GatewayProcess, GatewayProgram},
    history::Recorder,
    http_client::http_client,
    injector::Injector,
    link::{GatewayLinks, LinkProxy},
    options::Keep,
    progress::Progress,
    provenance::Provenance,
    proxy::DropProxy,
    report::millis,
    resources::{self, Resources, Sampler},
    store::StoreServer,
    upstream::{FENCING_HEADER, Upstream},
};

/// Runs the gateways under faults as `args` say, with gateway processes started from
/// `program`, and checks the history. Writes `--json` and `--history` when asked; keeps the
/// run's directory (logs, store files) as `--keep` says, and says where.
///
/// An error means the run could not be carried out; a run that found problems returns a
/// [`Report`] that did not pass.
pub async fn run(args: &RunArgs, program: &GatewayProgram) -> Result<Report, Error> {
    if args.ttl.0 < args.deadline.0 * 2 {
        return Err(Error::Options(
            "--ttl must be at least twice --deadline: a retry after the TTL executes again",
        ));
    }
    if args.soak && args.gateways() < 2 {
        return Err(Error::Options(
            "--soak needs two-gateways: one is watched and never killed, the other is",
        ));
    }
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let duration = args.duration.0;
    let lease = args.lease.0;
    let gateways = args.gateways();
    let faults: Vec<String> = args
        .faults
        .iter()
        .filter_map(|fault| Some(fault.to_possible_value()?.get_name().to_owned()))
        .collect();
    eprintln!(
        "idem-chaos: {} store, --ambiguous {}, --in-flight {}, {gateways} gateway(s), {} callers \
         for {}, faults {}, seed {seed}",
        args.store,
        args.ambiguous,
        args.in_flight,
        args.callers,
        args.duration,
        faults.join(","),
    );

    let dir = tempfile::Builder::new()
        .prefix("idem-chaos-")
        .tempdir()
        .map_err(Error::io("create the run's directory"))?;
    let mut store =
        StoreServer::start(args.store, dir.path(), args.redis_persistence, seed).await?;
    // The history's clock starts once the store is up (initdb takes seconds).
    let recorder = Recorder::new();
    // A slow answer makes the caller's attempt time out; the gateway still waits for it.
    let slow_latency = args.attempt_timeout.0 * 2;
    let upstream = Upstream::start(
        gateways,
        slow_latency,
        args.streamed,
        seed,
        recorder.clone(),
    )
    .await?;
    let client = http_client();
    let mut processes = Vec::new();
    let mut links = Vec::new();
    for id in (0..gateways).map(GatewayId) {
        // With partitions, each gateway reaches its upstream and its store's server through
        // proxies of its own; the harness keeps the direct addresses.
        let gateway_links = if args.injects(FaultKind::Partitions) {
            GatewayLinks {
                store: match store.addr() {
                    Some(addr) => Some(LinkProxy::start(addr).await?),
                    None => None,
                },
                upstream: Some(LinkProxy::start(upstream.addr(id)).await?),
            }
        } else {
            GatewayLinks::default()
        };
        let upstream_url = match &gateway_links.upstream {
            Some(proxy) => format!("http://{}", proxy.addr()),
            None => upstream.url(id),
        };
        let store_url = match &gateway_links.store {
            Some(proxy) => store.url_at(proxy.addr()),
            None => store.url(),
        };
        links.push(gateway_links);
        let serve_args = serve_args(args, &upstream_url, &store_url, slow_latency);
        processes.push(
            GatewayProcess::start(id, program, serve_args, dir.path(), client.clone()).await?,
        );
    }
    let drop_rate = if args.injects(FaultKind::Drops) {
        args.drop_rate
    } else {
        0.0
    };
    let proxy = DropProxy::start(
        processes.iter().map(GatewayProcess::addr).collect(),
        drop_rate,
        args.attempt_timeout.0 + Duration::from_secs(1),
        seed,
        recorder.clone(),
    )
    .await?;

    let plan = args.plan();
    let schedule = Schedule::new(&plan, seed);
    let progress = Progress::start(duration, recorder.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let sampling = tokio::spawn(
        Sampler {
            gateways: processes.iter().map(|p| (p.id(), p.running())).collect(),
            store_files: store.files(),
            recorder: recorder.clone(),
        }
        .run(args.sample_every.0, stop.clone()),
    );
    let callers = tokio::spawn(callers::run(
        proxy.url(),
        CallerSettings {
            callers: args.callers,
            attempt_timeout: args.attempt_timeout.0,
            deadline: args.deadline.0,
        },
        recorder.clone(),
        stop.clone(),
    ));
    let start = recorder.now().as_duration();
    let injected = Injector {
        gateways: &mut processes,
        store: &mut store,
        upstream: &upstream,
        links: &links,
        recorder: &recorder,
        progress: &progress,
        spared: plan.spared,
    }
    .run(&schedule, start, duration)
    .await;
    stop.cancel();
    proxy.stop_dropping();
    if let Err(error) = injected {
        callers.abort();
        return Err(error);
    }
    progress.event("faults stopped, no new operation: waiting for the last outcomes");
    callers.await.expect("the callers do not panic")?;
    // A clock that was ahead wrote leases that end that much later in true time.
    let settle = if plan.faults.contains(&FaultKind::ClockSteps) {
        lease + max_clock_offset(lease)
    } else {
        lease
    };
    progress.event(format_args!(
        "every operation has its outcome; waiting {} before reading the records",
        HumanDuration(settle)
    ));
    tokio::time::sleep(settle).await;
    let records = admin::record_states(&client, &processes[0].admin_url(), recorder.keys()).await?;
    // Records expire while tens of thousands are read: the forgotten check counts from the end.
    let read = recorder.now();
    for process in &mut processes {
        process.stop().await;
    }
    store.stop().await;
    drop(progress);

    let samples = sampling.await.unwrap_or_default();
    let history = recorder.finish(records, read);
    let mut verdict = check(
        &history,
        Settings {
            store: args.store,
            ambiguous: args.ambiguous,
            lease,
            ttl: args.ttl.0,
        },
    );
    let watched = plan
        .spared
        .and_then(|gateway| resources::trend(&samples, gateway, millis(duration)));
    verdict
        .failures
        .extend(watched.and_then(|trend| trend.grew()));
    let report = Report {
        store: args.store,
        ambiguous: args.ambiguous,
        in_flight: args.in_flight,
        gateways,
        callers: args.callers,
        duration_ms: millis(duration),
        lease_ms: millis(lease),
        ttl_ms: millis(args.ttl.0),
        seed,
        statuses: check::statuses(&history),
        verdict,
        resources: Resources { samples, watched },
        options: Some(args.into()),
        provenance: Provenance::now(),
    };
    if let Some(path) = &args.history {
        write_json(path, &history, "history")?;
    }
    if let Some(path) = &args.json {
        write_json(path, &report, "report")?;
    }
    let keep = match args.keep {
        Keep::Always => true,
        Keep::OnFailure => !report.passed(),
        Keep::Never => false,
    };
    if keep {
        let kept = dir.keep();
        eprintln!(
            "the run's directory (gateway and server logs, store files): {}",
            kept.display()
        );
    }
    Ok(report)
}

/// The `idem serve` flags of a gateway: its upstream and store, the run's modes, the fencing
/// header the upstream checks, and an upstream timeout well above the slow upstream's latency
/// (a timeout would be an ambiguous outcome of its own, not the fault under test). A call into
/// a black-holed link ends when the partition heals (3 leases at most, under the upstream
/// timeout with the default lease), or at the timeout: the upstream's, or the store's (a third
/// of the lease, so that a renewal cut off is tried again within the lease). In wait mode,
/// a request waits half the callers' attempt timeout, so that its 409 reaches the caller.
fn serve_args(
    args: &RunArgs,
    upstream: &str,
    store: &str,
    slow_latency: Duration,
) -> Vec<OsString> {
    let upstream_timeout = (slow_latency * 4).max(Duration::from_secs(10));
    let mut serve_args: Vec<OsString> = [
        "--upstream",
        upstream,
        "--store",
        store,
        "--lease",
        &args.lease.to_string(),
        "--ttl",
        &args.ttl.to_string(),
        "--ambiguous",
        &args.ambiguous.to_string(),
        "--in-flight",
        &args.in_flight.to_string(),
        "--fencing-header",
        FENCING_HEADER,
        "--upstream-timeout",
        &HumanDuration(upstream_timeout).to_string(),
        "--shutdown-timeout",
        "5s",
        "--log-level",
        "warn",
    ]
    .map(OsString::from)
    .into();
    if args.in_flight == InFlight::Wait {
        let wait = HumanDuration(args.attempt_timeout.0 / 2).to_string();
        serve_args.extend(["--wait-timeout".into(), wait.into()]);
    }
    serve_args
}

fn write_json(path: &Path, value: &impl serde::Serialize, what: &'static str) -> Result<(), Error> {
    let json = serde_json::to_vec_pretty(value).map_err(|source| Error::Json { what, source })?;
    std::fs::write(path, json).map_err(Error::io(format!("write {}", path.display())))
}

//! What a run uses: each gateway's resident memory and open file descriptors, and the store's
//! size on disk, sampled all along; and, for a soak, whether the watched gateway's memory or
//! descriptors grew.
//!
//! A soak watches the gateway it never kills over the last two thirds of the run (the first
//! third fills caches, pools and the store up to the TTL). Memory is judged by the slope of a
//! least-squares line through its samples: the run fails if that line rises by more than a tenth
//! of the mean or 8 MiB, whichever is more, across the window. Descriptors are judged by their
//! highest count: the run fails if the last third's exceeds the window's first third's by more
//! than 16 (connections come and go with the faults; a leak keeps climbing).
//!
//! # Examples
//!
//! ```
//! use idem_chaos::{GatewayId, resources::{ProcessSample, Sample, trend}};
//!
//! let sample = |minute: u64, rss_mib: u64| Sample {
//!     at_ms: minute * 60_000,
//!     gateways: vec![ProcessSample {
//!         gateway: GatewayId(0),
//!         pid: 42,
//!         rss_bytes: rss_mib << 20,
//!         fds: 30,
//!     }],
//!     store_bytes: 1 << 20,
//! };
//! // Flat at 40 MiB, then one step to 41 MiB: no leak.
//! let samples: Vec<Sample> = (0..60).map(|m| sample(m, if m < 50 { 40 } else { 41 })).collect();
//! let flat = trend(&samples, GatewayId(0), 3_600_000).expect("samples in the window");
//! assert!(flat.grew().is_none());
//! // 1 MiB more every minute: a leak.
//! let samples: Vec<Sample> = (0..60).map(|m| sample(m, 40 + m)).collect();
//! let leak = trend(&samples, GatewayId(0), 3_600_000).expect("samples in the window");
//! assert_eq!(leak.rss_slope_bytes_per_hour, 60 << 20);
//! assert!(leak.grew().is_some());
//! ```

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{Failure, GatewayId, history::Recorder};

/// The most a soak's watched gateway may grow across the window: this share of its mean…
const GROWTH_SHARE: f64 = 0.1;
/// …or this many bytes, whichever is more.
const GROWTH_FLOOR: i64 = 8 << 20;
/// How many more descriptors the last third of the window may reach than its first.
const DESCRIPTOR_SLACK: u64 = 16;

/// What a run sampled, and a soak's trend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Every sample, in time order.
    pub samples: Vec<Sample>,
    /// A soak's watched gateway over the last two thirds of the run.
    pub watched: Option<Trend>,
}

impl Resources {
    /// The lines of the run's table: the highest memory, descriptors and store size, and a
    /// soak's trend.
    pub(crate) fn describe(&self, out: &mut String) {
        use std::fmt::Write as _;
        let processes = || self.samples.iter().flat_map(|s| &s.gateways);
        let (Some(rss), Some(fds)) = (
            processes().map(|p| p.rss_bytes).max(),
            processes().map(|p| p.fds).max(),
        ) else {
            return;
        };
        let store = self
            .samples
            .iter()
            .map(|s| s.store_bytes)
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "resources ({} samples): gateway memory at most {:.1} MiB, at most {fds} open \
             descriptors; store at most {:.1} MiB on disk",
            self.samples.len(),
            mib(rss),
            mib(store),
        );
        if let Some(trend) = &self.watched {
            let _ = writeln!(
                out,
                "soak, {} from {} to {} s ({} samples): memory {:.1} MiB on average, slope {:+.2} \
                 MiB/h ({:+.2} MiB across the window); descriptors at most {} then {}",
                trend.gateway,
                trend.from_ms / 1000,
                trend.to_ms / 1000,
                trend.samples,
                mib(trend.rss_mean_bytes),
                trend.rss_slope_bytes_per_hour as f64 / f64::from(1 << 20),
                trend.rss_growth_bytes as f64 / f64::from(1 << 20),
                trend.fds_first_max,
                trend.fds_last_max,
            );
        }
        out.push('\n');
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// One sampling of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the start of the run.
    pub at_ms: u64,
    /// Each gateway that was up.
    pub gateways: Vec<ProcessSample>,
    /// The store's files: SQLite's database and its write-ahead log, PostgreSQL's databases
    /// (without its write-ahead log), the store's database on MariaDB (without InnoDB's redo
    /// log and system tablespace), Redis's append-only file.
    pub store_bytes: u64,
}

/// One gateway process at one sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    /// Which gateway.
    pub gateway: GatewayId,
    /// Its process (a new one after each kill).
    pub pid: u32,
    /// Resident memory (`VmRSS`).
    pub rss_bytes: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// How the watched gateway's memory and descriptors moved over a soak's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trend {
    /// The gateway.
    pub gateway: GatewayId,
    /// The window, in milliseconds since the start: the last two thirds of the run.
    pub from_ms: u64,
    /// Its end: the last sample.
    pub to_ms: u64,
    /// How many samples of that gateway fell in it.
    pub samples: u64,
    /// Its mean resident memory.
    pub rss_mean_bytes: u64,
    /// Its highest.
    pub rss_max_bytes: u64,
    /// The slope of the least-squares line through its resident memory, in bytes per hour.
    pub rss_slope_bytes_per_hour: i64,
    /// How far that line rose across the window.
    pub rss_growth_bytes: i64,
    /// The most descriptors open in the window's first third.
    pub fds_first_max: u64,
    /// The most descriptors open in its last third.
    pub fds_last_max: u64,
    /// The store's largest size in the window.
    pub store_max_bytes: u64,
}

impl Trend {
    /// What grew past its bound, if anything did.
    pub fn grew(&self) -> Option<Failure> {
        let allowed = GROWTH_FLOOR.max(to_i64(self.rss_mean_bytes as f64 * GROWTH_SHARE));
        if self.rss_growth_bytes > allowed {
            return Some(Failure::MemoryGrew {
                bytes: self.rss_growth_bytes,
            });
        }
        if self.fds_last_max > self.fds_first_max + DESCRIPTOR_SLACK {
            return Some(Failure::DescriptorsGrew {
                from: self.fds_first_max,
                to: self.fds_last_max,
            });
        }
        None
    }
}

/// The trend of `gateway` over the last two thirds of a run of `duration_ms`; `None` without
/// two samples of it there.
pub fn trend(samples: &[Sample], gateway: GatewayId, duration_ms: u64) -> Option<Trend> {
    let from_ms = duration_ms / 3;
    let points: Vec<(u64, ProcessSample)> = samples
        .iter()
        .filter(|sample| sample.at_ms >= from_ms)
        .filter_map(|sample| {
            let process = sample.gateways.iter().find(|p| p.gateway == gateway)?;
            Some((sample.at_ms, *process))
        })
        .collect();
    let (&(first, _), &(to_ms, _)) = (points.first()?, points.last()?);
    if points.len() < 2 || to_ms == first {
        return None;
    }
    let n = points.len() as f64;
    let mean_t = points.iter().map(|(at, _)| *at as f64).sum::<f64>() / n;
    let mean_rss = points.iter().map(|(_, p)| p.rss_bytes as f64).sum::<f64>() / n;
    let (covariance, variance) = points.iter().fold((0.0, 0.0), |(c, v), (at, p)| {
        let dt = *at as f64 - mean_t;
        (c + dt * (p.rss_bytes as f64 - mean_rss), v + dt * dt)
    });
    let slope_per_ms = covariance / variance;
    let third = (to_ms - first) / 3;
    let fds_max = |range: std::ops::RangeInclusive<u64>| {
        points
            .iter()
            .filter(|(at, _)| range.contains(at))
            .map(|(_, p)| p.fds)
            .max()
            .unwrap_or(0)
    };
    Some(Trend {
        gateway,
        from_ms,
        to_ms,
        samples: points.len() as u64,
        rss_mean_bytes: mean_rss as u64,
        rss_max_bytes: points.iter().map(|(_, p)| p.rss_bytes).max().unwrap_or(0),
        rss_slope_bytes_per_hour: to_i64(slope_per_ms * 3_600_000.0),
        rss_growth_bytes: to_i64(slope_per_ms * (to_ms - first) as f64),
        fds_first_max: fds_max(first..=first + third),
        fds_last_max: fds_max(to_ms - third..=to_ms),
        store_max_bytes: samples
            .iter()
            .filter(|sample| sample.at_ms >= from_ms)
            .map(|sample| sample.store_bytes)
            .max()
            .unwrap_or(0),
    })
}

fn to_i64(value: f64) -> i64 {
    // `as` saturates, and a slope is far from the ends of i64.
    value.round() as i64
}

/// Where the samples are read from.
pub(crate) struct Sampler {
    /// Each gateway and its process id while it is up.
    pub(crate) gateways: Vec<(GatewayId, crate::gateway_process::Running)>,
    /// The store's files and directories.
    pub(crate) store_files: Vec<PathBuf>,
    /// The run's clock.
    pub(crate) recorder: Recorder,
}

impl Sampler {
    /// Samples every `every` until `stop`, from the first sample at once.
    pub(crate) async fn run(
        self,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) -> Vec<Sample> {
        let mut samples = Vec::new();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return samples,
                _ = ticks.tick() => samples.push(self.sample().await),
            }
        }
    }

    async fn sample(&self) -> Sample {
        let mut gateways = Vec::new();
        for (gateway, running) in &self.gateways {
            let Some(pid) = running.pid().await else {
                continue;
            };
            // Gone between the two reads: skipped, as a gateway that was down.
            if let (Some(rss_bytes), Some(fds)) = (resident(pid), descriptors(pid)) {
                gateways.push(ProcessSample {
                    gateway: *gateway,
                    pid,
                    rss_bytes,
                    fds,
                });
            }
        }
        let files = self.store_files.clone();
        let store_bytes = tokio::task::spawn_blocking(move || files.iter().map(|f| size(f)).sum())
            .await
            .unwrap_or(0);
        Sample {
            at_ms: u64::try_from(self.recorder.now().as_duration().as_millis()).unwrap_or(u64::MAX),
            gateways,
            store_bytes,
        }
    }
}

/// `VmRSS` of process `pid`, in bytes.
fn resident(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How many file descriptors process `pid` has open.
fn descriptors(pid: u32) -> Option<u64> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(entries.count() as u64)
}

/// The size of a file, or of every file under a directory; 0 if it is gone.
fn size(path: &Path) -> u64 {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !metadata.is_dir() {
        return metadata.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| size(&entry.path()))
                .sum()
        })
        .unwrap_or(0)
}

//! [`Provenance`]: when a run ended, which source built the harness and on which machine it ran,
//! as its report records them, so that anyone reading a committed report can check it.
//!
//! # Examples
//!
//! ```
//! use idem_chaos::provenance::{Date, Provenance};
//!
//! let provenance = Provenance::now();
//! assert_eq!(provenance.harness_version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
//! assert!(provenance.commit == "unknown" || provenance.commit.len() >= 40);
//!
//! // The date is UTC, RFC 3339 to the second.
//! let date: Date = serde_json::from_str(r#""2026-12-02T21:40:05Z""#)?;
//! assert_eq!(date.to_string(), "2026-12-02T21:40:05Z");
//! assert_eq!(date.day(), "2026-12-02");
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::{
    fmt,
    process::Command,
    time::{Duration, SystemTime},
};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where a report comes from. Reports written before these were recorded still parse: what
/// they lack is `None`, or `unknown` for the commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// When the run ended.
    #[serde(default)]
    pub date: Option<Date>,
    /// The git commit of the harness's source, `-dirty` after it when the workspace's crates or
    /// its `Cargo.toml` or `Cargo.lock` had changes; `unknown` without git or outside the
    /// repository the harness was built from.
    #[serde(default = "unknown")]
    pub commit: String,
    /// The machine the run was made on.
    #[serde(default)]
    pub machine: Option<Machine>,
    /// The version of `idem-chaos` that made the run.
    #[serde(default)]
    pub harness_version: Option<String>,
    /// How the harness, and so the gateways, were built.
    #[serde(default)]
    pub build: Option<Build>,
}

/// How the harness was built: its figures (operations, attempts) depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Build {
    /// With debug assertions: cargo's `dev` profile (`cargo build`).
    Debug,
    /// Without: `--release`.
    Release,
}

fn unknown() -> String {
    "unknown".to_owned()
}

impl Provenance {
    /// The provenance of a run ending now, made by this harness on this machine.
    pub fn now() -> Self {
        Self {
            date: Some(Date::now()),
            commit: commit().unwrap_or_else(unknown),
            machine: Some(Machine::this()),
            harness_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            build: Some(if cfg!(debug_assertions) {
                Build::Debug
            } else {
                Build::Release
            }),
        }
    }
}

/// An instant, UTC, to the second; RFC 3339 in JSON (`2026-12-02T21:40:05Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(SystemTime);

impl Date {
    /// Now, to the second.
    pub fn now() -> Self {
        Self::to_the_second(SystemTime::now())
    }

    /// `seconds` after the Unix epoch.
    pub fn from_unix_seconds(seconds: u64) -> Self {
        Self(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
    }

    fn to_the_second(time: SystemTime) -> Self {
        let since = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Self::from_unix_seconds(since.as_secs())
    }

    /// The day, `YYYY-MM-DD`.
    pub fn day(&self) -> String {
        let mut date = self.to_string();
        date.truncate("YYYY-MM-DD".len());
        date
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        humantime::format_rfc3339_seconds(self.0).fmt(f)
    }
}

impl Serialize for Date {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Date {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_rfc3339(&text)
            .map(Self::to_the_second)
            .map_err(serde::de::Error::custom)
    }
}

/// The machine a run was made on, as Linux's `/proc` describes it; `None` for what could not be
/// read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Machine {
    /// The CPU's model name (`model name` in `/proc/cpuinfo`).
    pub cpu: Option<String>,
    /// Logical cores (`processor` entries in `/proc/cpuinfo`).
    pub cores: Option<u32>,
    /// Memory, in bytes (`MemTotal` in `/proc/meminfo`).
    pub memory_bytes: Option<u64>,
    /// The kernel's release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let read = |path| std::fs::read_to_string(path).unwrap_or_default();
        Self::from_proc(
            &read("/proc/cpuinfo"),
            &read("/proc/meminfo"),
            &read("/proc/sys/kernel/osrelease"),
        )
    }

    /// The machine the contents of `/proc/cpuinfo`, `/proc/meminfo` and
    /// `/proc/sys/kernel/osrelease` describe.
    pub fn from_proc(cpuinfo: &str, meminfo: &str, osrelease: &str) -> Self {
        let entries = |text: &str, name: &str| -> Vec<String> {
            text.lines()
                .filter_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    (key.trim() == name).then(|| value.trim().to_owned())
                })
                .collect()
        };
        let cores = entries(cpuinfo, "processor").len();
        let memory_bytes = entries(meminfo, "MemTotal").first().and_then(|value| {
            let kib = value.strip_suffix("kB")?.trim().parse::<u64>().ok()?;
            kib.checked_mul(1024)
        });
        let kernel = osrelease.trim();
        Self {
            cpu: entries(cpuinfo, "model name").into_iter().next(),
            cores: u32::try_from(cores).ok().filter(|&cores| cores > 0),
            memory_bytes,
            kernel: (!kernel.is_empty()).then(|| kernel.to_owned()),
        }
    }
}

/// `AMD EPYC 7B13, 2 logical cores, 7.8 GiB of memory, Linux 6.8.0`, without what is unknown.
impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        parts.extend(self.cpu.clone());
        parts.extend(self.cores.map(|cores| match cores {
            1 => "1 logical core".to_owned(),
            cores => format!("{cores} logical cores"),
        }));
        parts.extend(self.memory_bytes.map(|bytes| {
            let gib = bytes as f64 / f64::from(1u32 << 30);
            format!("{gib:.1} GiB of memory")
        }));
        parts.extend(self.kernel.as_ref().map(|kernel| format!("Linux {kernel}")));
        if parts.is_empty() {
            f.write_str("a machine not described")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The commit checked out in the repository the harness was built from, `-dirty` after it when
/// the source of the harness has changes. Reports written into the repository (`docs/`) do not
/// count: writing one must not mark the next run dirty. `None` without git or outside a
/// repository.
fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        let output = Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "--no-optional-locks"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let hash = git(&["rev-parse", "HEAD"])?;
    let changes = git(&[
        "status",
        "--porcelain",
        "--",
        ":/crates",
        ":/Cargo.toml",
        ":/Cargo.lock",
    ])?;
    Some(if changes.is_empty() {
        hash
    } else {
        format!("{hash}-dirty")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\
                           \nprocessor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n";
    const MEMINFO: &str = "MemTotal:        8130028 kB\nMemFree:          512000 kB\n";

    #[test]
    fn the_machine_is_read_from_proc() {
        let machine = Machine::from_proc(CPUINFO, MEMINFO, "6.8.0-1015-gcp\n");
        assert_eq!(
            machine,
            Machine {
                cpu: Some("AMD EPYC 7B13".to_owned()),
                cores: Some(2),
                memory_bytes: Some(8_130_028 * 1024),
                kernel: Some("6.8.0-1015-gcp".to_owned()),
            }
        );
        assert_eq!(
            machine.to_string(),
            "AMD EPYC 7B13, 2 logical cores, 7.8 GiB of memory, Linux 6.8.0-1015-gcp"
        );
    }

    #[test]
    fn what_proc_does_not_say_is_left_out() {
        let machine = Machine::from_proc("processor\t: 0\n", "", "");
        assert_eq!(
            machine,
            Machine {
                cores: Some(1),
                ..Machine::default()
            }
        );
        assert_eq!(machine.to_string(), "1 logical core");
        assert_eq!(Machine::default().to_string(), "a machine not described");
    }

    #[test]
    fn the_date_is_rfc_3339_utc_to_the_second() {
        let date = Date::from_unix_seconds(1_796_247_605);
        let json = serde_json::to_string(&date).unwrap();
        assert_eq!(json, r#""2026-12-02T21:40:05Z""#);
        assert_eq!(serde_json::from_str::<Date>(&json).unwrap(), date);
        assert_eq!(
            serde_json::from_str::<Date>(r#""2026-12-02T21:40:05.250Z""#).unwrap(),
            date
        );
        assert!(serde_json::from_str::<Date>(r#""yesterday""#).is_err());
    }

    #[test]
    fn a_report_from_before_provenance_was_recorded_still_parses() {
        let provenance: Provenance = serde_json::from_str("{}").unwrap();
        assert_eq!(
            provenance,
            Provenance {
                date: None,
                commit: "unknown".to_owned(),
                machine: None,
                harness_version: None,
                build: None,
            }
        );
    }
}

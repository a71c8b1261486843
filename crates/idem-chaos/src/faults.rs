//! The faults a run can inject, and their [`Schedule`]: when each happens, drawn from the
//! run's seed.
//!
//! Each kind of fault has its own stream of random numbers, so turning one kind off leaves the
//! times of the others as they were.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use idem_chaos::{FaultKind, Schedule, faults::{Action, Plan}};
//!
//! let plan = Plan {
//!     duration: Duration::from_secs(30),
//!     faults: vec![FaultKind::Kills],
//!     gateways: 2,
//!     kill_every: Duration::from_secs(3),
//!     pause_every: Duration::from_secs(5),
//!     lease: Duration::from_secs(2),
//!     store_restart_every: Duration::from_secs(7),
//!     slow_every: Duration::from_secs(10),
//!     errors_every: Duration::from_secs(10),
//!     window: Duration::from_secs(2),
//!     clock_step_every: Duration::from_secs(6),
//!     spared: None,
//!     partition_every: Duration::from_secs(5),
//!     store_link: true,
//! };
//! let schedule = Schedule::new(&plan, 42);
//! assert_eq!(schedule, Schedule::new(&plan, 42));
//! assert!(schedule.faults().len() >= 6);
//! assert!(schedule.faults().iter().all(|f| matches!(f.action, Action::KillGateway(_))));
//! ```

use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::history::{GatewayId, Link, PartitionMode};

/// A kind of fault, as `--faults` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The proxy in front of the gateways drops a share of their answers (closes the caller's
    /// connection, or holds it until the caller times out): the caller's attempt fails after the
    /// gateway did its work.
    Drops,
    /// A gateway, chosen at random, is SIGKILLed and started again on the same ports.
    Kills,
    /// A gateway, chosen at random, is stopped (SIGSTOP) for 1.5 to 3 leases while it holds
    /// keys, then continued (SIGCONT): it loses its keys to the other gateway meanwhile, and its
    /// requests reach the upstream late.
    Pauses,
    /// The store restarts: a server crashes and starts again; for SQLite, every gateway is
    /// killed and started again on the same file; for a Redis Cluster, a master is killed and
    /// its replica takes over.
    StoreRestarts,
    /// For a while, the upstream answers later than the callers' attempt timeout.
    Slow,
    /// For a while, the upstream answers 503 without executing anything.
    Errors,
    /// Two gateways share the store and the proxy spreads attempts over both (without it, one
    /// gateway).
    TwoGateways,
    /// A gateway's wall clock steps forward or back, by half a lease to three leases, or is set
    /// right again, as an NTP step would. Only the SQLite store reads the gateway's clock; the
    /// PostgreSQL, MySQL and Redis stores read their server's, so on them nothing is stepped.
    ClockSteps,
    /// For 0.3 to 3 leases, a gateway is cut from its store (PostgreSQL, MariaDB, Redis) or from
    /// its upstream: the link's traffic is black-holed one way or both, or every connection is
    /// reset.
    Partitions,
}

/// What the schedule is drawn from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// How long faults are injected.
    pub duration: Duration,
    /// The kinds to inject.
    pub faults: Vec<FaultKind>,
    /// How many gateways there are to kill.
    pub gateways: u8,
    /// The mean time between kills.
    pub kill_every: Duration,
    /// The mean time from the end of one pause to the start of the next.
    pub pause_every: Duration,
    /// The gateways' lease: a pause lasts from 1.5 to 3 times it.
    pub lease: Duration,
    /// The mean time between store restarts.
    pub store_restart_every: Duration,
    /// The mean time between slow windows.
    pub slow_every: Duration,
    /// The mean time between 503 windows.
    pub errors_every: Duration,
    /// The mean length of a slow or 503 window.
    pub window: Duration,
    /// The mean time between two clock steps.
    pub clock_step_every: Duration,
    /// A gateway that is never killed (a soak watches its memory): kills drawn for it go to
    /// the other gateway.
    pub spared: Option<GatewayId>,
    /// The mean time from the end of one partition to the start of the next (each lasts from
    /// 0.3 to 3 leases).
    pub partition_every: Duration,
    /// Whether the gateways reach the store over the network (PostgreSQL, MariaDB, Redis): only
    /// then are they cut from it.
    pub store_link: bool,
}

/// One step of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL this gateway, then start it again.
    KillGateway(GatewayId),
    /// SIGSTOP this gateway, and SIGCONT it this long after.
    PauseGateway(GatewayId, Duration),
    /// Crash the store and start it again.
    RestartStore,
    /// The upstream is slow for this long.
    Slow(Duration),
    /// The upstream answers 503 for this long.
    Errors(Duration),
    /// This gateway's clock is set this many milliseconds ahead of true time (behind when
    /// negative; 0 sets it right).
    StepClock(GatewayId, i64),
    /// Cut a gateway's link for a while.
    Partition {
        /// The gateway.
        gateway: GatewayId,
        /// Its link.
        link: Link,
        /// How.
        mode: PartitionMode,
        /// For how long.
        length: Duration,
    },
}

impl Action {
    /// The kind of fault the action is drawn for.
    pub fn kind(self) -> FaultKind {
        match self {
            Self::KillGateway(_) => FaultKind::Kills,
            Self::PauseGateway(..) => FaultKind::Pauses,
            Self::RestartStore => FaultKind::StoreRestarts,
            Self::Slow(_) => FaultKind::Slow,
            Self::Errors(_) => FaultKind::Errors,
            Self::Partition { .. } => FaultKind::Partitions,
            Self::StepClock(..) => FaultKind::ClockSteps,
        }
    }

    /// Whether the action kills or restarts servers: those take turns. Pauses, partitions and
    /// the upstream's windows run beside them.
    pub fn is_on_servers(self) -> bool {
        matches!(self, Self::KillGateway(_) | Self::RestartStore)
    }
}

/// An action and when to take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// Time since the start of the run.
    pub at: Duration,
    /// What to do.
    pub action: Action,
}

/// Every fault of a run, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    faults: Vec<Scheduled>,
}

impl Schedule {
    /// The schedule of `plan` for `seed`: the same plan and seed give the same schedule.
    pub fn new(plan: &Plan, seed: u64) -> Self {
        let mut faults = Vec::new();
        let wants = |kind| plan.faults.contains(&kind);
        // One stream per kind: its own constant, mixed into the seed.
        let stream =
            |n: u64| fastrand::Rng::with_seed(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if wants(FaultKind::Kills) {
            let mut rng = stream(1);
            let mut at = Duration::ZERO;
            loop {
                at += around(&mut rng, plan.kill_every);
                if at >= plan.duration {
                    break;
                }
                let gateway = plan.spare(GatewayId(rng.u8(..plan.gateways.max(1))));
                faults.push(Scheduled {
                    at,
                    action: Action::KillGateway(gateway),
                });
            }
        }
        if wants(FaultKind::Pauses) {
            let mut rng = stream(5);
            let mut at = Duration::ZERO;
            loop {
                at += around(&mut rng, plan.pause_every);
                if at >= plan.duration {
                    break;
                }
                let gateway = GatewayId(rng.u8(..plan.gateways.max(1)));
                let length = pause_length(&mut rng, plan.lease);
                faults.push(Scheduled {
                    at,
                    action: Action::PauseGateway(gateway, length),
                });
                // One pause at a time: the next gap starts when this one ends (the last one may
                // end after the duration).
                at += length;
            }
        }
        if wants(FaultKind::StoreRestarts) {
            let mut rng = stream(2);
            let mut at = Duration::ZERO;
            loop {
                at += around(&mut rng, plan.store_restart_every);
                if at >= plan.duration {
                    break;
                }
                faults.push(Scheduled {
                    at,
                    action: Action::RestartStore,
                });
            }
        }
        if wants(FaultKind::Slow) {
            windows(
                &mut faults,
                &mut stream(3),
                plan.slow_every,
                plan,
                Action::Slow,
            );
        }
        if wants(FaultKind::Errors) {
            windows(
                &mut faults,
                &mut stream(4),
                plan.errors_every,
                plan,
                Action::Errors,
            );
        }
        if wants(FaultKind::Partitions) {
            let links: &[Link] = if plan.store_link {
                &[Link::Store, Link::Upstream]
            } else {
                &[Link::Upstream]
            };
            let mut rng = stream(6);
            let mut at = Duration::ZERO;
            loop {
                at += around(&mut rng, plan.partition_every);
                if at >= plan.duration {
                    break;
                }
                let gateway = GatewayId(rng.u8(..plan.gateways.max(1)));
                let link = links[rng.usize(..links.len())];
                let mode = PartitionMode::ALL[rng.usize(..PartitionMode::ALL.len())];
                let length = partition_length(&mut rng, plan.lease);
                faults.push(Scheduled {
                    at,
                    action: Action::Partition {
                        gateway,
                        link,
                        mode,
                        length,
                    },
                });
                // One partition at a time, as pauses.
                at += length;
            }
        }
        if wants(FaultKind::ClockSteps) {
            let mut rng = stream(9);
            let mut at = Duration::ZERO;
            loop {
                at += around(&mut rng, plan.clock_step_every);
                if at >= plan.duration {
                    break;
                }
                let gateway = GatewayId(rng.u8(..plan.gateways.max(1)));
                faults.push(Scheduled {
                    at,
                    action: Action::StepClock(gateway, clock_offset(&mut rng, plan.lease)),
                });
            }
        }
        faults.sort_by_key(|fault| fault.at);
        Self { faults }
    }

    /// The actions, in time order.
    pub fn faults(&self) -> &[Scheduled] {
        &self.faults
    }
}

/// Windows of the upstream, `every` apart on average, each `plan.window` long on average, one
/// after the other within the duration.
fn windows(
    faults: &mut Vec<Scheduled>,
    rng: &mut fastrand::Rng,
    every: Duration,
    plan: &Plan,
    action: fn(Duration) -> Action,
) {
    let mut at = Duration::ZERO;
    loop {
        at += around(rng, every);
        if at >= plan.duration {
            return;
        }
        let length = around(rng, plan.window).min(plan.duration - at);
        faults.push(Scheduled {
            at,
            action: action(length),
        });
        at += length;
    }
}

impl Plan {
    /// `gateway`, or the other one if `gateway` is spared.
    fn spare(&self, gateway: GatewayId) -> GatewayId {
        if self.spared == Some(gateway) && self.gateways > 1 {
            GatewayId((gateway.0 + 1) % self.gateways)
        } else {
            gateway
        }
    }
}

/// The furthest a stepped clock is from true time: three leases.
pub fn max_clock_offset(lease: Duration) -> Duration {
    lease * 3
}

/// A clock's new offset from true time, in milliseconds: one step in three sets it right (0);
/// the others put it from half a lease to three leases ahead or behind, mostly further than the
/// lease, so that the gateways disagree on whether a lease has run out.
fn clock_offset(rng: &mut fastrand::Rng, lease: Duration) -> i64 {
    if rng.u8(..3) == 0 {
        return 0;
    }
    let furthest = i64::try_from(max_clock_offset(lease).as_millis())
        .unwrap_or(i64::MAX)
        .max(2);
    let offset = rng.i64(furthest / 6..=furthest);
    if rng.bool() { offset } else { -offset }
}

/// A pause's length, drawn uniformly from 1.5 to 3 leases: longer than the lease, so that
/// the gateway's keys are free for the other gateway before it continues.
fn pause_length(rng: &mut fastrand::Rng, lease: Duration) -> Duration {
    let lease = u64::try_from(lease.as_millis())
        .unwrap_or(u64::MAX / 3)
        .max(1);
    Duration::from_millis(rng.u64(lease * 3 / 2..=lease * 3))
}

/// A partition's length, drawn uniformly from 0.3 to 3 leases: some end before the gateway's
/// keys are free for the other gateway, some after.
fn partition_length(rng: &mut fastrand::Rng, lease: Duration) -> Duration {
    let lease = u64::try_from(lease.as_millis())
        .unwrap_or(u64::MAX / 3)
        .max(1);
    Duration::from_millis(rng.u64((lease * 3 / 10).max(1)..=lease * 3))
}

/// A duration drawn uniformly from half to one and a half times `mean` (at least 1 ms).
fn around(rng: &mut fastrand::Rng, mean: Duration) -> Duration {
    let mean = u64::try_from(mean.as_millis()).unwrap_or(u64::MAX).max(1);
    let low = (mean / 2).max(1);
    Duration::from_millis(rng.u64(low..=low.saturating_add(mean)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(faults: Vec<FaultKind>) -> Plan {
        Plan {
            duration: Duration::from_secs(60),
            faults,
            gateways: 2,
            kill_every: Duration::from_secs(3),
            pause_every: Duration::from_secs(5),
            lease: Duration::from_secs(2),
            store_restart_every: Duration::from_secs(7),
            slow_every: Duration::from_secs(10),
            errors_every: Duration::from_secs(10),
            window: Duration::from_secs(2),
            clock_step_every: Duration::from_secs(6),
            spared: None,
            partition_every: Duration::from_secs(5),
            store_link: true,
        }
    }

    fn all() -> Vec<FaultKind> {
        vec![
            FaultKind::Drops,
            FaultKind::Kills,
            FaultKind::Pauses,
            FaultKind::StoreRestarts,
            FaultKind::Slow,
            FaultKind::Errors,
            FaultKind::TwoGateways,
            FaultKind::ClockSteps,
            FaultKind::Partitions,
        ]
    }

    #[test]
    fn a_seed_gives_one_schedule_and_another_seed_another() {
        let plan = plan(all());
        assert_eq!(Schedule::new(&plan, 7), Schedule::new(&plan, 7));
        assert_ne!(Schedule::new(&plan, 7), Schedule::new(&plan, 8));
    }

    #[test]
    fn faults_are_in_time_order_within_the_duration() {
        let schedule = Schedule::new(&plan(all()), 1);
        let times: Vec<Duration> = schedule.faults().iter().map(|f| f.at).collect();
        assert!(times.is_sorted());
        assert!(times.iter().all(|at| *at <= Duration::from_secs(60)));
    }

    #[test]
    fn gaps_are_between_half_and_one_and_a_half_means() {
        let schedule = Schedule::new(&plan(vec![FaultKind::Kills]), 3);
        let mut last = Duration::ZERO;
        for fault in schedule.faults() {
            let gap = fault.at - last;
            assert!(
                (Duration::from_millis(1500)..=Duration::from_millis(4500)).contains(&gap),
                "{gap:?}"
            );
            last = fault.at;
        }
        // 60 s at one kill every 1.5 to 4.5 s.
        assert!((13..=40).contains(&schedule.faults().len()));
    }

    #[test]
    fn kills_pick_both_gateways() {
        let schedule = Schedule::new(&plan(vec![FaultKind::Kills]), 5);
        for gateway in [GatewayId(0), GatewayId(1)] {
            assert!(
                schedule
                    .faults()
                    .iter()
                    .any(|f| f.action == Action::KillGateway(gateway))
            );
        }
    }

    #[test]
    fn windows_do_not_overlap_and_end_within_the_duration() {
        let schedule = Schedule::new(&plan(vec![FaultKind::Slow]), 9);
        assert!(schedule.faults().len() >= 3);
        let mut free_from = Duration::ZERO;
        for fault in schedule.faults() {
            let Action::Slow(length) = fault.action else {
                panic!("{fault:?}");
            };
            assert!(fault.at >= free_from, "{fault:?}");
            assert!(length <= Duration::from_secs(3), "{fault:?}");
            free_from = fault.at + length;
        }
        assert!(free_from <= Duration::from_secs(60));
    }

    fn pauses(schedule: &Schedule) -> Vec<(Duration, GatewayId, Duration)> {
        schedule
            .faults()
            .iter()
            .filter_map(|f| match f.action {
                Action::PauseGateway(gateway, length) => Some((f.at, gateway, length)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn pauses_come_one_after_the_other_and_last_one_and_a_half_to_three_leases() {
        let pauses = pauses(&Schedule::new(&plan(vec![FaultKind::Pauses]), 13));
        // 60 s at one pause every 2.5 to 7.5 s after the end of the last, 3 to 6 s long.
        assert!((5..=12).contains(&pauses.len()), "{pauses:?}");
        let mut free_from = Duration::ZERO;
        for &(at, _, length) in &pauses {
            let gap = at - free_from;
            assert!(
                (Duration::from_millis(2500)..=Duration::from_millis(7500)).contains(&gap),
                "{pauses:?}"
            );
            assert!(
                (Duration::from_secs(3)..=Duration::from_secs(6)).contains(&length),
                "{pauses:?}"
            );
            free_from = at + length;
        }
        assert!(
            pauses
                .last()
                .is_some_and(|&(at, ..)| at < Duration::from_secs(60))
        );
        for gateway in [GatewayId(0), GatewayId(1)] {
            assert!(pauses.iter().any(|&(_, g, _)| g == gateway), "{pauses:?}");
        }
    }

    fn partitions(
        schedule: &Schedule,
    ) -> Vec<(Duration, GatewayId, Link, PartitionMode, Duration)> {
        schedule
            .faults()
            .iter()
            .filter_map(|f| match f.action {
                Action::Partition {
                    gateway,
                    link,
                    mode,
                    length,
                } => Some((f.at, gateway, link, mode, length)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn partitions_come_one_after_the_other_on_every_link_in_every_mode() {
        let partitions = partitions(&Schedule::new(&plan(vec![FaultKind::Partitions]), 19));
        // 60 s at one partition every 2.5 to 7.5 s after the end of the last, 0.6 to 6 s long.
        assert!((6..=19).contains(&partitions.len()), "{partitions:?}");
        let mut free_from = Duration::ZERO;
        let (mut shorter, mut longer) = (false, false);
        for &(at, _, _, _, length) in &partitions {
            let gap = at - free_from;
            assert!(
                (Duration::from_millis(2500)..=Duration::from_millis(7500)).contains(&gap),
                "{partitions:?}"
            );
            assert!(
                (Duration::from_millis(600)..=Duration::from_secs(6)).contains(&length),
                "{partitions:?}"
            );
            shorter |= length < Duration::from_secs(2);
            longer |= length > Duration::from_secs(2);
            free_from = at + length;
        }
        // Some end within the lease, some after it.
        assert!(shorter && longer, "{partitions:?}");
        for gateway in [GatewayId(0), GatewayId(1)] {
            assert!(partitions.iter().any(|p| p.1 == gateway), "{partitions:?}");
        }
        for link in [Link::Store, Link::Upstream] {
            assert!(partitions.iter().any(|p| p.2 == link), "{partitions:?}");
        }
        for mode in PartitionMode::ALL {
            assert!(partitions.iter().any(|p| p.3 == mode), "{partitions:?}");
        }
    }

    #[test]
    fn without_a_store_link_only_upstreams_are_cut() {
        let plan = Plan {
            store_link: false,
            ..plan(vec![FaultKind::Partitions])
        };
        let partitions = partitions(&Schedule::new(&plan, 19));
        assert!(!partitions.is_empty());
        assert!(
            partitions.iter().all(|p| p.2 == Link::Upstream),
            "{partitions:?}"
        );
    }

    fn clock_steps(schedule: &Schedule) -> Vec<(GatewayId, i64)> {
        schedule
            .faults()
            .iter()
            .filter_map(|f| match f.action {
                Action::StepClock(gateway, offset) => Some((gateway, offset)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn clock_steps_go_both_ways_on_both_gateways_within_three_leases() {
        let steps = clock_steps(&Schedule::new(&plan(vec![FaultKind::ClockSteps]), 19));
        // 60 s at one step every 3 to 9 s.
        assert!((6..=20).contains(&steps.len()), "{steps:?}");
        assert!(steps.iter().any(|&(_, offset)| offset == 0), "{steps:?}");
        assert!(steps.iter().any(|&(_, offset)| offset > 0), "{steps:?}");
        assert!(steps.iter().any(|&(_, offset)| offset < 0), "{steps:?}");
        for &(_, offset) in &steps {
            assert!(
                offset == 0 || (1000..=6000).contains(&offset.abs()),
                "{steps:?}"
            );
        }
        for gateway in [GatewayId(0), GatewayId(1)] {
            assert!(steps.iter().any(|&(g, _)| g == gateway), "{steps:?}");
        }
    }

    #[test]
    fn a_spared_gateway_is_never_killed_and_the_kills_go_to_the_other() {
        let mut spared = plan(vec![FaultKind::Kills]);
        spared.spared = Some(GatewayId(0));
        let all_kills = Schedule::new(&plan(vec![FaultKind::Kills]), 23);
        let schedule = Schedule::new(&spared, 23);
        assert_eq!(schedule.faults().len(), all_kills.faults().len());
        assert!(
            schedule
                .faults()
                .iter()
                .all(|f| f.action == Action::KillGateway(GatewayId(1)))
        );
    }

    #[test]
    fn each_kind_has_a_stream_of_its_own() {
        let of = |schedule: &Schedule, kind: FaultKind, wanted: bool| -> Vec<Scheduled> {
            schedule
                .faults()
                .iter()
                .copied()
                .filter(|f| (f.action.kind() == kind) == wanted)
                .collect()
        };
        let with_all = Schedule::new(&plan(all()), 17);
        // In time order, all kinds together.
        let times: Vec<Duration> = with_all.faults().iter().map(|f| f.at).collect();
        assert!(times.is_sorted());
        for kind in all() {
            if matches!(kind, FaultKind::Drops | FaultKind::TwoGateways) {
                continue; // no scheduled actions
            }
            let without: Vec<FaultKind> = all().into_iter().filter(|k| *k != kind).collect();
            let alone = Schedule::new(&plan(vec![kind]), 17);
            assert!(!of(&with_all, kind, true).is_empty(), "{kind:?}");
            // The kind keeps its times with or without the others, and the others theirs with
            // or without it.
            assert_eq!(of(&with_all, kind, true), alone.faults(), "{kind:?}");
            assert_eq!(
                of(&with_all, kind, false),
                Schedule::new(&plan(without), 17).faults(),
                "{kind:?}"
            );
        }
    }
}

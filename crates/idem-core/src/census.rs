//! Counting a store's records without slowing its requests: the [`Pace`] of a census, and the
//! board through which the processes that share a store take one census for all of them
//! ([`CensusClaim`], [`CensusTurn`], [`Posted`]).
//!
//! A census may read every record. Each store reads them in steps, each step a bounded read
//! (a few thousand rows, or one `SCAN` step), and after each step rests as [`Pace`] says, so
//! that counting takes a bounded share of the store's time however many records it holds. And
//! since a fleet of gateways shares one store, one of them counts at a time: each asks the
//! store's board for its turn ([`Store::claim_census`](crate::Store::claim_census)); the one
//! given it counts and posts the census
//! ([`Store::post_census`](crate::Store::post_census)), which every other then reads from the
//! board.

use std::{future::Future, time::Duration};

use crate::{Census, StoreError, Timestamp};

/// The share of the store's time a census may take while it counts: after a step that took
/// `t`, the census rests `t × (1 − share) / share` before the next.
///
/// The time of a step is measured from the caller, so it includes the round trip: a pace keeps
/// the server's time spent counting at or below its share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    share: f64,
}

impl Pace {
    /// Counting takes at most 5% of the store's time: a step of 5 ms is followed by a rest of
    /// 95 ms.
    pub const DEFAULT: Pace = Pace { share: 0.05 };

    /// No rest between steps: for tests, and for a store nothing else is using.
    pub const UNPACED: Pace = Pace { share: 1.0 };

    /// The pace at which counting takes `share` of the store's time, from 0.001 (0.1%) to 1
    /// (no rest); other values are clamped to that range.
    #[must_use]
    pub fn share(share: f64) -> Self {
        Pace {
            share: if share.is_nan() {
                1.0
            } else {
                share.clamp(0.001, 1.0)
            },
        }
    }

    /// The share of the store's time the census takes.
    #[must_use]
    pub fn of_time(self) -> f64 {
        self.share
    }

    /// How long to rest after a step that took `step`.
    #[must_use]
    pub fn rest_after(self, step: Duration) -> Duration {
        step.mul_f64((1.0 - self.share) / self.share)
    }

    /// Rests after a step that took `step`: not at all when the rest would be shorter than a
    /// millisecond, the timer's resolution (a step of microseconds costs nothing worth a
    /// rest).
    pub async fn rest(self, step: Duration) {
        let rest = self.rest_after(step);
        if rest >= Duration::from_millis(1) {
            tokio::time::sleep(rest).await;
        }
    }
}

impl Pace {
    /// A census taken in steps at this pace: `step(from)` counts one bounded step from
    /// position `from` and answers its census and where the next step starts (`None` after the
    /// last); the steps' censuses are added up, with a rest after each.
    ///
    /// # Errors
    ///
    /// The first step's error; the census stops there.
    pub async fn count<P, F, Fut>(self, mut from: P, mut step: F) -> Result<Census, StoreError>
    where
        F: FnMut(P) -> Fut,
        Fut: Future<Output = Result<(Census, Option<P>), StoreError>>,
    {
        let mut census = Census::default();
        loop {
            let started = std::time::Instant::now();
            let (counted, next) = step(from).await?;
            census.merge(counted);
            let Some(next) = next else {
                return Ok(census);
            };
            from = next;
            self.rest(started.elapsed()).await;
        }
    }
}

impl Default for Pace {
    fn default() -> Self {
        Pace::DEFAULT
    }
}

/// A process's claim on the next census: who it is, and how long the claim holds unless it is
/// claimed again by the same claimant (a claim is renewed by claiming again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CensusClaim {
    /// The claiming process: a random number drawn when it starts, the same for every claim it
    /// makes.
    pub claimant: u64,
    /// How long the claim holds, by the store's clock: a claimant that stops (crashes, or loses
    /// the store) without posting leaves the census to another once this has passed.
    pub hold: Duration,
}

/// A census posted on a store's board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// The counts.
    pub census: Census,
    /// When it was posted, by the store's clock.
    pub at: Timestamp,
    /// When the next census is due, by the store's clock.
    pub next: Timestamp,
}

/// The answer to a [`CensusClaim`]: whether the claimant counts now, and the census last posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CensusTurn {
    /// The claimant counts now: it holds the claim for [`CensusClaim::hold`] (renewing it by
    /// claiming again while it counts), then posts what it counted. A store no other process
    /// shares always answers this.
    Count {
        /// The census last posted, if any.
        last: Option<Posted>,
    },
    /// Another claimant counts, or the last census is not yet due: read `last`, and claim again
    /// after `retry_after`.
    Wait {
        /// The census last posted, if any.
        last: Option<Posted>,
        /// How long until the next census is due, or until the other claimant's claim runs
        /// out, by the store's clock.
        retry_after: Duration,
    },
}

impl CensusTurn {
    /// The census last posted, if any.
    #[must_use]
    pub fn last(&self) -> Option<Posted> {
        match *self {
            CensusTurn::Count { last } | CensusTurn::Wait { last, .. } => last,
        }
    }
}

/// A census board held in memory: what a store keeps, and how it decides, whatever it keeps it
/// in. [`MemoryStore`](crate::MemoryStore) keeps one; the server stores do the same steps in one
/// statement or script, on the server's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Board {
    /// The census last posted.
    pub posted: Option<Posted>,
    /// The current claim: its claimant, and until when it holds.
    pub claim: Option<(u64, Timestamp)>,
}

impl Board {
    /// Answers `claim` at `now`, taking or renewing the claim when it is `claim`'s turn: the
    /// last census is due (or there is none), and no other claimant's claim holds.
    pub fn claim(&mut self, claim: CensusClaim, now: Timestamp) -> CensusTurn {
        let last = self.posted;
        if let Some((claimant, until)) = self.claim
            && claimant != claim.claimant
            && now < until
        {
            return CensusTurn::Wait {
                last,
                retry_after: until.saturating_since(now),
            };
        }
        let renewing = self
            .claim
            .is_some_and(|(claimant, _)| claimant == claim.claimant);
        if !renewing && let Some(posted) = last.filter(|posted| now < posted.next) {
            return CensusTurn::Wait {
                last,
                retry_after: posted.next.saturating_since(now),
            };
        }
        self.claim = Some((claim.claimant, now + claim.hold));
        CensusTurn::Count { last }
    }

    /// Posts `census` for `claimant` at `now`, the next due after `rest`, if `claimant` holds
    /// the claim (even one that has run out, as long as no other claimant took it): `false`,
    /// and nothing posted, otherwise.
    pub fn post(&mut self, claimant: u64, census: Census, rest: Duration, now: Timestamp) -> bool {
        if self.claim.is_none_or(|(holder, _)| holder != claimant) {
            return false;
        }
        self.claim = None;
        self.posted = Some(Posted {
            census,
            at: now,
            next: now + rest,
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(60);

    fn claim(claimant: u64) -> CensusClaim {
        CensusClaim {
            claimant,
            hold: HOLD,
        }
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_millis(secs * 1000)
    }

    #[test]
    fn a_pace_rests_for_the_rest_of_its_share() {
        assert_eq!(
            Pace::DEFAULT.rest_after(Duration::from_millis(5)),
            Duration::from_millis(95)
        );
        assert_eq!(
            Pace::share(0.25).rest_after(Duration::from_millis(10)),
            Duration::from_millis(30)
        );
        assert_eq!(
            Pace::UNPACED.rest_after(Duration::from_secs(1)),
            Duration::ZERO
        );
        assert_eq!(Pace::share(0.0).of_time(), 0.001);
        assert_eq!(Pace::share(7.0).of_time(), 1.0);
        assert_eq!(Pace::share(f64::NAN).of_time(), 1.0);
    }

    #[test]
    fn one_claimant_counts_at_a_time_and_a_stale_one_cannot_post() {
        let mut board = Board::default();
        assert_eq!(
            board.claim(claim(1), at(0)),
            CensusTurn::Count { last: None }
        );
        assert_eq!(
            board.claim(claim(2), at(1)),
            CensusTurn::Wait {
                last: None,
                retry_after: Duration::from_secs(59)
            }
        );
        // The holder renews its claim.
        assert_eq!(
            board.claim(claim(1), at(30)),
            CensusTurn::Count { last: None }
        );
        assert_eq!(
            board.claim(claim(2), at(61)),
            CensusTurn::Wait {
                last: None,
                retry_after: Duration::from_secs(29)
            }
        );
        // Claimant 1 stops; past its claim, claimant 2 takes the turn, and 1 can no longer post.
        assert_eq!(
            board.claim(claim(2), at(90)),
            CensusTurn::Count { last: None }
        );
        let census = Census {
            processing: 1,
            completed: 2,
            oldest_processing: Some(at(3)),
        };
        assert!(!board.post(1, Census::default(), HOLD, at(91)));
        assert!(board.post(2, census, Duration::from_secs(10), at(95)));
        let posted = Posted {
            census,
            at: at(95),
            next: at(105),
        };
        // Not due before `next`, for anyone; then one claimant again.
        assert_eq!(
            board.claim(claim(2), at(100)),
            CensusTurn::Wait {
                last: Some(posted),
                retry_after: Duration::from_secs(5)
            }
        );
        assert_eq!(
            board.claim(claim(1), at(105)),
            CensusTurn::Count { last: Some(posted) }
        );
        assert!(!board.post(2, Census::default(), HOLD, at(106)));
        assert_eq!(board.posted, Some(posted));
    }
}

//! The model of the HTTP contract: what a request should get, given what came before it.

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderValue, Method};
use idem_core::{Fingerprint, FingerprintMode, IdempotencyKey};
use idem_http::problem;

use super::input::{Behaviour, Failure, MAX_BODY, MAX_STORED_RESPONSE, Sent, Settings};

/// Where a key's record lives: the caller (when scoping is on) and the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Address {
    pub(super) tenant: Option<HeaderValue>,
    pub(super) key: IdempotencyKey,
}

/// What the layer does with a request before it looks at the store.
#[derive(Debug, Clone)]
pub(super) enum Class {
    /// Forwarded without idempotency: method not covered, or no key and none required.
    Passthrough,
    /// Answered by the layer: a missing or invalid key, or a body over the limit.
    Rejected {
        problem: &'static str,
        status: u16,
        /// The key, when it was valid (a body over the limit).
        address: Option<Address>,
    },
    /// Run under its key.
    Keyed {
        address: Address,
        fingerprint: Fingerprint,
    },
}

impl Class {
    /// The key the response should be labelled with.
    pub(super) fn address(&self) -> Option<&Address> {
        match self {
            Self::Passthrough => None,
            Self::Rejected { address, .. } => address.as_ref(),
            Self::Keyed { address, .. } => Some(address),
        }
    }
}

/// A response as stored under a completed key.
#[derive(Debug, Clone)]
pub(super) enum Stored {
    Full {
        status: u16,
        body: Bytes,
        run: u64,
    },
    /// Over `max_stored_response`: its status and headers, and a problem for a body.
    TooLarge {
        status: u16,
        run: u64,
    },
    OutcomeUnknown,
}

/// What a request should get.
#[derive(Debug, Clone)]
pub(super) enum Expected {
    /// Forwarded once, the upstream's answer returned as it is.
    Passthrough,
    /// Refused by the layer before the store is asked.
    Rejected { problem: &'static str, status: u16 },
    /// Executed once under its key.
    Execute,
    /// The stored response, marked as a replay.
    Replay(Stored),
    /// 422: the key is in use with another fingerprint.
    Mismatch,
    /// 409: the key is being executed by another request.
    Conflict,
}

/// What an execution does to its key.
#[derive(Debug, Clone)]
pub(super) enum Effect {
    Complete(Stored),
    Release,
}

/// What the client gets.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    /// The service's error instead of a response.
    ServiceError,
    /// The upstream's response; `body` is `None` when reading it fails.
    Upstream {
        status: u16,
        body: Option<Bytes>,
        run: u64,
    },
    /// A problem made by the layer; `run` is the execution whose headers it keeps, if any.
    Problem {
        problem: &'static str,
        status: u16,
        run: Option<u64>,
    },
    OutcomeUnknown,
}

/// The keys' records as the contract says they are after the requests so far.
#[derive(Debug)]
pub(super) struct Model {
    settings: Settings,
    records: HashMap<Address, Record>,
}

#[derive(Debug)]
struct Record {
    fingerprint: Fingerprint,
    stored: Stored,
}

impl Model {
    pub(super) fn new(settings: Settings) -> Self {
        Self {
            settings,
            records: HashMap::new(),
        }
    }

    /// The order of checks of docs/http.md, Responses: method covered → key present (or
    /// required) and valid → body within `max_body` → fingerprint.
    pub(super) fn classify(&self, sent: &Sent) -> Class {
        if !matches!(sent.method, Method::POST | Method::PATCH) {
            return Class::Passthrough;
        }
        let invalid = Class::Rejected {
            problem: problem::INVALID_KEY,
            status: 400,
            address: None,
        };
        let key = match sent.key_values.as_slice() {
            [] if self.settings.require_key => {
                return Class::Rejected {
                    problem: problem::MISSING_KEY,
                    status: 400,
                    address: None,
                };
            }
            [] => return Class::Passthrough,
            [value] => match IdempotencyKey::parse_header(value.as_bytes()) {
                Ok(key) => key,
                Err(_) => return invalid,
            },
            _ => return invalid,
        };
        let address = Address {
            tenant: sent.authorization.clone().filter(|_| self.settings.scoped),
            key,
        };
        if sent.body.len() > MAX_BODY {
            return Class::Rejected {
                problem: problem::BODY_TOO_LARGE,
                status: 413,
                address: Some(address),
            };
        }
        let (path, query) = match sent.target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (sent.target, None),
        };
        let mode = if self.settings.raw_fingerprint {
            FingerprintMode::Raw
        } else {
            FingerprintMode::Json
        };
        let content_type = sent.content_type.as_ref().and_then(|v| v.to_str().ok());
        let fingerprint = Fingerprint::builder(mode)
            .method(sent.method.as_str())
            .path(path)
            .query(query)
            .body(content_type, &sent.body);
        Class::Keyed {
            address,
            fingerprint,
        }
    }

    /// What a request of this class gets when it is the only one in flight.
    pub(super) fn expect(&self, class: &Class) -> Expected {
        match class {
            Class::Passthrough => Expected::Passthrough,
            Class::Rejected {
                problem, status, ..
            } => Expected::Rejected {
                problem,
                status: *status,
            },
            Class::Keyed {
                address,
                fingerprint,
            } => match self.records.get(address) {
                None => Expected::Execute,
                Some(record) if record.fingerprint == *fingerprint => {
                    Expected::Replay(record.stored.clone())
                }
                Some(_) => Expected::Mismatch,
            },
        }
    }

    /// Records what an execution did to its key.
    pub(super) fn apply(&mut self, class: &Class, effect: Effect) {
        let Class::Keyed {
            address,
            fingerprint,
        } = class
        else {
            unreachable!("only keyed requests execute under a key");
        };
        match effect {
            Effect::Complete(stored) => {
                let record = Record {
                    fingerprint: *fingerprint,
                    stored,
                };
                self.records.insert(address.clone(), record);
            }
            Effect::Release => {
                self.records.remove(address);
            }
        }
    }

    /// What the client gets from an execution under a key, and what it does to the key:
    /// the final and ambiguous outcomes of docs/http.md, What is stored.
    pub(super) fn execute(&self, behaviour: Behaviour, run: u64) -> (Answer, Effect) {
        let reject = self.settings.reject_ambiguous;
        let status = behaviour.status.code();
        let body = behaviour.length.body(run);
        let long = body.len() > MAX_STORED_RESPONSE;
        let kept = if behaviour.status.is_ambiguous() && !reject {
            Effect::Release
        } else if long {
            Effect::Complete(Stored::TooLarge { status, run })
        } else {
            Effect::Complete(Stored::Full {
                status,
                body: body.clone(),
                run,
            })
        };
        match behaviour.failure {
            // A body of unknown length that ends is streamed, then recorded as any other.
            Failure::None | Failure::Streamed => (
                Answer::Upstream {
                    status,
                    body: Some(body),
                    run,
                },
                kept,
            ),
            // A body of unknown length is streamed (docs/http.md, Streaming): the client has
            // the head, then the response ends abnormally; the outcome is ambiguous, whatever the
            // length kept so far.
            Failure::MidBody => (
                Answer::Upstream {
                    status,
                    body: None,
                    run,
                },
                match reject {
                    true => Effect::Complete(Stored::OutcomeUnknown),
                    false => Effect::Release,
                },
            ),
            Failure::BeforeResponse if reject => (
                Answer::OutcomeUnknown,
                Effect::Complete(Stored::OutcomeUnknown),
            ),
            Failure::BeforeResponse => (Answer::ServiceError, Effect::Release),
        }
    }
}

/// What the client gets from a request forwarded without idempotency.
pub(super) fn passthrough(behaviour: Behaviour, run: u64) -> Answer {
    let status = behaviour.status.code();
    match behaviour.failure {
        Failure::BeforeResponse => Answer::ServiceError,
        Failure::MidBody => Answer::Upstream {
            status,
            body: None,
            run,
        },
        Failure::None | Failure::Streamed => Answer::Upstream {
            status,
            body: Some(behaviour.length.body(run)),
            run,
        },
    }
}

/// What the client gets from a replay of `stored`.
pub(super) fn replay(stored: &Stored) -> Answer {
    match *stored {
        Stored::Full {
            status,
            ref body,
            run,
        } => Answer::Upstream {
            status,
            body: Some(body.clone()),
            run,
        },
        Stored::TooLarge { status, run } => Answer::Problem {
            problem: problem::RESPONSE_NOT_STORED,
            status,
            run: Some(run),
        },
        Stored::OutcomeUnknown => Answer::OutcomeUnknown,
    }
}

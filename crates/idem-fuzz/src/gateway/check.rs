//! What a client got, and whether it is what the model expects.

use bytes::Bytes;
use http::{HeaderMap, header};
use idem_http::{
    RequestKey, RequestOutcome,
    problem::{Problem, Rejection},
};

use super::{
    input::{Behaviour, Sent},
    model::{self, Address, Answer, Effect, Expected, Model},
    upstream::{Execution, RUN_HEADER},
};

/// The statuses a response can have: the upstream's, and those of the layer's problems.
const STATUSES: [u16; 12] = [200, 201, 301, 400, 408, 409, 413, 422, 429, 500, 502, 503];

/// What the client got: a response (its body `None` when reading it failed), or the service's
/// error.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: HeaderMap,
    pub(super) body: Option<Bytes>,
    pub(super) outcome: Option<RequestOutcome>,
    pub(super) key: Option<RequestKey>,
}

/// One request of a step, with what the client got and what the upstream saw of it.
#[derive(Debug)]
pub(super) struct Exchange<'a> {
    pub(super) sent: &'a Sent,
    pub(super) behaviour: Behaviour,
    pub(super) reply: &'a Option<Reply>,
    pub(super) executions: Vec<&'a Execution>,
}

/// The checks that hold for every response, whatever came before: a status of the contract;
/// a response the layer made itself is an `application/problem+json` body whose `type` starts
/// with `urn:idem:problem:`; a replay is marked `Idempotent-Replayed: true`; every response says
/// what the layer did with it.
pub(super) fn check_any(reply: &Reply) -> Result<(), String> {
    if !STATUSES.contains(&reply.status) {
        return Err(format!("status {} is not in the contract", reply.status));
    }
    if reply.outcome.is_none() {
        return Err("no RequestOutcome extension".into());
    }
    let replayed = reply
        .headers
        .get_all("idempotent-replayed")
        .iter()
        .collect::<Vec<_>>();
    match (replayed.as_slice(), reply.outcome) {
        ([], Some(outcome)) if outcome != RequestOutcome::Replayed => {}
        ([value], Some(RequestOutcome::Replayed)) if *value == "true" => {}
        (values, outcome) => {
            return Err(format!("Idempotent-Replayed {values:?} for {outcome:?}"));
        }
    }
    if !reply.headers.contains_key(RUN_HEADER) {
        problem_type(reply)?;
    }
    Ok(())
}

/// Checks an exchange against one expectation; returns what it did to its key if it executed.
pub(super) fn check(
    model: &Model,
    address: Option<&Address>,
    expected: &Expected,
    exchange: &Exchange<'_>,
) -> Result<Option<Effect>, String> {
    let executes = matches!(expected, Expected::Passthrough | Expected::Execute);
    let execution = match (executes, exchange.executions.as_slice()) {
        (true, [execution]) => Some(*execution),
        (false, []) => None,
        (_, executions) => {
            return Err(format!("executed {} times", executions.len()));
        }
    };
    if let Some(execution) = execution {
        let sent = exchange.sent;
        if execution.method != sent.method
            || execution.key_values != sent.key_values
            || execution.body != sent.body
        {
            return Err(format!("the upstream got another request: {execution:?}"));
        }
    }
    let run = execution.map_or(0, |execution| execution.run);
    let mut effect = None;
    let (answer, outcome) = match expected {
        Expected::Passthrough => (
            model::passthrough(exchange.behaviour, run),
            RequestOutcome::Passthrough,
        ),
        Expected::Execute => {
            let (answer, executed) = model.execute(exchange.behaviour, run);
            effect = Some(executed);
            (answer, RequestOutcome::Executed)
        }
        Expected::Replay(stored) => (model::replay(stored), RequestOutcome::Replayed),
        Expected::Rejected { problem, status } => {
            let outcome = if *status == 413 {
                RequestOutcome::TooLarge
            } else {
                RequestOutcome::Invalid
            };
            (problem_answer(problem, *status), outcome)
        }
        Expected::Mismatch => (
            problem_answer(idem_http::problem::FINGERPRINT_MISMATCH, 422),
            RequestOutcome::Mismatch,
        ),
        Expected::Conflict => (
            problem_answer(idem_http::problem::IN_FLIGHT, 409),
            RequestOutcome::Conflict,
        ),
    };
    check_answer(&answer, outcome, address, exchange.reply.as_ref())?;
    Ok(effect)
}

fn problem_answer(problem: &'static str, status: u16) -> Answer {
    Answer::Problem {
        problem,
        status,
        run: None,
    }
}

fn check_answer(
    answer: &Answer,
    outcome: RequestOutcome,
    address: Option<&Address>,
    reply: Option<&Reply>,
) -> Result<(), String> {
    let reply = match (answer, reply) {
        (Answer::ServiceError, None) => return Ok(()),
        (_, None) => return Err("the service failed".into()),
        (Answer::ServiceError, Some(reply)) => {
            return Err(format!(
                "a {} response, not the service's error",
                reply.status
            ));
        }
        (_, Some(reply)) => reply,
    };
    if reply.outcome != Some(outcome) {
        return Err(format!("outcome {:?}, not {outcome:?}", reply.outcome));
    }
    let label = reply
        .key
        .as_ref()
        .map(|key| (key.digest(), key.scope().is_anonymous()));
    let expected_label = address.map(|address| (address.key.digest(), address.tenant.is_none()));
    if label != expected_label {
        return Err(format!("labelled {label:?}, not {expected_label:?}"));
    }
    match answer {
        Answer::ServiceError => unreachable!("handled above"),
        Answer::Upstream { status, body, run } => {
            expect_status(reply, *status)?;
            expect_run(reply, Some(*run))?;
            if reply.body != *body {
                return Err(format!("body {:?}, not {body:?}", reply.body));
            }
        }
        Answer::Problem {
            problem,
            status,
            run,
        } => {
            expect_status(reply, *status)?;
            expect_run(reply, *run)?;
            let found = problem_type(reply)?;
            if found != *problem {
                return Err(format!("problem {found}, not {problem}"));
            }
            // Only the in-flight problem says when to retry; the upstream never sends one.
            let retry_after = reply.headers.get(header::RETRY_AFTER);
            let seconds = retry_after.and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
            match (*problem == idem_http::problem::IN_FLIGHT, retry_after) {
                (true, _) if seconds >= Some(1) => {}
                (false, None) => {}
                (_, value) => return Err(format!("{problem} with Retry-After {value:?}")),
            }
        }
        Answer::OutcomeUnknown => {
            expect_status(reply, 500)?;
            expect_run(reply, None)?;
            if reply.body.as_ref() != Some(&Rejection::OutcomeUnknown.body()) {
                return Err(format!("body {:?}, not outcome unknown", reply.body));
            }
            problem_type(reply)?;
        }
    }
    Ok(())
}

fn expect_status(reply: &Reply, status: u16) -> Result<(), String> {
    if reply.status == status {
        Ok(())
    } else {
        Err(format!("status {}, not {status}", reply.status))
    }
}

fn expect_run(reply: &Reply, run: Option<u64>) -> Result<(), String> {
    let found = reply
        .headers
        .get(RUN_HEADER)
        .map(|value| value.as_bytes().to_vec());
    let expected = run.map(|run| run.to_string().into_bytes());
    if found == expected {
        Ok(())
    } else {
        Err(format!("{RUN_HEADER} {found:?}, not {expected:?}"))
    }
}

/// The `type` of a problem response, after checking that it is one: `application/problem+json`,
/// a JSON object whose `type` starts with `urn:idem:problem:` and whose `status` is the
/// response's, with a `title` and a `Content-Length` that matches.
fn problem_type(reply: &Reply) -> Result<String, String> {
    let content_type = reply.headers.get(header::CONTENT_TYPE);
    if content_type.is_none_or(|value| value != "application/problem+json") {
        return Err(format!("a problem with Content-Type {content_type:?}"));
    }
    let body = reply.body.as_ref().ok_or("a problem whose body failed")?;
    let length = reply.headers.get(header::CONTENT_LENGTH);
    if length.is_some_and(|value| value.as_bytes() != body.len().to_string().as_bytes()) {
        return Err(format!(
            "Content-Length {length:?} for {} bytes",
            body.len()
        ));
    }
    let problem: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| format!("a problem that is not JSON: {error}"))?;
    let problem_type = problem["type"].as_str().unwrap_or_default();
    if !problem_type.starts_with("urn:idem:problem:") {
        return Err(format!("problem type {:?}", problem["type"]));
    }
    if problem["status"].as_u64() != Some(u64::from(reply.status)) || !problem["title"].is_string()
    {
        return Err(format!("problem {problem} for status {}", reply.status));
    }
    Ok(problem_type.to_owned())
}

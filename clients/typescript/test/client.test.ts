// The client's loop with a fake fetch and virtual time: keys, bodies, attempts, waits, the
// deadline, and what is thrown.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  GaveUp,
  IdemClient,
  IdemError,
  InvalidKey,
  Mismatch,
  OutcomeUnknown,
  parseProblem,
} from "../src/index.js";
import {
  answer,
  bytes,
  connectFailure,
  fakeOptions,
  neverAnswers,
  scriptedFetch,
  stalledBody,
  text,
  UUID_V4,
  virtualTime,
} from "./helpers.js";

const URL_ = "http://api.test/charges";
const PROBLEM = { "content-type": "application/problem+json" };

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => assert.fail("expected a rejection"),
    (error: unknown) => error,
  );
}

describe("keys and bodies", () => {
  it("sends the same key and the same body bytes on every attempt", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([answer(503), answer(502), answer(201, {}, '{"id":"ch_1"}')]);
    const client = new IdemClient(fakeOptions(fetch, time));
    const response = await client.post(URL_, { json: { amount: 1000, currency: "eur" } });

    assert.equal(response.status, 201);
    assert.equal(response.attempts, 3);
    assert.equal(sent.length, 3);
    const key = sent[0]!.headers.get("idempotency-key");
    assert.match(key!, UUID_V4);
    assert.equal(response.key, key);
    for (const attempt of sent) {
      assert.equal(attempt.url, URL_);
      assert.equal(attempt.method, "POST");
      assert.equal(attempt.headers.get("idempotency-key"), key);
      assert.equal(attempt.headers.get("content-type"), "application/json");
      assert.equal(text(attempt.body), '{"amount":1000,"currency":"eur"}');
    }
  });

  it("serializes the JSON body once", async () => {
    let serialized = 0;
    const value = {
      toJSON() {
        serialized += 1;
        return { n: serialized };
      },
    };
    const { fetch, sent } = scriptedFetch([answer(503), answer(503), answer(200)]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: value });
    assert.equal(response.attempts, 3);
    assert.equal(serialized, 1);
    assert.deepEqual(sent.map((s) => text(s.body)), ['{"n":1}', '{"n":1}', '{"n":1}']);
  });

  it("gives each new operation a new key", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    const client = new IdemClient(fakeOptions(fetch, virtualTime()));
    const first = await client.post(URL_, { json: { amount: 1 } });
    const second = await client.post(URL_, { json: { amount: 1 } });
    assert.match(first.key, UUID_V4);
    assert.match(second.key, UUID_V4);
    assert.notEqual(first.key, second.key);
    assert.equal(sent[0]!.headers.get("idempotency-key"), first.key);
    assert.equal(sent[1]!.headers.get("idempotency-key"), second.key);
  });

  it("sends a given key bare", async () => {
    const { fetch, sent } = scriptedFetch([answer(503), answer(200)]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, {
      key: "order-42",
      json: {},
    });
    assert.equal(response.key, "order-42");
    assert.deepEqual(sent.map((s) => s.headers.get("idempotency-key")), ["order-42", "order-42"]);
  });

  it("sends a given key that needs it as an RFC 8941 string", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).put(URL_, {
      key: 'order "42"',
      body: "raw",
    });
    assert.equal(response.key, 'order "42"');
    assert.equal(sent[0]!.headers.get("idempotency-key"), '"order \\"42\\""');
    assert.equal(sent[0]!.method, "PUT");
    assert.equal(text(sent[0]!.body), "raw");
  });

  it("refuses an invalid key before anything is sent", async () => {
    for (const key of ["", "café", "new\nline", "k".repeat(256)]) {
      const { fetch, sent } = scriptedFetch([answer(200)]);
      const error = await rejection(new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { key, json: {} }));
      assert.ok(error instanceof InvalidKey);
      assert.ok(error instanceof IdemError);
      assert.equal(error.name, "InvalidKey");
      assert.equal(sent.length, 0);
    }
  });

  it("replaces the caller's own key header", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, {
      key: "order-42",
      headers: [
        ["IDEMPOTENCY-KEY", "mine"],
        ["Authorization", "Bearer sk_test"],
      ],
      json: {},
    });
    assert.equal(sent[0]!.headers.get("idempotency-key"), "order-42");
    assert.equal(sent[0]!.headers.get("authorization"), "Bearer sk_test");
  });

  it("sends the key in the header it is told to", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    await new IdemClient(fakeOptions(fetch, virtualTime(), { keyHeader: "X-Request-Key" })).patch(URL_, {
      key: "order-42",
      headers: { "x-request-key": "mine" },
    });
    assert.equal(sent[0]!.headers.get("x-request-key"), "order-42");
    assert.equal(sent[0]!.headers.get("idempotency-key"), null);
    assert.equal(sent[0]!.method, "PATCH");
    assert.equal(sent[0]!.body, null);
  });

  it("keeps the caller's content type for a JSON body", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, {
      headers: { "content-type": "application/vnd.api+json" },
      json: [1, 2],
    });
    assert.equal(sent[0]!.headers.get("content-type"), "application/vnd.api+json");
    assert.equal(text(sent[0]!.body), "[1,2]");
  });

  it("sends bytes as given, copied once", async () => {
    const { fetch, sent } = scriptedFetch([answer(503), answer(200)]);
    const data = bytes("abc");
    const pending = new IdemClient(fakeOptions(fetch, virtualTime())).delete(URL_, { body: data });
    data[0] = 0x7a; // changed after the call: the operation keeps what it was given
    await pending;
    assert.deepEqual(sent.map((s) => text(s.body)), ["abc", "abc"]);
    assert.equal(sent[0]!.method, "DELETE");
  });
});

describe("answers", () => {
  it("counts the attempts and returns the whole answer", async () => {
    const { fetch } = scriptedFetch([
      answer(429),
      answer(201, { "content-type": "application/json", "x-charge": "ch_1" }, '{"id":"ch_1"}'),
    ]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} });
    assert.equal(response.status, 201);
    assert.equal(response.ok, true);
    assert.equal(response.attempts, 2);
    assert.equal(response.replayed, false);
    assert.equal(response.problem, null);
    assert.equal(response.headers.get("x-charge"), "ch_1");
    assert.ok(response.body instanceof Uint8Array);
    assert.deepEqual(response.body, bytes('{"id":"ch_1"}'));
    assert.equal(response.text(), '{"id":"ch_1"}');
    assert.deepEqual(response.json(), { id: "ch_1" });
  });

  it("marks a replay", async () => {
    const { fetch } = scriptedFetch([answer(201, { "idempotent-replayed": "TRUE" }, '{"id":"ch_1"}')]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} });
    assert.equal(response.replayed, true);
    assert.equal(response.attempts, 1);
  });

  it("returns a replayed 503 after one retry", async () => {
    const { fetch, sent } = scriptedFetch([answer(503), answer(503, { "idempotent-replayed": "true" })]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} });
    assert.equal(response.status, 503);
    assert.equal(response.replayed, true);
    assert.equal(response.attempts, 2);
    assert.equal(sent.length, 2);
  });

  it("does not follow redirects", async () => {
    const { fetch, sent } = scriptedFetch([answer(503), answer(303, { location: "/charges/ch_1" })]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} });
    assert.equal(response.status, 303);
    assert.equal(response.headers.get("location"), "/charges/ch_1");
    assert.deepEqual(sent.map((s) => s.redirect), ["manual", "manual"]);
  });

  it("throws Mismatch at once, with the problem", async () => {
    const time = virtualTime();
    const body = JSON.stringify({
      type: "urn:idem:problem:fingerprint-mismatch",
      title: "Idempotency key reused",
      status: 422,
      detail: "the key was used for a different request",
    });
    const { fetch, sent } = scriptedFetch([answer(422, PROBLEM, body), answer(200)]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time)).post(URL_, { key: "order-42", json: {} }));
    assert.ok(error instanceof Mismatch);
    assert.equal(error.name, "Mismatch");
    assert.equal(error.key, "order-42");
    assert.equal(error.attempts, 1);
    assert.equal(error.response.status, 422);
    assert.equal(error.response.attempts, 1);
    assert.deepEqual(error.problem, {
      type: "urn:idem:problem:fingerprint-mismatch",
      title: "Idempotency key reused",
      status: 422,
      detail: "the key was used for a different request",
      retryAfterMs: null,
    });
    assert.equal(sent.length, 1);
    assert.deepEqual(time.sleeps, []);
  });

  it("throws OutcomeUnknown at once, with the problem, even without its content type", async () => {
    const time = virtualTime();
    const body = '{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","status":500}';
    const { fetch, sent } = scriptedFetch([answer(503), answer(500, { "idempotent-replayed": "true" }, body)]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time)).post(URL_, { json: {} }));
    assert.ok(error instanceof OutcomeUnknown);
    assert.equal(error.name, "OutcomeUnknown");
    assert.match(error.key, UUID_V4);
    assert.equal(error.attempts, 2);
    assert.equal(error.response.status, 500);
    assert.equal(error.response.replayed, true);
    assert.equal(error.response.text(), body);
    assert.deepEqual(error.problem, {
      type: "urn:idem:problem:outcome-unknown",
      title: "Outcome unknown",
      status: 500,
      detail: null,
      retryAfterMs: null,
    });
    assert.equal(sent.length, 2);
    assert.deepEqual(time.sleeps, [50]);
  });

  it("throws OutcomeUnknown after 1 attempt", async () => {
    const body = '{"type":"urn:idem:problem:outcome-unknown"}';
    const { fetch, sent } = scriptedFetch([answer(500, PROBLEM, body), answer(200)]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} }));
    assert.ok(error instanceof OutcomeUnknown);
    assert.equal(error.attempts, 1);
    assert.equal(error.problem?.type, "urn:idem:problem:outcome-unknown");
    assert.equal(error.problem?.title, null);
    assert.equal(sent.length, 1);
  });
});

describe("giving up", () => {
  it("gives up after maxAttempts with the last response", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([
      answer(503, { ...PROBLEM, "retry-after": "1" }, '{"type":"urn:idem:problem:store-unavailable","status":503}'),
    ]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time, { maxAttempts: 3 })).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.name, "GaveUp");
    assert.equal(error.reason, "max_attempts");
    assert.equal(error.attempts, 3);
    assert.equal(error.lastError, null);
    assert.ok(error.lastResponse !== null);
    assert.equal(error.lastResponse.status, 503);
    assert.equal(error.lastResponse.attempts, 3);
    assert.deepEqual(error.lastResponse.problem, {
      type: "urn:idem:problem:store-unavailable",
      title: null,
      status: 503,
      detail: null,
      retryAfterMs: 1000,
    });
    assert.equal(sent.length, 3);
    assert.deepEqual(time.sleeps, [1000, 1000]);
  });

  it("gives up after maxAttempts with the last transport failure", async () => {
    const { fetch, sent } = scriptedFetch([() => connectFailure()]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "max_attempts");
    assert.equal(error.attempts, 5);
    assert.equal(error.lastResponse, null);
    assert.ok(error.lastError instanceof TypeError);
    assert.equal(error.lastError.message, "fetch failed");
    assert.equal(sent.length, 5);
  });

  it("counts maxAttempts 0 as 1", async () => {
    const { fetch, sent } = scriptedFetch([answer(502)]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, virtualTime(), { maxAttempts: 0 })).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "max_attempts");
    assert.equal(error.attempts, 1);
    assert.equal(sent.length, 1);
  });

  it("gives up at the deadline without the wait", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([answer(409, { "retry-after": "40" })]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time)).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "deadline");
    assert.equal(error.attempts, 1);
    assert.equal(error.lastResponse?.status, 409);
    assert.equal(sent.length, 1);
    assert.deepEqual(time.sleeps, []);
  });

  it("gives up when the wait would end exactly at the deadline", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([answer(429, { "retry-after": "1" })]);
    const client = new IdemClient(fakeOptions(fetch, time, { deadlineMs: 1001 }));
    const error = await rejection(
      client.post(URL_, { json: {} }).finally(() => undefined),
    );
    // 0 + 1000 < 1001: waited once; then 1000 + 1000 >= 1001.
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "deadline");
    assert.equal(error.attempts, 2);
    assert.deepEqual(time.sleeps, [1000]);
    assert.equal(sent.length, 2);

    const time2 = virtualTime();
    const again = scriptedFetch([answer(429, { "retry-after": "1" })]);
    const error2 = await rejection(
      new IdemClient(fakeOptions(again.fetch, time2, { deadlineMs: 1000 })).post(URL_, { json: {} }),
    );
    assert.ok(error2 instanceof GaveUp);
    assert.equal(error2.reason, "deadline");
    assert.equal(error2.attempts, 1);
    assert.deepEqual(time2.sleeps, []);
  });

  it("counts the time attempts take against the deadline", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([
      async () => {
        time.advance(4000);
        return answer(504);
      },
    ]);
    const client = new IdemClient(fakeOptions(fetch, time, { deadlineMs: 10_000, random: () => 1, initialBackoffMs: 1000 }));
    const error = await rejection(client.post(URL_, { json: {} }));
    // 4000 + wait 1000 = 5000 < 10000; 9000 + 2000 >= 10000.
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "deadline");
    assert.equal(error.attempts, 2);
    assert.deepEqual(time.sleeps, [1000]);
    assert.equal(sent.length, 2);
  });

  it("gives up at once on a Retry-After too large to hold", async () => {
    const time = virtualTime();
    const { fetch } = scriptedFetch([answer(503, { "retry-after": "99999999999999999999999" })]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time, { deadlineMs: 1e12 })).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "deadline");
    assert.equal(error.attempts, 1);
    assert.deepEqual(time.sleeps, []);
  });
});

describe("waits", () => {
  it("waits at least the Retry-After", async () => {
    const time = virtualTime();
    const { fetch } = scriptedFetch([answer(429, { "retry-after": "7" }), answer(409, { "retry-after": " 2\t" }), answer(200)]);
    const response = await new IdemClient(fakeOptions(fetch, time)).post(URL_, { json: {} });
    assert.equal(response.attempts, 3);
    assert.deepEqual(time.sleeps, [7000, 2000]);
  });

  it("waits the backoff when it is longer than the Retry-After", async () => {
    const time = virtualTime();
    const { fetch } = scriptedFetch([answer(503, { "retry-after": "0" }), answer(200)]);
    await new IdemClient(fakeOptions(fetch, time)).post(URL_, { json: {} });
    assert.deepEqual(time.sleeps, [50]);
  });

  it("does not read Retry-After on 502, nor an HTTP-date", async () => {
    const time = virtualTime();
    const { fetch } = scriptedFetch([
      answer(502, { "retry-after": "9" }),
      answer(503, { "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT" }),
      answer(200),
    ]);
    await new IdemClient(fakeOptions(fetch, time)).post(URL_, { json: {} });
    assert.deepEqual(time.sleeps, [50, 100]);
  });

  for (const [random, expected] of [
    [0, [0, 0, 0, 0, 0]],
    [0.25, [25, 50, 100, 125, 125]],
    [1, [100, 200, 400, 500, 500]],
  ] as const) {
    it(`draws the backoff from [0, min(max, initial × 2^(n−1))] (random ${random})`, async () => {
      const time = virtualTime();
      const { fetch, sent } = scriptedFetch([answer(503)]);
      const client = new IdemClient(
        fakeOptions(fetch, time, { random: () => random, initialBackoffMs: 100, maxBackoffMs: 500, maxAttempts: 6 }),
      );
      const error = await rejection(client.post(URL_, { json: {} }));
      assert.ok(error instanceof GaveUp);
      assert.equal(error.attempts, 6);
      assert.equal(sent.length, 6);
      assert.deepEqual(time.sleeps, expected);
    });
  }

  it("defaults to 5 attempts and backoffs of 100 ms doubling", async () => {
    const time = virtualTime();
    const { fetch, sent } = scriptedFetch([answer(504)]);
    const error = await rejection(new IdemClient(fakeOptions(fetch, time, { random: () => 1 })).post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.attempts, 5);
    assert.equal(sent.length, 5);
    assert.deepEqual(time.sleeps, [100, 200, 400, 800]);
  });
});

describe("timeouts and aborts", () => {
  it("times out an attempt whose body stalls, and retries it", async () => {
    const { fetch, sent } = scriptedFetch([(s) => stalledBody(s), answer(200, {}, "done")]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime(), { attemptTimeoutMs: 20 })).post(URL_, {
      json: {},
    });
    assert.equal(response.text(), "done");
    assert.equal(response.attempts, 2);
    assert.equal(sent.length, 2);
  });

  it("times an attempt out at the deadline when that comes first", async () => {
    const { fetch, sent } = scriptedFetch([(s) => neverAnswers(s)]);
    const started = Date.now();
    // random 1: a first wait of 100 ms, past the deadline.
    const client = new IdemClient({ fetch, deadlineMs: 50, attemptTimeoutMs: 10_000, random: () => 1 });
    const error = await rejection(client.post(URL_, { json: {} }));
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "deadline");
    assert.equal(error.attempts, 1);
    assert.equal((error.lastError as DOMException).name, "TimeoutError");
    assert.equal(sent.length, 1);
    assert.ok(Date.now() - started < 5000);
  });

  it("aborts an attempt whose fetch ignores the signal", async () => {
    const { fetch, sent } = scriptedFetch([() => new Promise<Response>(() => {}), answer(200)]);
    const response = await new IdemClient(fakeOptions(fetch, virtualTime(), { attemptTimeoutMs: 20 })).post(URL_, {
      json: {},
    });
    assert.equal(response.attempts, 2);
    assert.equal(sent.length, 2);
  });

  it("sends nothing when the caller's signal has already aborted", async () => {
    const { fetch, sent } = scriptedFetch([answer(200)]);
    const controller = new AbortController();
    const reason = new Error("caller stopped");
    controller.abort(reason);
    const error = await rejection(
      new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {}, signal: controller.signal }),
    );
    assert.equal(error, reason);
    assert.equal(sent.length, 0);
  });

  it("stops during an attempt when the caller aborts, and rethrows the abort", async () => {
    const controller = new AbortController();
    const { fetch, sent } = scriptedFetch([
      (s) => {
        setTimeout(() => controller.abort(), 5);
        return neverAnswers(s);
      },
    ]);
    const error = await rejection(
      new IdemClient(fakeOptions(fetch, virtualTime())).post(URL_, { json: {}, signal: controller.signal }),
    );
    assert.ok(error instanceof DOMException);
    assert.equal(error.name, "AbortError");
    assert.equal(sent.length, 1);
  });

  it("stops during a wait when the caller aborts", async () => {
    const controller = new AbortController();
    const reason = new Error("caller stopped");
    const { fetch, sent } = scriptedFetch([answer(503)]);
    const client = new IdemClient({
      fetch,
      random: () => 1,
      initialBackoffMs: 60_000,
      maxBackoffMs: 60_000,
      deadlineMs: 600_000,
    });
    setTimeout(() => controller.abort(reason), 20);
    const started = Date.now();
    const error = await rejection(client.post(URL_, { json: {}, signal: controller.signal }));
    assert.equal(error, reason);
    assert.equal(sent.length, 1);
    assert.ok(Date.now() - started < 5000);
  });
});

describe("error messages", () => {
  const key = "customer-jane.doe@example.com-order-42";

  it("never contain the key", async () => {
    const errors: unknown[] = [];
    const mismatch = scriptedFetch([answer(422, {}, '{"type":"urn:idem:problem:fingerprint-mismatch"}')]);
    errors.push(await rejection(new IdemClient(fakeOptions(mismatch.fetch, virtualTime())).post(URL_, { key, json: {} })));
    const unknown = scriptedFetch([answer(500, {}, '{"type":"urn:idem:problem:outcome-unknown"}')]);
    errors.push(await rejection(new IdemClient(fakeOptions(unknown.fetch, virtualTime())).post(URL_, { key, json: {} })));
    const gaveUp = scriptedFetch([answer(503)]);
    errors.push(await rejection(new IdemClient(fakeOptions(gaveUp.fetch, virtualTime())).post(URL_, { key, json: {} })));
    const refused = scriptedFetch([() => connectFailure()]);
    errors.push(await rejection(new IdemClient(fakeOptions(refused.fetch, virtualTime())).post(URL_, { key, json: {} })));
    const invalid = `${key}\u00e9`;
    errors.push(await rejection(new IdemClient(fakeOptions(gaveUp.fetch, virtualTime())).post(URL_, { key: invalid, json: {} })));

    assert.deepEqual(errors.map((e) => (e as Error).name), ["Mismatch", "OutcomeUnknown", "GaveUp", "GaveUp", "InvalidKey"]);
    for (const error of errors) {
      assert.ok(error instanceof IdemError);
      assert.ok(!error.message.includes(key), error.message);
      assert.ok(!String(error).includes(key));
      assert.ok(!(error.stack ?? "").includes(key));
    }
    assert.equal((errors[0] as Mismatch).key, key);
    assert.equal((errors[1] as OutcomeUnknown).key, key);
    assert.equal((errors[2] as GaveUp).key, key);
    assert.equal(
      (errors[2] as GaveUp).message,
      "gave up after 5 attempt(s), no attempts left (last answer: status 503)",
    );
    assert.equal((errors[4] as InvalidKey).reason, "invalid_character");
  });
});

describe("problem details", () => {
  it("reads the media type case-insensitively, parameters ignored", () => {
    const problem = parseProblem(
      { "content-type": "Application/Problem+JSON; charset=utf-8", "retry-after": "3" },
      bytes('{"title":"Busy","status":"503","detail":7}'),
    );
    assert.deepEqual(problem, { type: "about:blank", title: "Busy", status: null, detail: null, retryAfterMs: 3000 });
  });

  it("is null for another media type, or a body that is not a JSON object", () => {
    assert.equal(parseProblem({ "content-type": "application/json" }, bytes('{"type":"x"}')), null);
    assert.equal(parseProblem({}, bytes('{"type":"x"}')), null);
    assert.equal(parseProblem(PROBLEM, bytes("[1]")), null);
    assert.equal(parseProblem(PROBLEM, bytes("null")), null);
    assert.equal(parseProblem(PROBLEM, bytes("")), null);
  });

  it("reads the body whatever its content type when asked to", () => {
    assert.deepEqual(parseProblem({}, bytes('{"type":"x"}'), true), {
      type: "x",
      title: null,
      status: null,
      detail: null,
      retryAfterMs: null,
    });
  });
});

// The shared case table, clients/cases.json in the idem repository: the retry contract as data,
// read by the Rust, Python and TypeScript clients' tests alike. One test per case.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import {
  classify,
  encodeKey,
  GaveUp,
  IdemClient,
  InvalidKey,
  Mismatch,
  OutcomeUnknown,
  parseProblem,
  parseRetryAfter,
} from "../src/index.js";
import type { Problem } from "../src/index.js";
import {
  answer,
  brokenBody,
  bytes,
  connectFailure,
  fakeOptions,
  neverAnswers,
  scriptedFetch,
  text,
  virtualTime,
} from "./helpers.js";
import type { Sent, Step } from "./helpers.js";

interface ExpectedProblem {
  type: string;
  title: string | null;
  status: number | null;
  detail: string | null;
}

interface AnswerCase {
  name: string;
  status: number;
  headers: Record<string, string>;
  body: string;
  expect: {
    action: "return" | "retry" | "raise";
    retry_after?: number | null;
    error?: "mismatch" | "outcome_unknown";
    problem?: ExpectedProblem | null;
  };
}

interface TransportCase {
  name: string;
  failure: "connect" | "timeout" | "broken";
  expect: { action: "retry" };
}

interface RetryAfterCase {
  value: string;
  seconds: number | "forever" | null;
}

interface KeyCase {
  key: string;
  header: string | null;
}

interface Table {
  about: string;
  answers: AnswerCase[];
  transport: TransportCase[];
  retry_after: RetryAfterCase[];
  keys: KeyCase[];
}

// Compiled, this file is build/test/cases.test.js in clients/typescript: the table is three
// levels up, in clients/.
const table = JSON.parse(
  readFileSync(new URL("../../../cases.json", import.meta.url), "utf8"),
) as Table;

function pick(problem: Problem | null): ExpectedProblem | null {
  if (problem === null) return null;
  return { type: problem.type, title: problem.title, status: problem.status, detail: problem.detail };
}

const SECOND_ANSWER = answer(200, { "content-type": "application/json" }, '{"second":true}');

describe("the shared case table", () => {
  it("has cases of every kind", () => {
    assert.ok(table.answers.length > 0);
    assert.ok(table.transport.length > 0);
    assert.ok(table.retry_after.length > 0);
    assert.ok(table.keys.length > 0);
  });
});

describe("answers", () => {
  for (const c of table.answers) {
    it(c.name, async () => {
      const body = bytes(c.body);

      // The pure classification.
      const verdict = classify(c.status, c.headers, body);
      assert.equal(verdict.action, c.expect.action);
      assert.equal(verdict.error, c.expect.error ?? null);
      if (c.expect.action !== "retry") assert.equal(verdict.retryAfterMs, null);
      if ("retry_after" in c.expect) {
        const seconds = c.expect.retry_after;
        assert.equal(verdict.retryAfterMs, seconds === null || seconds === undefined ? null : seconds * 1000);
      }
      if ("problem" in c.expect) {
        const problem = parseProblem(c.headers, body, c.expect.action === "raise");
        assert.deepEqual(pick(problem), c.expect.problem);
      }

      // The same answer through the client's loop, followed by a 200.
      const time = virtualTime();
      const { fetch, sent } = scriptedFetch([answer(c.status, c.headers, c.body), SECOND_ANSWER]);
      const client = new IdemClient(fakeOptions(fetch, time, { initialBackoffMs: 100 }));
      if (c.expect.action === "raise") {
        const error = await client.post("http://api.test/charges", { json: { amount: 1 } }).then(
          () => assert.fail("expected an error"),
          (e: unknown) => e,
        );
        const expected = c.expect.error === "mismatch" ? Mismatch : OutcomeUnknown;
        assert.ok(error instanceof expected, `expected ${expected.name}, got ${String(error)}`);
        assert.equal(error.attempts, 1);
        assert.equal(error.response.status, c.status);
        assert.equal(text(error.response.body), c.body);
        if ("problem" in c.expect) assert.deepEqual(pick(error.problem), c.expect.problem);
        assert.equal(sent.length, 1);
        assert.deepEqual(time.sleeps, []);
      } else if (c.expect.action === "return") {
        const response = await client.post("http://api.test/charges", { json: { amount: 1 } });
        assert.equal(response.status, c.status);
        assert.equal(response.attempts, 1);
        assert.equal(response.text(), c.body);
        if ("problem" in c.expect) assert.deepEqual(pick(response.problem), c.expect.problem);
        assert.equal(sent.length, 1);
        assert.deepEqual(time.sleeps, []);
      } else {
        const response = await client.post("http://api.test/charges", { json: { amount: 1 } });
        assert.equal(response.status, 200);
        assert.equal(response.attempts, 2);
        assert.equal(response.text(), '{"second":true}');
        assert.equal(sent.length, 2);
        // random 0.5 of a first backoff of 100 ms: 50 ms, or the Retry-After when longer.
        const retryAfterMs = (c.expect.retry_after ?? 0) * 1000;
        assert.deepEqual(time.sleeps, [Math.max(50, retryAfterMs)]);
      }
    });
  }
});

function failingStep(failure: TransportCase["failure"]): Step {
  switch (failure) {
    case "connect":
      return () => connectFailure();
    case "timeout":
      return (sent: Sent) => neverAnswers(sent);
    case "broken":
      return () => brokenBody();
  }
}

describe("transport", () => {
  for (const c of table.transport) {
    it(c.name, async () => {
      assert.equal(c.expect.action, "retry");
      const time = virtualTime();
      const { fetch, sent } = scriptedFetch([failingStep(c.failure), SECOND_ANSWER]);
      // The attempt timeout runs on the real clock: keep it short.
      const client = new IdemClient(fakeOptions(fetch, time, { attemptTimeoutMs: 20 }));
      const response = await client.post("http://api.test/charges", { json: { amount: 1 } });
      assert.equal(response.status, 200);
      assert.equal(response.attempts, 2);
      assert.equal(sent.length, 2);
      assert.equal(sent[0]!.headers.get("idempotency-key"), sent[1]!.headers.get("idempotency-key"));
      assert.deepEqual(sent[0]!.body, sent[1]!.body);
      assert.deepEqual(time.sleeps, [50]);

      // Failing every time, it gives up with the failure.
      const always = scriptedFetch([failingStep(c.failure)]);
      const giving = new IdemClient(fakeOptions(always.fetch, virtualTime(), { attemptTimeoutMs: 20, maxAttempts: 2 }));
      const error = await giving.post("http://api.test/charges", { json: { amount: 1 } }).then(
        () => assert.fail("expected GaveUp"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof GaveUp);
      assert.equal(error.reason, "max_attempts");
      assert.equal(error.attempts, 2);
      assert.equal(error.lastResponse, null);
      assert.ok(error.lastError !== null);
      if (c.failure === "timeout") {
        assert.equal((error.lastError as DOMException).name, "TimeoutError");
      } else {
        assert.ok(error.lastError instanceof TypeError);
      }
    });
  }
});

describe("retry_after", () => {
  for (const c of table.retry_after) {
    it(`Retry-After ${JSON.stringify(c.value)}`, () => {
      const expected = c.seconds === "forever" ? Infinity : c.seconds;
      assert.equal(parseRetryAfter(c.value), expected);
    });
  }
});

describe("keys", () => {
  for (const c of table.keys) {
    const shown = c.key.length > 40 ? `${c.key.slice(0, 12)}… (${c.key.length} characters)` : c.key;
    it(`key ${JSON.stringify(shown)}`, () => {
      if (c.header === null) {
        assert.throws(() => encodeKey(c.key), InvalidKey);
      } else {
        assert.equal(encodeKey(c.key), c.header);
      }
    });
  }
});

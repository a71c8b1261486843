// The end-to-end driver: sends IDEM_E2E_PAYMENTS payments to ${IDEM_E2E_URL}/payments through
// the client, IDEM_E2E_CONCURRENCY at a time (default 8), each under a generated key, and prints
// one JSON line per payment. It exits 0 once every payment has ended; the harness judges the
// lines. Built by test.sh to build/e2e/payments.js.

import { IdemClient, IdemError } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    process.stderr.write(`payments: ${name} is not set\n`);
    process.exit(2);
  }
  return value;
}

function count(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) {
    process.stderr.write(`payments: ${name} is not a count: ${JSON.stringify(value)}\n`);
    process.exit(2);
  }
  return n;
}

const base = env("IDEM_E2E_URL").replace(/\/+$/, "");
const payments = count("IDEM_E2E_PAYMENTS", env("IDEM_E2E_PAYMENTS"));
const prefix = env("IDEM_E2E_PREFIX");
const concurrency = Math.max(1, count("IDEM_E2E_CONCURRENCY", process.env["IDEM_E2E_CONCURRENCY"] || "8"));

const client = new IdemClient({
  attemptTimeoutMs: 1000,
  deadlineMs: 60_000,
  maxAttempts: 30,
  initialBackoffMs: 50,
  maxBackoffMs: 1000,
});

function answerOf(body: string): unknown {
  try {
    const parsed: unknown = JSON.parse(body);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) && "payment" in parsed) {
      return (parsed as { payment: unknown }).payment ?? null;
    }
  } catch {
    // Not JSON: no answer.
  }
  return null;
}

async function pay(i: number): Promise<string> {
  const payment = `${prefix}-${i}`;
  try {
    const response = await client.post(`${base}/payments`, { json: { payment, amount: i + 1 } });
    return JSON.stringify({
      payment,
      status: response.status,
      attempts: response.attempts,
      replayed: response.replayed,
      answer: answerOf(response.text()),
    });
  } catch (error) {
    const name =
      error instanceof IdemError
        ? error.name
        : error instanceof Error
          ? error.constructor.name
          : typeof error;
    const attempts =
      typeof error === "object" && error !== null && "attempts" in error && typeof error.attempts === "number"
        ? error.attempts
        : null;
    return JSON.stringify({ payment, error: name, attempts });
  }
}

let next = 0;
async function worker(): Promise<void> {
  while (next < payments) {
    const i = next++;
    process.stdout.write(`${await pay(i)}\n`);
  }
}

await Promise.all(Array.from({ length: Math.min(concurrency, payments) }, () => worker()));

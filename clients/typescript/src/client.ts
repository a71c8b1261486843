import { classify, encodeKey, isReplayed, parseProblem } from "./contract.js";
import { GaveUp, Mismatch, OutcomeUnknown } from "./errors.js";
import { IdemResponse } from "./response.js";

/** A `fetch` as the client calls it. */
export type FetchLike = (input: string | URL, init: RequestInit) => Promise<Response>;

export interface IdemClientOptions {
  /** At most this many attempts, the first one included (default 5; 0 counts as 1). */
  maxAttempts?: number;
  /** All attempts and waits together take at most this long (default 30000 ms). */
  deadlineMs?: number;
  /** One attempt — connecting, the response head and the whole body — at most this long, or what is left of the deadline (default 10000 ms). */
  attemptTimeoutMs?: number;
  /** The backoff after the first failed attempt is drawn from [0, this] (default 100 ms); it doubles after each. */
  initialBackoffMs?: number;
  /** The backoff's upper bound never grows past this (default 5000 ms). */
  maxBackoffMs?: number;
  /** The header the key is sent in (default "Idempotency-Key"). */
  keyHeader?: string;
  /** The fetch to send with (default globalThis.fetch). */
  fetch?: FetchLike;
  /** Waits `ms` milliseconds; rejects with the signal's reason if it aborts. For tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** A monotonic clock in milliseconds (default performance.now). For tests. */
  now?: () => number;
  /** A uniform random number in [0, 1) (default Math.random). For tests. */
  random?: () => number;
}

/** One operation. Every attempt of it carries the same key and the same body bytes. */
export interface IdemRequestInit {
  /** A JSON body: serialized once; Content-Type application/json unless the headers set one. */
  json?: unknown;
  /** A body as it is: a string (UTF-8), bytes, or an ArrayBuffer. Ignored when `json` is given. */
  body?: string | Uint8Array | ArrayBuffer | null;
  /** Headers for every attempt. A header named like the key header is replaced by the key. */
  headers?: HeadersInit;
  /** The key, 1 to 255 characters in 0x20–0x7E: to name the operation, or to resume one. Default: a random UUID v4. */
  key?: string;
  /** Aborting it stops the operation at once, and the promise rejects with its reason. */
  signal?: AbortSignal;
}

const DEFAULTS = {
  maxAttempts: 5,
  deadlineMs: 30_000,
  attemptTimeoutMs: 10_000,
  initialBackoffMs: 100,
  maxBackoffMs: 5_000,
  keyHeader: "Idempotency-Key",
} as const;

type Attempt =
  | { kind: "answer"; response: Response; body: Uint8Array }
  | { kind: "failure"; error: unknown };

/**
 * Sends each logical operation under one idempotency key, and retries it with that same key
 * until it gets a definite answer (docs/client.md in the idem repository).
 */
export class IdemClient {
  private readonly maxAttempts: number;
  private readonly deadlineMs: number;
  private readonly attemptTimeoutMs: number;
  private readonly initialBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly keyHeader: string;
  private readonly fetchFn: FetchLike | undefined;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(options: IdemClientOptions = {}) {
    this.maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? DEFAULTS.maxAttempts));
    this.deadlineMs = options.deadlineMs ?? DEFAULTS.deadlineMs;
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? DEFAULTS.attemptTimeoutMs;
    this.initialBackoffMs = options.initialBackoffMs ?? DEFAULTS.initialBackoffMs;
    this.maxBackoffMs = options.maxBackoffMs ?? DEFAULTS.maxBackoffMs;
    this.keyHeader = options.keyHeader ?? DEFAULTS.keyHeader;
    this.fetchFn = options.fetch;
    this.sleep = options.sleep ?? defaultSleep;
    this.now = options.now ?? defaultNow;
    this.random = options.random ?? Math.random;
  }

  post(url: string | URL, init: IdemRequestInit = {}): Promise<IdemResponse> {
    return this.request("POST", url, init);
  }

  put(url: string | URL, init: IdemRequestInit = {}): Promise<IdemResponse> {
    return this.request("PUT", url, init);
  }

  patch(url: string | URL, init: IdemRequestInit = {}): Promise<IdemResponse> {
    return this.request("PATCH", url, init);
  }

  delete(url: string | URL, init: IdemRequestInit = {}): Promise<IdemResponse> {
    return this.request("DELETE", url, init);
  }

  /**
   * Sends one operation: attempts until a definite answer, the attempts run out
   * (`GaveUp`, "max_attempts") or a wait would pass the deadline (`GaveUp`, "deadline").
   * Throws `InvalidKey` before anything is sent, `Mismatch` and `OutcomeUnknown` at once.
   */
  async request(method: string, url: string | URL, init: IdemRequestInit = {}): Promise<IdemResponse> {
    // The body is taken — serialized once, or copied — before anything is awaited.
    const headers = new Headers(init.headers);
    let body: Uint8Array<ArrayBuffer> | undefined;
    if (init.json !== undefined) {
      body = utf8(JSON.stringify(init.json));
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    } else if (init.body !== undefined && init.body !== null) {
      body = toBytes(init.body);
    }
    const key = init.key ?? (await randomKey());
    const keyValue = encodeKey(key);
    const signal = init.signal;
    signal?.throwIfAborted();
    // The key header belongs to the client: whatever the caller set under that name goes.
    headers.delete(this.keyHeader);
    headers.set(this.keyHeader, keyValue);

    const fetchFn: FetchLike = this.fetchFn ?? ((input, requestInit) => globalThis.fetch(input, requestInit));
    const start = this.now();
    const deadline = start + this.deadlineMs;

    for (let attempt = 1; ; attempt++) {
      const timeoutMs = Math.max(0, Math.min(this.attemptTimeoutMs, deadline - this.now()));
      const outcome = await attemptOnce(fetchFn, url, {
        method,
        headers: new Headers(headers),
        body,
        redirect: "manual",
      }, timeoutMs, signal);

      let retryAfterMs: number | null = null;
      let lastResponse: IdemResponse | null = null;
      let lastError: unknown | null = null;
      if (outcome.kind === "answer") {
        const { response, body: bytes } = outcome;
        const verdict = classify(response.status, response.headers, bytes);
        const raised = verdict.action === "raise";
        const answer = new IdemResponse({
          status: response.status,
          statusText: response.statusText,
          headers: response.headers,
          body: bytes,
          key,
          attempts: attempt,
          replayed: isReplayed(response.headers),
          problem: parseProblem(response.headers, bytes, raised),
        });
        if (verdict.action === "raise") {
          if (verdict.error === "mismatch") throw new Mismatch(key, attempt, answer, answer.problem);
          throw new OutcomeUnknown(key, attempt, answer, answer.problem);
        }
        if (verdict.action === "return") return answer;
        lastResponse = answer;
        retryAfterMs = verdict.retryAfterMs;
      } else {
        if (signal?.aborted) throw signal.reason;
        lastError = outcome.error;
      }

      if (attempt >= this.maxAttempts) {
        throw new GaveUp(key, attempt, "max_attempts", lastResponse, lastError);
      }
      const ceiling = Math.min(this.maxBackoffMs, this.initialBackoffMs * 2 ** (attempt - 1));
      const backoff = this.random() * Math.max(0, ceiling);
      const wait = retryAfterMs === null ? backoff : Math.max(backoff, retryAfterMs);
      if (this.now() + wait >= deadline) {
        throw new GaveUp(key, attempt, "deadline", lastResponse, lastError);
      }
      await this.sleep(wait, signal);
      signal?.throwIfAborted();
    }
  }
}

/**
 * One attempt: the request, the response head and the whole body, within `timeoutMs`. Every
 * failure on the way — fetch rejecting, the timeout, the body stream failing — is a failure
 * to retry; the caller tells its own abort apart by its signal.
 */
async function attemptOnce(
  fetchFn: FetchLike,
  url: string | URL,
  init: RequestInit,
  timeoutMs: number,
  callerSignal: AbortSignal | undefined,
): Promise<Attempt> {
  const controller = new AbortController();
  let rejectAborted: (reason: unknown) => void = () => {};
  const aborted = new Promise<never>((_, reject) => {
    rejectAborted = reject;
  });
  // Nobody may await `aborted` when the attempt ends first: keep it from being unhandled.
  aborted.catch(() => {});
  const abort = (reason: unknown) => {
    if (!controller.signal.aborted) controller.abort(reason);
    rejectAborted(reason);
  };
  const timer = setTimeout(
    () => abort(new DOMException("the attempt timed out", "TimeoutError")),
    timeoutMs,
  );
  const onCallerAbort = () => abort(callerSignal?.reason);
  if (callerSignal !== undefined) {
    if (callerSignal.aborted) onCallerAbort();
    else callerSignal.addEventListener("abort", onCallerAbort, { once: true });
  }
  let response: Response | undefined;
  try {
    // Raced against the abort, so that a fetch or a body that ignores the signal cannot hold
    // the attempt past its timeout.
    response = await Promise.race([fetchFn(url, { ...init, signal: controller.signal }), aborted]);
    const body = await Promise.race([response.arrayBuffer(), aborted]);
    return { kind: "answer", response, body: new Uint8Array(body) };
  } catch (error) {
    if (response !== undefined && !response.bodyUsed) {
      response.body?.cancel().catch(() => {});
    }
    return { kind: "failure", error };
  } finally {
    clearTimeout(timer);
    callerSignal?.removeEventListener("abort", onCallerAbort);
  }
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function defaultNow(): number {
  return globalThis.performance !== undefined ? globalThis.performance.now() : Date.now();
}

/** A random UUID v4. Node 18 has no global `crypto` by default: its module then. */
async function randomKey(): Promise<string> {
  const webCrypto = (globalThis as { crypto?: Crypto }).crypto;
  if (webCrypto !== undefined && typeof webCrypto.randomUUID === "function") {
    return webCrypto.randomUUID();
  }
  // A specifier in a variable, so that bundlers for browsers leave it alone.
  const specifier = "node:crypto";
  const nodeCrypto = (await import(specifier)) as { randomUUID: () => string };
  return nodeCrypto.randomUUID();
}

function utf8(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(text) as Uint8Array<ArrayBuffer>;
}

function toBytes(body: string | Uint8Array | ArrayBuffer): Uint8Array<ArrayBuffer> {
  if (typeof body === "string") return utf8(body);
  // A copy: the caller may change its buffer while the operation runs.
  if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
  const copy = new Uint8Array(body.byteLength);
  copy.set(body);
  return copy;
}

// Fakes for the client's tests: a scripted fetch that records what each attempt sent, and a
// virtual clock whose sleep only moves time forward.

import type { FetchLike, IdemClientOptions } from "../src/index.js";

export interface Sent {
  url: string;
  method: string;
  headers: Headers;
  body: Uint8Array | null;
  redirect: RequestRedirect | undefined;
  signal: AbortSignal;
}

export type Step = Response | ((sent: Sent) => Promise<Response>);

/** A fetch that answers with `steps` in order (the last one again when they run out). */
export function scriptedFetch(steps: Step[]): { fetch: FetchLike; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetch: FetchLike = async (input, init) => {
    const body = init.body;
    const record: Sent = {
      url: String(input),
      method: init.method ?? "GET",
      headers: new Headers(init.headers),
      body: body instanceof Uint8Array ? new Uint8Array(body) : body == null ? null : new Uint8Array(0),
      redirect: init.redirect,
      signal: init.signal as AbortSignal,
    };
    sent.push(record);
    const step = steps[Math.min(sent.length - 1, steps.length - 1)];
    if (step === undefined) throw new Error("no step scripted");
    if (typeof step === "function") return step(record);
    // A Response can be read once: hand out a copy.
    return step.clone();
  };
  return { fetch, sent };
}

/** A virtual clock: `now` starts at 0, `sleep` records the wait and moves time on by it. */
export function virtualTime(): {
  now: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  sleeps: number[];
  advance: (ms: number) => void;
} {
  let t = 0;
  const sleeps: number[] = [];
  return {
    now: () => t,
    sleep: async (ms, signal) => {
      signal?.throwIfAborted();
      sleeps.push(ms);
      t += ms;
    },
    sleeps,
    advance: (ms) => {
      t += ms;
    },
  };
}

/** Options for a client on `fetch` with virtual time and a fixed random. */
export function fakeOptions(
  fetch: FetchLike,
  time: ReturnType<typeof virtualTime>,
  extra: IdemClientOptions = {},
): IdemClientOptions {
  return { fetch, now: time.now, sleep: time.sleep, random: () => 0.5, ...extra };
}

export function answer(status: number, headers: Record<string, string> = {}, body = ""): Response {
  // 204, 205 and 304 may not have a body, not even an empty one.
  const nullBody = body === "" || status === 204 || status === 205 || status === 304;
  return new Response(nullBody ? null : body, { status, headers });
}

/** Fetch rejecting as undici does when the connection is refused. */
export function connectFailure(): Promise<Response> {
  const cause = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9"), { code: "ECONNREFUSED" });
  return Promise.reject(new TypeError("fetch failed", { cause }));
}

/** A fetch that never answers: it rejects only when the attempt's signal aborts. */
export function neverAnswers(sent: Sent): Promise<Response> {
  return new Promise((_, reject) => {
    sent.signal.addEventListener("abort", () => reject(sent.signal.reason), { once: true });
  });
}

/** A 200 whose body stream breaks after its first bytes. */
export function brokenBody(): Promise<Response> {
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"payment":'));
      controller.error(new TypeError("terminated"));
    },
  });
  return Promise.resolve(new Response(stream, { status: 200, headers: { "content-type": "application/json" } }));
}

/** A 200 whose body sends its first bytes and then nothing, until the attempt's signal aborts. */
export function stalledBody(sent: Sent): Promise<Response> {
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"payment":'));
      sent.signal.addEventListener("abort", () => controller.error(sent.signal.reason), { once: true });
    },
  });
  return Promise.resolve(new Response(stream, { status: 200 }));
}

export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export function bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

export function text(data: Uint8Array | null): string | null {
  return data === null ? null : new TextDecoder().decode(data);
}

// The retry contract shared by idem's Rust, Python and TypeScript clients (docs/client.md in
// the idem repository; clients/cases.json is the same contract as data). Pure functions: no
// I/O, so that the shared case table can drive them.

import { InvalidKey } from "./errors.js";
import type { Problem } from "./response.js";

/** What to do with an attempt's answer. */
export interface Verdict {
  action: "return" | "retry" | "raise";
  /** On a retried 409, 429 or 503: the Retry-After in milliseconds (Infinity: longer than any deadline); null otherwise. */
  retryAfterMs: number | null;
  /** When the action is "raise": which error. */
  error: "mismatch" | "outcome_unknown" | null;
}

/** Headers as `classify` and `parseProblem` take them: a `Headers` or a plain record. */
export type HeadersLike = Headers | Record<string, string>;

export const OUTCOME_UNKNOWN = "urn:idem:problem:outcome-unknown";
export const FINGERPRINT_MISMATCH = "urn:idem:problem:fingerprint-mismatch";

const MAX_KEY_LENGTH = 255;

/**
 * Reads a Retry-After value as seconds: spaces and tabs stripped at both ends, then ASCII
 * digits only. A value too large to hold is Infinity (longer than any deadline). Anything else —
 * empty, signed, fractional, an HTTP-date — is not read: null, the backoff decides.
 */
export function parseRetryAfter(value: string): number | null {
  let start = 0;
  let end = value.length;
  while (start < end && isSpaceOrTab(value.charCodeAt(start))) start++;
  while (end > start && isSpaceOrTab(value.charCodeAt(end - 1))) end--;
  if (start === end) return null;
  for (let i = start; i < end; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return null;
  }
  const seconds = Number(value.slice(start, end));
  return Number.isSafeInteger(seconds) ? seconds : Infinity;
}

/** Retry-After seconds as milliseconds, Infinity when too large to hold. */
function secondsToMs(seconds: number): number {
  const ms = seconds * 1000;
  return Number.isSafeInteger(ms) ? ms : Infinity;
}

function isSpaceOrTab(c: number): boolean {
  return c === 0x20 || c === 0x09;
}

/**
 * Checks a caller-given key: 1 to 255 characters, each in 0x20–0x7E. Throws `InvalidKey`
 * otherwise.
 */
export function validateKey(key: string): void {
  if (typeof key !== "string" || key.length === 0) throw new InvalidKey("empty");
  if (key.length > MAX_KEY_LENGTH) {
    // Characters outside the BMP take two code units: only report "too long" when every unit
    // is printable ASCII, which makes units and characters the same.
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      if (c < 0x20 || c > 0x7e) throw new InvalidKey("invalid_character");
    }
    throw new InvalidKey("too_long");
  }
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) throw new InvalidKey("invalid_character");
  }
}

/**
 * Writes a key as its header value: bare when every character is in 0x21–0x7E and none is `"`,
 * `,` or `;`; otherwise as an RFC 8941 string, `"` and `\` escaped with `\`. Throws
 * `InvalidKey` for a key that is not 1 to 255 characters in 0x20–0x7E.
 */
export function encodeKey(key: string): string {
  validateKey(key);
  let bare = true;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c === 0x20 || c === 0x22 || c === 0x2c || c === 0x3b) {
      bare = false;
      break;
    }
  }
  if (bare) return key;
  return `"${key.replace(/["\\]/g, (m) => `\\${m}`)}"`;
}

function toHeaders(headers: HeadersLike): Headers {
  return headers instanceof Headers ? headers : new Headers(headers);
}

function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 0x20));
}

/** Whether the answer is a replay of a stored one: `Idempotent-Replayed: true`, ASCII case-insensitive. */
export function isReplayed(headers: HeadersLike): boolean {
  const value = toHeaders(headers).get("idempotent-replayed");
  return value !== null && asciiLower(value) === "true";
}

/** The body as a JSON object, or null when it is not one. */
function jsonObject(body: Uint8Array): Record<string, unknown> | null {
  if (body.length === 0) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  return parsed as Record<string, unknown>;
}

function problemType(body: Uint8Array): string | null {
  const object = jsonObject(body);
  if (object === null) return null;
  const type = object["type"];
  return typeof type === "string" ? type : null;
}

/**
 * Classifies an attempt's answer, in this order: a 500 `outcome-unknown` problem is raised; a
 * 422 `fingerprint-mismatch` problem is raised; a replay is returned; 409, 429 and 503 are
 * retried after at least their Retry-After; 408, 502 and 504 are retried; anything else
 * (2xx, 3xx, other 4xx and 5xx) is returned.
 */
export function classify(status: number, headers: HeadersLike, body: Uint8Array): Verdict {
  const h = toHeaders(headers);
  if (status === 500 && problemType(body) === OUTCOME_UNKNOWN) {
    return { action: "raise", retryAfterMs: null, error: "outcome_unknown" };
  }
  if (status === 422 && problemType(body) === FINGERPRINT_MISMATCH) {
    return { action: "raise", retryAfterMs: null, error: "mismatch" };
  }
  if (isReplayed(h)) {
    return { action: "return", retryAfterMs: null, error: null };
  }
  if (status === 409 || status === 429 || status === 503) {
    const value = h.get("retry-after");
    const seconds = value === null ? null : parseRetryAfter(value);
    return { action: "retry", retryAfterMs: seconds === null ? null : secondsToMs(seconds), error: null };
  }
  if (status === 408 || status === 502 || status === 504) {
    return { action: "retry", retryAfterMs: null, error: null };
  }
  return { action: "return", retryAfterMs: null, error: null };
}

/** Whether the Content-Type's media type is `application/problem+json` (parameters ignored, case-insensitive). */
export function isProblemContentType(contentType: string | null): boolean {
  if (contentType === null) return false;
  const semicolon = contentType.indexOf(";");
  const media = (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim();
  return asciiLower(media) === "application/problem+json";
}

/**
 * Reads the problem detail of an answer: when its Content-Type is `application/problem+json`
 * (or `anyContentType` is set) and its body is a JSON object. Otherwise null.
 */
export function parseProblem(
  headers: HeadersLike,
  body: Uint8Array,
  anyContentType = false,
): Problem | null {
  const h = toHeaders(headers);
  if (!anyContentType && !isProblemContentType(h.get("content-type"))) return null;
  const object = jsonObject(body);
  if (object === null) return null;
  const { type, title, status, detail } = object;
  const retryAfter = h.get("retry-after");
  const seconds = retryAfter === null ? null : parseRetryAfter(retryAfter);
  return {
    type: typeof type === "string" ? type : "about:blank",
    title: typeof title === "string" ? title : null,
    status: typeof status === "number" ? status : null,
    detail: typeof detail === "string" ? detail : null,
    retryAfterMs: seconds === null ? null : secondsToMs(seconds),
  };
}

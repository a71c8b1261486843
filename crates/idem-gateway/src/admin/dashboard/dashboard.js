// The dashboards of idem's admin listeners: gateway.html (`idem serve`), relay.html
// (`idem relay`) and deliver.html (`idem deliver`), chosen by <body data-page>. They read only
// the admin API of the listener that served them, every REFRESH_MS; with an admin token, the
// token is asked for on the first 401, kept in sessionStorage (this tab only) and sent as
// `Authorization: Bearer`.
'use strict';

const REFRESH_MS = 2000;
/** Rates and percentiles are taken over the samples of the last WINDOW_S seconds. */
const WINDOW_S = 10;
/** Two minutes of samples, for the charts; older ones are dropped. */
const SAMPLES = 61;
const TOKEN_KEY = 'idem-admin-token';
const REQUEST_TIMEOUT_MS = 5000;

const $ = (id) => document.getElementById(id);

function show(id, text) {
  $(id).textContent = text;
}

// ---------------------------------------------------------------------------------------------
// The admin API

/** A call answered 401: the page needs the admin token, or another one. */
class Unauthorized extends Error {}

/** Calls the admin API of this origin with the token, if there is one. Throws Unauthorized on 401. */
async function call(path, method = 'GET') {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, {
    method,
    headers,
    cache: 'no-store',
    credentials: 'omit',
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  if (response.status === 401) throw new Unauthorized();
  return response;
}

/** The JSON body of a 200 answer; null for any other status (a route this version lacks). */
async function callJson(path) {
  const response = await call(path);
  return response.ok ? response.json() : null;
}

/** One line that says what went wrong, from a problem+json body when there is one. */
async function failure(response) {
  try {
    const problem = await response.json();
    return [problem.title, problem.detail].filter(Boolean).join(': ') || `status ${response.status}`;
  } catch {
    return `status ${response.status}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Prometheus text

/** Parses the exposition format into a map from metric name to its series' labels and values. */
function parseMetrics(text) {
  const metrics = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const [, name, value] of (match[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[name] = value.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    const value = Number(match[3].replace('Inf', 'Infinity'));
    if (!metrics.has(match[1])) metrics.set(match[1], []);
    metrics.get(match[1]).push({ labels, value });
  }
  return metrics;
}

/** The sum of a metric's series over all their labels (0 when it is absent). */
function total(metrics, name) {
  return (metrics.get(name) || []).reduce((sum, series) => sum + series.value, 0);
}

/** A histogram's cumulative buckets as [upper bound, count] pairs, ascending, summed over labels. */
function buckets(metrics, name) {
  const counts = new Map();
  for (const { labels, value } of metrics.get(`${name}_bucket`) || []) {
    const le = labels.le === '+Inf' ? Infinity : Number(labels.le);
    counts.set(le, (counts.get(le) || 0) + value);
  }
  return [...counts].sort((a, b) => a[0] - b[0]);
}

/** A counter's growth from `before` to `after`; a restart (a smaller value) counts from 0. */
function growth(after, before) {
  return after >= before ? after - before : after;
}

/**
 * The q-quantile of the observations between two snapshots of a histogram, interpolated in its
 * bucket as Prometheus' histogram_quantile does; null when there were none.
 */
function quantile(q, after, before) {
  const restarted = !before || before.length !== after.length || after.some(([, c], i) => c < before[i][1]);
  const cumulative = after.map(([le, count], i) => [le, restarted ? count : count - before[i][1]]);
  const observed = cumulative.length ? cumulative[cumulative.length - 1][1] : 0;
  if (observed <= 0) return null;
  const rank = q * observed;
  let [lower, below] = [0, 0];
  for (const [le, count] of cumulative) {
    if (count >= rank) {
      if (le === Infinity) return lower;
      if (count === below) return le;
      return lower + ((le - lower) * (rank - below)) / (count - below);
    }
    [lower, below] = [le, count];
  }
  return lower;
}

// ---------------------------------------------------------------------------------------------
// Samples

/** The last SAMPLES snapshots, each `{t, counters, histograms}`, t in seconds. */
class Samples {
  constructor() {
    this.items = [];
  }

  push(sample) {
    this.items.push(sample);
    if (this.items.length > SAMPLES) this.items.shift();
  }

  get latest() {
    return this.items[this.items.length - 1];
  }

  /** The oldest sample within WINDOW_S of the latest (not the latest itself), or null. */
  get base() {
    const latest = this.latest;
    const base = this.items.find((s) => latest.t - s.t <= WINDOW_S + 0.5);
    return base && base !== latest ? base : null;
  }

  /** A counter's rate per second over the window, or null before the second sample. */
  rate(name) {
    const [latest, base] = [this.latest, this.base];
    if (!base) return null;
    return growth(latest.counters[name], base.counters[name]) / (latest.t - base.t);
  }

  /** A histogram's q-quantile over the window, or null. */
  quantile(name, q) {
    const base = this.base;
    return base ? quantile(q, this.latest.histograms[name], base.histograms[name]) : null;
  }
}

// ---------------------------------------------------------------------------------------------
// Formatting

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

function formatCount(n) {
  return n === null || n === undefined ? '–' : integer.format(n);
}

function formatRate(perSecond) {
  if (perSecond === null) return '–';
  if (Number.isInteger(perSecond) || perSecond >= 10) return integer.format(perSecond);
  return perSecond.toFixed(1);
}

function formatSeconds(seconds) {
  if (seconds === null || seconds === undefined) return '–';
  if (seconds < 0.001) return `${(seconds * 1000).toFixed(2)} ms`;
  if (seconds < 1) return `${(seconds * 1000).toPrecision(3)} ms`;
  return `${seconds.toPrecision(3)} s`;
}

/** A duration in words, to the second: "45 s", "3 min 12 s", "2 h 5 min", "3 d 4 h". */
function formatAge(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** An RFC 3339 time as served, with how long ago (or ahead) it is. */
function formatTime(rfc3339) {
  if (!rfc3339) return '–';
  const delta = (Date.now() - Date.parse(rfc3339)) / 1000;
  return `${rfc3339} (${delta >= 0 ? `${formatAge(delta)} ago` : `in ${formatAge(-delta)}`})`;
}

function setPill(id, text, kind) {
  const pill = $(id);
  pill.textContent = text;
  pill.className = `pill ${kind}`;
}

// ---------------------------------------------------------------------------------------------
// The chart

/** 1, 2 or 5 times a power of ten, at least `value`. */
function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((nice) => nice >= value);
}

/** The arguments of the last drawRates, to draw again at a new size. */
let lastChart = null;
window.addEventListener('resize', () => lastChart && drawRates(...lastChart));

/** Draws each counter's rate between consecutive samples, over the span of SAMPLES. */
function drawRates(canvas, samples, names) {
  lastChart = [canvas, samples, names];
  const ratio = window.devicePixelRatio || 1;
  const [width, height] = [canvas.clientWidth, canvas.clientHeight];
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const context = canvas.getContext('2d');
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.clearRect(0, 0, width, height);
  const items = samples.items;
  const lines = names.map((name) => {
    const points = [];
    for (let i = 1; i < items.length; i += 1) {
      const dt = items[i].t - items[i - 1].t;
      if (dt > 0) points.push([items[i].t, growth(items[i].counters[name], items[i - 1].counters[name]) / dt]);
    }
    return { name, points };
  });
  const top = niceCeiling(Math.max(1, ...lines.flatMap((l) => l.points.map(([, r]) => r))));
  const style = getComputedStyle(document.documentElement);
  const [left, right, upper, lower] = [44, width - 8, 8, height - 18];
  const span = ((SAMPLES - 1) * REFRESH_MS) / 1000;
  const end = items.length ? items[items.length - 1].t : 0;
  const x = (t) => left + ((t - (end - span)) / span) * (right - left);
  const y = (rate) => lower - (rate / top) * (lower - upper);

  context.font = '11px system-ui, sans-serif';
  context.fillStyle = style.getPropertyValue('--muted');
  context.strokeStyle = style.getPropertyValue('--line');
  context.lineWidth = 1;
  context.textAlign = 'right';
  context.textBaseline = 'middle';
  for (const rate of [0, top / 2, top]) {
    context.beginPath();
    context.moveTo(left, Math.round(y(rate)) + 0.5);
    context.lineTo(right, Math.round(y(rate)) + 0.5);
    context.stroke();
    context.fillText(`${formatRate(rate)}/s`, left - 6, y(rate));
  }
  context.textBaseline = 'top';
  context.textAlign = 'left';
  context.fillText('2 min ago', left, lower + 4);
  context.textAlign = 'right';
  context.fillText('now', right, lower + 4);

  context.lineWidth = 2;
  context.lineJoin = 'round';
  for (const { name, points } of lines) {
    if (points.length === 0) continue;
    context.strokeStyle = style.getPropertyValue(`--series-${name}`).trim() || '#888';
    context.beginPath();
    points.forEach(([t, rate], i) => (i === 0 ? context.moveTo(x(t), y(rate)) : context.lineTo(x(t), y(rate))));
    if (points.length === 1) context.lineTo(x(points[0][0]) - 2, y(points[0][1])); // a dot
    context.stroke();
  }
}

// ---------------------------------------------------------------------------------------------
// The token, and the refresh loop

/**
 * Calls `refresh` every REFRESH_MS. A 401 stops the loop and shows the token field; saving a
 * token starts it again.
 */
function startPage(refresh) {
  let generation = 0;

  // Each start of the loop is a generation; a call that returns after a newer one started (a
  // token was saved meanwhile) is ignored, whatever it answered.
  async function tick(mine) {
    const started = performance.now();
    try {
      await refresh();
      if (mine !== generation) return;
      setPill('connection', 'live', 'good');
      show('updated', `updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof Unauthorized) {
        askForToken();
        return;
      }
      console.error(error);
      setPill('connection', 'admin listener unreachable', 'bad');
    }
    setTimeout(() => mine === generation && tick(mine), Math.max(0, REFRESH_MS - (performance.now() - started)));
  }

  function restart() {
    generation += 1;
    tick(generation);
  }

  function askForToken() {
    generation += 1;
    const stored = sessionStorage.getItem(TOKEN_KEY);
    show('auth-message', stored ? 'The admin API refused this token.' : 'The admin API needs its token.');
    setPill('connection', 'needs the admin token', 'warn');
    $('auth').hidden = false;
    $('token').focus();
  }

  $('auth').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    $('auth').hidden = true;
    $('token-clear').hidden = false;
    restart();
  });
  $('token-clear').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $('token-clear').hidden = true;
    restart();
  });
  $('token-clear').hidden = !sessionStorage.getItem(TOKEN_KEY);
  restart();
  return { askForToken };
}

// ---------------------------------------------------------------------------------------------
// idem serve

/** The outcomes of idem_requests_total. */
const OUTCOMES = ['executed', 'replayed', 'conflict', 'mismatch', 'invalid', 'passthrough', 'too_large', 'store_error', 'overloaded'];
/** The outcomes idem answers itself with a 4xx or 5xx (the 409 and 422 aside). */
const REJECTED = ['invalid', 'too_large', 'store_error', 'overloaded'];
/** The tiles, each a counter of the samples. */
const GATEWAY_TILES = ['executed', 'replayed', 'conflict', 'mismatch', 'rejected', 'outcome_unknown', 'passthrough'];
const LATENCIES = {
  request: 'idem_request_duration_seconds',
  own: 'idem_request_own_duration_seconds',
  upstream: 'idem_upstream_duration_seconds',
};
const QUANTILES = { p50: 0.5, p90: 0.9, p99: 0.99 };
/** Keys held longer than this are listed: a request rarely takes as long. */
const STUCK_AFTER_S = 10;

function gatewaySample(metrics) {
  const counters = {};
  for (const outcome of OUTCOMES) {
    counters[outcome] = (metrics.get('idem_requests_total') || [])
      .filter((series) => series.labels.outcome === outcome)
      .reduce((sum, series) => sum + series.value, 0);
  }
  counters.rejected = REJECTED.reduce((sum, outcome) => sum + counters[outcome], 0);
  counters.outcome_unknown = total(metrics, 'idem_outcome_unknown_total');
  counters.store_full = total(metrics, 'idem_store_full_total');
  // Gauges, shown as they are.
  const streams = {
    in_progress: total(metrics, 'idem_streams_in_progress'),
    joiners: total(metrics, 'idem_stream_joiners'),
  };
  const histograms = {};
  for (const [name, metric] of Object.entries(LATENCIES)) histograms[name] = buckets(metrics, metric);
  return { t: performance.now() / 1000, counters, streams, histograms };
}

function renderRequests(samples) {
  const { counters } = samples.latest;
  for (const name of [...GATEWAY_TILES, ...REJECTED]) show(`total-${name}`, formatCount(counters[name]));
  for (const name of GATEWAY_TILES) show(`rate-${name}`, formatRate(samples.rate(name)));
  show('total-store_full', formatCount(counters.store_full));
  for (const [name, value] of Object.entries(samples.latest.streams)) show(`streams-${name}`, formatCount(value));
  for (const name of Object.keys(LATENCIES)) {
    for (const [label, q] of Object.entries(QUANTILES)) {
      show(`latency-${name}-${label}`, formatSeconds(samples.quantile(name, q)));
    }
  }
  drawRates($('rates-chart'), samples, GATEWAY_TILES);
}

function renderReadiness(response, text) {
  if (response.ok) setPill('store-health', 'ready', 'good');
  else setPill('store-health', text.trim() || `status ${response.status}`, 'bad');
}

/** The census of the records (absent until the first is done) and the store's last minute. */
function renderStats(stats) {
  const records = stats && stats.records;
  show('records-processing', formatCount(records && records.processing));
  show('records-completed', formatCount(records && records.completed));
  show('records-counted', records ? formatTime(records.counted_at) : stats ? 'not yet' : '–');
  const oldest = records && records.oldest_processing;
  show(
    'records-oldest',
    oldest ? `held for ${formatAge((Date.parse(records.counted_at) - Date.parse(oldest)) / 1000)}, since ${oldest}` : records ? 'none' : '–',
  );
  const store = stats && stats.store;
  if (!store) {
    for (const id of ['store-latency', 'store-calls', 'store-errors']) show(id, '–');
    return;
  }
  show('store-window', String(store.window_seconds));
  const latency = store.latency_seconds;
  show(
    'store-latency',
    latency
      ? Object.entries(latency).map(([name, seconds]) => `${name} ${formatSeconds(seconds)}`).join(' · ')
      : 'no calls',
  );
  show('store-calls', `${formatCount(store.calls)} calls`);
  show('store-errors', `${formatCount(store.errors)} errors`);
  $('store-errors').className = store.errors > 0 ? 'bad' : '';
}

/** The keys held longest, oldest first; a lease that ran out marks a request that died. */
function renderInFlight(list) {
  const body = $('stuck-keys');
  const rows = [];
  const records = list ? [...list.records].sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at)) : [];
  for (const record of records) {
    const row = document.createElement('tr');
    const leaseLeft = (Date.parse(record.lease_until) - Date.now()) / 1000;
    if (leaseLeft < 0) row.className = 'expired';
    const cells = [
      [record.key_sha256.slice(0, 16), record.key_sha256, 'hash'],
      [record.scope.slice(0, 16), record.scope, 'hash'],
      [formatAge((Date.now() - Date.parse(record.created_at)) / 1000), record.created_at],
      [leaseLeft < 0 ? `ran out ${formatAge(-leaseLeft)} ago` : `${formatAge(leaseLeft)} left`, record.lease_until],
      [String(record.token)],
    ];
    for (const [text, title, className] of cells) {
      const cell = document.createElement('td');
      cell.textContent = text;
      if (title) cell.title = title;
      if (className) cell.className = className;
      row.append(cell);
    }
    rows.push(row);
  }
  if (rows.length === 0) {
    const row = document.createElement('tr');
    const cell = document.createElement('td');
    cell.colSpan = 5;
    cell.className = 'muted';
    cell.textContent = list ? 'none' : '–';
    row.append(cell);
    rows.push(row);
  }
  body.replaceChildren(...rows);
}

/** The path of a key's record. A key of only dots would be a `.` or `..` segment: URLs cannot name it. */
function keyPath(key, scope, force) {
  if (/^\.{1,2}$/.test(key)) return null;
  const query = new URLSearchParams();
  if (scope) query.set('scope', scope);
  if (force) query.set('force', 'true');
  const search = query.toString();
  return `/v1/keys/${encodeURIComponent(key)}${search ? `?${search}` : ''}`;
}

/** Shows `text` in the confirmation dialog; true when the operator confirms. */
function confirmed(text, action) {
  const dialog = $('confirm');
  show('confirm-text', text);
  show('confirm-ok', action);
  return new Promise((resolve) => {
    const answer = (yes) => {
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(yes);
    };
    $('confirm-ok').onclick = () => answer(true);
    $('confirm-cancel').onclick = () => answer(false);
    dialog.onclose = () => answer(false);
    dialog.showModal();
    $('confirm-cancel').focus();
  });
}

function keyLookup(page) {
  let shown = null;

  function status(text, kind = '') {
    show('lookup-status', text);
    $('lookup-status').className = kind || 'muted';
  }

  /** Runs `action`; a 401 asks for the token, a network failure is said. */
  async function guarded(action) {
    try {
      await action();
    } catch (error) {
      if (error instanceof Unauthorized) {
        status('The admin API needs its token.', 'bad');
        page.askForToken();
      } else {
        status(`The admin listener did not answer: ${error.message}`, 'bad');
      }
    }
  }

  function showRecord(record) {
    for (const field of ['state', 'key_digest', 'scope', 'token']) show(`record-${field}`, String(record[field]));
    show('record-status', record.status === undefined ? '–' : String(record.status));
    for (const field of ['created_at', 'completed_at', 'lease_until', 'expires_at']) show(`record-${field}`, formatTime(record[field]));
    $('record').hidden = false;
  }

  function hideRecord() {
    shown = null;
    $('record').hidden = true;
  }

  $('lookup').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = $('lookup-key').value;
    const scope = $('lookup-scope').value.trim();
    const path = keyPath(key, scope);
    hideRecord();
    if (!path) {
      status('A key of only dots cannot be named in a URL: use `idem keys show`.', 'bad');
      return;
    }
    status('Looking up…');
    guarded(async () => {
      const response = await call(path);
      if (response.ok) {
        showRecord(await response.json());
        shown = { key, scope };
        status('Found.', 'good');
      } else if (response.status === 404) {
        status(`Not found: no live record under this key in ${scope ? 'this' : 'the anonymous'} scope.`, 'bad');
      } else {
        status(await failure(response), 'bad');
      }
    });
  });

  $('forget').addEventListener('click', () => {
    const target = shown;
    if (!target) return;
    guarded(async () => {
      const where = target.scope ? 'in this scope' : 'in the anonymous scope';
      if (!(await confirmed(`Forget the key “${target.key}” ${where}? Its stored response is dropped, and the next request with this key executes again.`, 'Forget'))) return;
      let response = await call(keyPath(target.key, target.scope), 'DELETE');
      if (response.status === 409) {
        const again = 'A request holds this key now. Forgetting it anyway discards that request’s result when it finishes, and the next request with this key executes, possibly while the first still runs.';
        if (!(await confirmed(again, 'Forget anyway'))) return;
        response = await call(keyPath(target.key, target.scope, true), 'DELETE');
      }
      if (response.status === 204) {
        hideRecord();
        status(`Forgotten: the next request with “${target.key}” executes again.`, 'good');
      } else if (response.status === 404) {
        hideRecord();
        status('Not found: the record was already gone.', 'bad');
      } else {
        status(await failure(response), 'bad');
      }
    });
  });
}

function gatewayPage() {
  const samples = new Samples();
  show('window', String(WINDOW_S));
  show('latency-window', String(WINDOW_S));
  show('stuck-age', formatAge(STUCK_AFTER_S));
  const page = startPage(async () => {
    // Four calls a refresh, in parallel.
    const [metrics, readiness, stats, inFlight] = await Promise.all([
      call('/metrics').then((r) => r.text()),
      call('/readyz').then(async (r) => [r, await r.text()]),
      callJson('/v1/stats'),
      callJson(`/v1/keys?state=processing&older_than=${STUCK_AFTER_S}s&limit=10`),
    ]);
    samples.push(gatewaySample(parseMetrics(metrics)));
    renderRequests(samples);
    renderReadiness(...readiness);
    renderStats(stats);
    renderInFlight(inFlight);
  });
  keyLookup(page);
}

// ---------------------------------------------------------------------------------------------
// idem relay

const RELAY_COUNTERS = {
  published: 'idem_outbox_published_total',
  failed: 'idem_outbox_failed_total',
  dead_lettered: 'idem_outbox_dead_lettered_total',
  released: 'idem_outbox_released_total',
};

function relayPage() {
  const samples = new Samples();
  show('window', String(WINDOW_S));
  startPage(async () => {
    const [metrics, outbox] = await Promise.all([call('/metrics').then((r) => r.text()), callJson('/v1/outbox')]);
    const parsed = parseMetrics(metrics);
    const counters = {};
    for (const [name, metric] of Object.entries(RELAY_COUNTERS)) counters[name] = total(parsed, metric);
    samples.push({ t: performance.now() / 1000, counters, histograms: {} });
    for (const name of Object.keys(RELAY_COUNTERS)) {
      show(`total-${name}`, formatCount(counters[name]));
      show(`rate-${name}`, formatRate(samples.rate(name)));
    }
    drawRates($('rates-chart'), samples, Object.keys(RELAY_COUNTERS));
    for (const field of ['due', 'in_flight', 'dead_letters']) show(`outbox-${field}`, formatCount(outbox && outbox[field]));
    const oldest = outbox && outbox.oldest_due;
    show('outbox-oldest_due', oldest ? `${formatAge((Date.now() - Date.parse(oldest)) / 1000)} old` : outbox ? 'none' : '–');
  });
}

// ---------------------------------------------------------------------------------------------
// idem deliver

/** Each tile's counter: a metric and the label value it is summed over. */
const DELIVER_COUNTERS = {
  delivered: ['idem_deliver_messages_total', 'outcome', 'delivered'],
  retried: ['idem_deliver_attempts_total', 'answer', 'retry', 'no_answer'],
  dead_lettered: ['idem_deliver_messages_total', 'outcome', 'dead_lettered'],
  given_back: ['idem_deliver_messages_total', 'outcome', 'given_back'],
};

function deliverPage() {
  const samples = new Samples();
  show('window', String(WINDOW_S));
  startPage(async () => {
    const parsed = parseMetrics(await call('/metrics').then((r) => r.text()));
    const counters = {};
    for (const [name, [metric, label, ...values]] of Object.entries(DELIVER_COUNTERS)) {
      counters[name] = (parsed.get(metric) || [])
        .filter((series) => values.includes(series.labels[label]))
        .reduce((sum, series) => sum + series.value, 0);
    }
    samples.push({ t: performance.now() / 1000, counters, histograms: {} });
    for (const name of Object.keys(DELIVER_COUNTERS)) {
      show(`total-${name}`, formatCount(counters[name]));
      show(`rate-${name}`, formatRate(samples.rate(name)));
    }
    drawRates($('rates-chart'), samples, Object.keys(DELIVER_COUNTERS));
    show('deliver-in_flight', formatCount(total(parsed, 'idem_deliver_in_flight')));
  });
}

const pages = { gateway: gatewayPage, relay: relayPage, deliver: deliverPage };
pages[document.body.dataset.page]();

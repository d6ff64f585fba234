// The demo page: a button that starts a `demo` job through the TypeScript
// client (clients/typescript, compiled; served by the local server at
// /lib/onejob/), shows its status live and draws its attempts on a
// timeline; a streamed job (`demo-stream`, "stream": true) also shows its
// answer as it forms, read from the job's stream_url. Open it through the
// link `make run` prints: its fragment carries the API's URL and a token.
import { IdempotencyKeyReusedError, OnejobClient, StorageKeyStore, StreamedAnswer, isTerminal } from "/lib/onejob/index.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const api = params.get("api") ?? location.origin;
const token = params.get("token") ?? "";

// The one intent of this form. A real app names it after what the user
// means once: this form instance, a cart, a draft.
const INTENT = "demo-form";

const client = new OnejobClient({
  baseUrl: api,
  token,
  // localStorage: the key survives a reload, so a click after it resends it.
  keyStore: new StorageKeyStore(localStorage),
  // A person is waiting: a few quick retries, then tell them.
  retry: { maxAttempts: 4, baseDelayMs: 200, maxDelayMs: 2000 },
  onRetry: (r) => notice(`no usable answer (${r.reason}); retrying with the same key…`),
});

let clicks = 0;
let following = null; // { id, abort }
let job = null;

const scripts = {
  ok: undefined,
  slow: { "sim-primary": { latency_ms: 1500 } },
  late: { "sim-primary": { latency_ms: 3000 } },
  error: { "sim-primary": { outcome: "error" } },
};

// A streamed answer comes at a model's pace, from either provider.
const pace = { first_token_ms: 300, tokens_per_second: 50 };
const paced = (script) => ({
  "sim-primary": { ...pace, ...script?.["sim-primary"] },
  "sim-fallback": { ...pace, ...script?.["sim-fallback"] },
});

function body() {
  const simulate = scripts[$("primary").value];
  const input = { prompt: $("prompt").value };
  if ($("stream").checked) {
    input.simulate = paced(simulate);
    return { type: "demo-stream", stream: true, input };
  }
  if (simulate) input.simulate = simulate;
  return { type: "demo", input };
}

function fillForm(b) {
  $("prompt").value = b.input?.prompt ?? "";
  $("stream").checked = b.type === "demo-stream";
  const script = (k) => (b.type === "demo-stream" ? paced(scripts[k]) : scripts[k]);
  const s = JSON.stringify(b.input?.simulate);
  $("primary").value = Object.keys(scripts).find((k) => JSON.stringify(script(k)) === s) ?? "ok";
}

function show(el, text) {
  $(el).hidden = !text;
  $(el).textContent = text ?? "";
}
const notice = (text) => show("notice", text);

function logClick(n, outcome, jobId, text) {
  const li = document.createElement("li");
  li.dataset.click = String(n);
  li.dataset.outcome = outcome;
  if (jobId) li.dataset.jobId = jobId;
  li.textContent = text;
  $("clicks").append(li);
}

async function start() {
  const n = ++clicks;
  show("conflict");
  show("error");
  const sent = client.submit(INTENT, body());
  // The key is stored before the request leaves; show it.
  void sent.finally(showKey).catch(() => undefined);
  try {
    const { job: j, replayed } = await sent;
    notice();
    logClick(n, replayed ? "replayed" : "created", j.id, `click ${n}: ${j.id} ${replayed ? "(replayed: the same job)" : "(created)"}`);
    render(j);
    follow(j.id);
  } catch (err) {
    if (err instanceof IdempotencyKeyReusedError) {
      show("conflict", `This intent already made job ${err.jobId} from different input. ` +
        `Nothing new was created: press “New intent” to submit the edited input as a new job.`);
      logClick(n, "conflict", err.jobId, `click ${n}: conflict — this intent is job ${err.jobId}`);
      follow(err.jobId);
      return;
    }
    notice();
    show("error", `${err.message}. Click again: it resends the same key, so it cannot make a second job.`);
    logClick(n, "error", "", `click ${n}: no answer (${err.name})`);
  }
}

async function showKey() {
  const stored = await client.intent(INTENT);
  if (stored) $("intent-key").textContent = stored.key;
}

function follow(id) {
  if (following?.id === id) return;
  following?.abort.abort();
  const abort = new AbortController();
  following = { id, abort };
  client.wait(id, { signal: abort.signal, onUpdate: render }).catch((err) => {
    if (!abort.signal.aborted) show("error", `waiting for ${id}: ${err.message}`);
  });
}

async function newIntent() {
  following?.abort.abort();
  following = null;
  streaming?.abort.abort();
  streaming = null;
  $("streaming").hidden = true;
  await client.forget(INTENT);
  job = null;
  $("intent-key").textContent = "none yet: made on the first click, kept until “New intent”";
  $("job-id").textContent = "–";
  $("status").textContent = "–";
  $("status").dataset.status = "";
  $("result").textContent = "–";
  $("clicks").replaceChildren();
  clicks = 0;
  deliveriesFor = null;
  drawDeliveries([]);
  for (const id of ["notice", "conflict", "error"]) show(id);
  drawTimeline();
}

// The job's webhook deliveries, read again while one is pending (a retry
// may be due), at most a minute.
let deliveriesFor = null;
async function followDeliveries(id) {
  if (deliveriesFor === id) return;
  deliveriesFor = id;
  for (let i = 0; i < 60 && deliveriesFor === id; i++) {
    let list;
    try {
      list = await client.deliveries(id);
    } catch {
      list = { deliveries: [] };
    }
    if (deliveriesFor !== id) return;
    drawDeliveries(list.deliveries);
    if (list.deliveries.length > 0 && list.deliveries.every((d) => d.state !== "pending")) return;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function drawDeliveries(ds) {
  const rows = ds.map((d) => {
    const tr = document.createElement("tr");
    tr.dataset.state = d.state;
    tr.dataset.type = d.type;
    tr.dataset.tries = String(d.tries.length);
    const tries = d.tries.map((t) => `${t.status ?? t.error ?? "?"} ${t.latency_ms} ms`).join(", ");
    for (const text of [d.type, d.endpoint_id, d.state, tries]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("deliveries").querySelector("tbody").replaceChildren(...rows);
  $("no-deliveries").hidden = rows.length > 0;
}

function render(j) {
  job = j;
  if (j.stream) void streamAnswer(j);
  if (isTerminal(j.status)) void followDeliveries(j.id);
  $("job-id").textContent = j.id;
  $("status").textContent = j.status;
  $("status").dataset.status = j.status;
  $("result").textContent = j.result ? JSON.stringify(j.result) : j.error ? `${j.error.class}: ${j.error.message}` : "–";
  drawTimeline();
}

// The job's answer as it forms: every event of its stream, in order,
// applied to a StreamedAnswer (which throws on a repeated or missing
// delta); the text shown is the leading attempt's, provisional until the
// final event. The client resumes a dropped connection by itself.
let streaming = null; // { id, abort }
async function streamAnswer(j) {
  if (streaming?.id === j.id) return;
  streaming?.abort.abort();
  const abort = new AbortController();
  streaming = { id: j.id, abort };
  const answer = new StreamedAnswer();
  let deltas = 0;
  let reconnects = 0;
  const el = $("answer");
  el.textContent = "";
  delete el.dataset.final;
  $("dropped").replaceChildren();
  $("streaming").hidden = false;
  const state = (text) => {
    $("stream-state").textContent = text;
    $("stream-counts").textContent = `${deltas} deltas, ${reconnects} reconnections`;
    el.dataset.deltas = String(deltas);
    el.dataset.reconnects = String(reconnects);
  };
  state("connecting…");
  try {
    for await (const ev of client.jobs.stream(j, {
      signal: abort.signal,
      onReconnect: (r) => {
        if (r.reason !== "ended") reconnects++;
        state(r.reason === "ended" ? "live" : `reconnecting (${r.reason}; try ${r.attempt}, in ${r.delayMs} ms)…`);
      },
    })) {
      answer.apply(ev);
      if (ev.type === "output.delta") deltas++;
      if (ev.type === "attempt.discarded") {
        const a = answer.attempts.get(ev.data.attempt);
        const li = document.createElement("li");
        li.dataset.attempt = String(ev.data.attempt);
        li.textContent = `attempt ${a.attempt} (${a.provider}): ${ev.data.reason}; its text was dropped`;
        $("dropped").append(li);
      }
      el.textContent = answer.text;
      if (answer.job) {
        el.dataset.final = answer.job.status;
        state(`ended: ${answer.job.status}`);
        render(answer.job);
      } else {
        state("live");
      }
    }
  } catch (err) {
    if (!abort.signal.aborted) {
      state("stopped");
      show("error", `streaming ${j.id}: ${err.message}`);
    }
  }
}

const colors = { starting: "#c5cad3", running: "#f2c94c", unknown: "#f2994a", succeeded: "#27ae60", failed: "#eb5757",
  cancelled: "#9b51e0", discarded: "#a0a7b4" };

// One bar per attempt, from its start to its end (or now), on a scale from
// the job's creation.
function drawTimeline() {
  const svg = $("timeline");
  const NS = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (!job) {
    svg.setAttribute("height", "0");
    return;
  }
  const t0 = Date.parse(job.created_at);
  const now = Date.now();
  const ends = job.attempts.map((a) => (a.finished_at ? Date.parse(a.finished_at) : now));
  const t1 = Math.max(t0 + 2000, ...ends, isTerminal(job.status) ? 0 : now);
  const left = 150;
  const width = 640 - left - 10;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * width;
  const rowH = 24;
  svg.setAttribute("height", String(24 + job.attempts.length * rowH));
  const axis = document.createElementNS(NS, "text");
  axis.setAttribute("x", String(left));
  axis.setAttribute("y", "12");
  axis.textContent = `0 s … ${((t1 - t0) / 1000).toFixed(1)} s since the job was created`;
  svg.append(axis);
  job.attempts.forEach((a, i) => {
    const y = 20 + i * rowH;
    const start = Date.parse(a.started_at);
    const end = ends[i];
    const label = document.createElementNS(NS, "text");
    label.setAttribute("x", "0");
    label.setAttribute("y", String(y + 14));
    label.textContent = `#${a.number} ${a.provider}`;
    const bar = document.createElementNS(NS, "rect");
    bar.setAttribute("x", String(x(start)));
    bar.setAttribute("y", String(y + 3));
    bar.setAttribute("width", String(Math.max(3, x(end) - x(start))));
    bar.setAttribute("height", "16");
    bar.setAttribute("rx", "3");
    bar.setAttribute("fill", colors[a.state] ?? "#888");
    bar.dataset.attempt = String(a.number);
    bar.dataset.state = a.state;
    const title = document.createElementNS(NS, "title");
    title.textContent = `attempt ${a.number} on ${a.provider}: ${a.state}`;
    bar.append(title);
    const state = document.createElementNS(NS, "text");
    state.setAttribute("x", String(Math.min(x(end) + 6, 640 - 70)));
    state.setAttribute("y", String(y + 14));
    state.textContent = a.state;
    svg.append(label, bar, state);
  });
}

// Open attempts grow while you watch.
setInterval(() => {
  if (job && !isTerminal(job.status)) drawTimeline();
}, 250);

async function boot() {
  $("intent-name").textContent = INTENT;
  $("start").addEventListener("click", () => void start());
  $("new-intent").addEventListener("click", () => void newIntent());
  if (!token) {
    show("error", "No token: open the link `make run` prints (its #fragment carries the API's URL and a token).");
    return;
  }
  const stored = await client.intent(INTENT);
  if (stored) {
    // A reload or a return visit: the intent and its key are still here.
    $("intent-key").textContent = stored.key;
    fillForm(stored.body);
    if (stored.jobId) {
      follow(stored.jobId);
    } else {
      notice("This intent was sent but no answer arrived (the page was reloaded, or the network dropped it). " +
        "Click “Start job”: it resends the same key, so it cannot make a second job.");
    }
  }
  document.body.dataset.ready = "true";
}

boot();

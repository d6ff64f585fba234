// The console's pure functions (internal/apigw/console/console.mjs) under
// Node: the timeline's layout, attempt roles, usage sums, problem display,
// the fragment and the token's claims, blocked jobs grouped by provider,
// provider health, a bulk resolution's window and its summed answers, a
// job's trace laid out as a tree of spans, a job's stream read in pieces.
// The page itself is tested in Chromium (console.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  SSEParser, applyStreamEvent, attemptRoles, decodeClaims, describeProvider, formatDuration, groupBlocked, layoutSpans, layoutTimeline,
  oldestFirst, parseWindow, problemFields, problemFrom, readFragment, remoteLines, sumBulk, sumUsage,
} from "../../../internal/apigw/console/console.mjs";

const at = (ms) => new Date(Date.UTC(2026, 0, 2, 3, 4, 5) + ms).toISOString();
const job = (over = {}) => ({ id: "job_a", type: "demo", status: "running", created_at: at(0), ...over });

test("a hedged race: the hedge starts later, finishes first and wins; the primary is discarded", () => {
  const attempts = [
    { number: 1, provider: "sim-primary", state: "discarded", started_at: at(0), finished_at: at(1500), hedge: false },
    { number: 2, provider: "sim-fallback", state: "succeeded", started_at: at(500), finished_at: at(600), hedge: true },
  ];
  const tl = layoutTimeline(job({ status: "succeeded", completed_by: 2 }), attempts, Date.parse(at(99_999)));
  const [p, h] = tl.lanes;
  assert.deepEqual([p.role, p.winner, p.open, h.role, h.winner, h.hedge], ["first", false, false, "hedge", true, true]);
  assert.equal(p.left, 0);
  assert.equal(p.width, 100);
  assert.ok(Math.abs(h.left - 100 / 3) < 1e-9 && Math.abs(h.width - 100 / 15) < 1e-9, JSON.stringify(h));
  assert.equal(tl.end - tl.start, 1500, "the span ends with the last attempt, not now");
  assert.ok(tl.ticks.length >= 2 && tl.ticks.length <= 9 && tl.ticks[0].label === "0");
});

test("an open attempt runs to now; its unknown stretch is marked from unknown_since", () => {
  const attempts = [{ number: 1, provider: "p", state: "unknown", started_at: at(1000), unknown_since: at(3000) }];
  const tl = layoutTimeline(job({ status: "unknown" }), attempts, Date.parse(at(5000)));
  const [l] = tl.lanes;
  assert.equal(tl.start, Date.parse(at(0)), "from the job's creation: its wait before the first start shows");
  assert.equal(l.open, true);
  assert.equal(l.left, 20);
  assert.equal(l.width, 80);
  assert.equal(l.unknownFrom, 50, "the last half of the bar was unknown");
  assert.equal(l.durationMs, 4000);
});

test("attempt roles: fallbacks to the next provider, retries of the same one, hedges", () => {
  const a = (number, provider, hedge = false) => ({ number, provider, hedge, state: "failed", started_at: at(number) });
  assert.deepEqual(attemptRoles([a(1, "x"), a(2, "y", true), a(3, "y"), a(4, "y"), a(5, "z")]), ["first", "hedge", "fallback", "retry", "fallback"]);
  assert.deepEqual(attemptRoles([]), []);
});

test("usage: the job's own sum when it has one, else the attempts' summed, else none", () => {
  const attempts = [
    { number: 1, usage: { model: "m", input_tokens: 10, output_tokens: 2, latency_ms: 100 } },
    { number: 2, usage: { model: "m", input_tokens: 5, output_tokens: 1, latency_ms: 50 } },
    { number: 3 },
  ];
  assert.deepEqual(sumUsage(job(), attempts), { input_tokens: 15, output_tokens: 3, latency_ms: 150, attempts: 2, source: "attempts" });
  assert.deepEqual(sumUsage(job({ usage: { input_tokens: 1, output_tokens: 2, latency_ms: 3, attempts: 3 } }), attempts),
    { input_tokens: 1, output_tokens: 2, latency_ms: 3, attempts: 3, source: "job" });
  assert.equal(sumUsage(job(), [{ number: 1 }]).source, "none");
});

test("problems: RFC 9457 documents with their extension members, the gateway's own answers, plain text", () => {
  const p = problemFrom(409, "application/problem+json", JSON.stringify({
    type: "https://onejob.dev/problems/resolution-conflict", title: "Resolution conflict", status: 409,
    detail: "attempt 1 is succeeded", request_id: "r1", attempt_state: "succeeded", errors: [{ pointer: "/outcome", detail: "x" }],
  }));
  assert.equal(p.title, "Resolution conflict");
  assert.deepEqual(problemFields(p), [
    ["type", "https://onejob.dev/problems/resolution-conflict"], ["detail", "attempt 1 is succeeded"], ["request_id", "r1"],
    ["attempt_state", "succeeded"],
  ]);
  assert.deepEqual(problemFrom(401, "application/json", '{"message":"Unauthorized"}').title, "Unauthorized");
  assert.deepEqual(problemFrom(502, "text/html", "<h1>Bad gateway</h1>"), { status: 502, title: "HTTP 502", detail: "<h1>Bad gateway</h1>" });
});

test("the fragment gives up its token and job, keeping the rest", () => {
  assert.deepEqual(readFragment("#token=abc.def&job=job_x&view=1"), { token: "abc.def", job: "job_x", rest: "view=1" });
  assert.deepEqual(readFragment(""), { token: "", job: "", rest: "" });
});

test("claims are read for display, never trusted", () => {
  const enc = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const token = `${enc({ alg: "HS256" })}.${enc({ sub: "operator", scope: "openid jobs:admin", exp: 1767225600 })}.sig`;
  assert.deepEqual(decodeClaims(token), { sub: "operator", scopes: ["openid", "jobs:admin"], exp: 1767225600 });
  assert.equal(decodeClaims("not-a-jwt"), null);
  assert.equal(decodeClaims("a.!!!.c"), null);
});

test("durations and ordering", () => {
  assert.deepEqual([850, 1500, 42_000, 200_000, 7_500_000].map(formatDuration), ["850 ms", "1.5 s", "42 s", "3 min 20 s", "2 h 5 min"]);
  const jobs = [job({ id: "b", created_at: at(2) }), job({ id: "a", created_at: at(1) }), job({ id: "b", created_at: at(2) })];
  assert.deepEqual(oldestFirst(jobs).map((j) => j.id), ["a", "b"]);
});

test("blocked jobs are grouped by the provider they wait on, oldest first, each group since its earliest unknown attempt", () => {
  const blocked = (id, created, provider, since, waiting = true) => job({
    id, status: "unknown", created_at: at(created),
    attempts: [{ number: 1, provider: "first", state: "failed", started_at: at(created) },
      { number: 2, provider, state: "unknown", started_at: at(created) }],
    ...(waiting ? { waiting: { reason: "attempt_unknown", since: at(since), attempt: 2, provider } } : {}),
  });
  const groups = groupBlocked([blocked("c", 3, "sim-primary", 9), blocked("a", 1, "sim-primary", 7),
    blocked("b", 2, "sim-fallback", 5), blocked("d", 4, "sim-fallback", 0, false)]);
  assert.deepEqual(groups.map((g) => [g.provider, g.jobs.map((j) => j.id), g.since]), [
    ["sim-fallback", ["b", "d"], at(5)],
    ["sim-primary", ["a", "c"], at(7)],
  ]);
  assert.deepEqual(groupBlocked([job({ id: "x", status: "unknown" })]).map((g) => [g.provider, g.jobs.length, g.since]), [["", 1, ""]]);
});

test("a provider's health: its state, why, failures in a stable order, counts, an override and what may be forced", () => {
  const open = describeProvider({
    name: "p", state: "open", breaker_state: "open", reason: "5 failures within 1m0s", open_until: at(30_000), cooldown_seconds: 30,
    trips: 1, failures: { slow: 1, unknown: 3, mystery: 2, server_error: 0 }, held: 2, probes: 0, opened: 1,
  });
  assert.deepEqual(open, {
    state: "open", why: `5 failures within 1m0s; takes attempts again from ${at(30_000)} (cooldown 30 s, trip 1)`,
    failures: "3 unknown, 1 slow, 2 mystery", counts: "2 held, 0 probes, opened 1 time", override: "", actions: ["open", "closed"],
  });
  // Cancelled jobs' calls past the provider's max_processing_time: shown
  // as overdue, beside what still holds it.
  assert.equal(describeProvider({ name: "p", state: "closed", held: 1, overdue: 3, probes: 0, opened: 0 }).counts,
    "1 held, 3 overdue, 0 probes, opened 0 times");
  const forced = describeProvider({
    name: "p", state: "open", breaker_state: "closed", forced: { state: "open", by: "op", reason: "status page", at: at(0) },
  });
  assert.equal(forced.override, `forced open by op at ${at(0)}: status page`);
  assert.equal(forced.why, "its breaker alone: closed");
  assert.equal(forced.failures, "none");
  assert.deepEqual(forced.actions, ["closed", "auto"], "forced open: force closed or clear");
  assert.deepEqual(describeProvider({ name: "p", state: "closed", forced: { state: "closed", by: "op", reason: "r", at: at(0) } }).actions,
    ["open", "auto"]);
});

test("a bulk window: RFC 3339 ends sent as typed, either open, the start before the end", () => {
  const tests = [
    { name: "Open", from: "", to: "", want: { from: "", to: "", errors: {} } },
    { name: "Nanoseconds", from: " 2026-12-02T01:00:00.123456789Z ", to: "",
      want: { from: "2026-12-02T01:00:00.123456789Z", to: "", errors: {} } },
    { name: "Offset", from: "2026-12-02T02:00:00+01:00", to: "2026-12-02T01:30:00Z",
      want: { from: "2026-12-02T02:00:00+01:00", to: "2026-12-02T01:30:00Z", errors: {} } },
    { name: "NoZone", from: "2026-12-02T01:00:00", to: "", wantErrors: ["from"] },
    { name: "Words", from: "", to: "yesterday", wantErrors: ["to"] },
    { name: "Backwards", from: "2026-12-02T02:00:00Z", to: "2026-12-02T01:00:00Z", wantErrors: ["to"] },
  ];
  for (const tt of tests) {
    const got = parseWindow(tt.from, tt.to);
    if (tt.want) {
      assert.deepEqual(got, tt.want, tt.name);
    } else {
      assert.deepEqual(Object.keys(got.errors), tt.wantErrors, tt.name);
    }
  }
});

test("a bulk resolution's answers are summed across its requests, at most max attempts kept", () => {
  const a = (id) => ({ job_id: id, owner: "o", attempt: 1, unknown_since: at(0), result: "resolved" });
  const r = sumBulk([
    { dry_run: false, matched: 3, resolved: 2, conflicts: 1, scanned: 1000, attempts: [a("x"), a("y"), a("z")], next_cursor: "c" },
    { dry_run: false, matched: 1, resolved: 1, conflicts: 0, scanned: 7, attempts: [a("w")] },
  ], 3);
  assert.deepEqual({ ...r, attempts: r.attempts.map((x) => x.job_id) },
    { dry_run: false, matched: 4, resolved: 3, conflicts: 1, scanned: 1007, attempts: ["x", "y", "z"], listed: 3 });
  assert.equal(sumBulk([{ dry_run: true, matched: 0, resolved: 0, conflicts: 0, scanned: 0, attempts: [] }]).dry_run, true);
});

test("an asynchronous attempt's work at its provider: id, status, when heard, when asked next or the cancel asked", () => {
  assert.deepEqual(remoteLines(undefined), []);
  const r = { id: "resp_1", status: "in_progress", tier: "now", submitted_at: at(0), heard_at: at(60_000), next_poll_at: at(120_000),
    polls: 2, found: true };
  const [first, second] = remoteLines(r);
  assert.equal(first, "at provider: resp_1 (in_progress), tier now, found after a lost submit");
  assert.match(second, /^heard .+, 2 polls; asks next .+$/);
  assert.match(remoteLines({ ...r, found: false, status: undefined, cancel_requested_at: at(90_000) })[1], /; cancel asked /);
  assert.equal(remoteLines({ ...r, found: false, status: undefined })[0], "at provider: resp_1, tier now");
  assert.match(remoteLines({ ...r, status: "completed" }, false)[1], /^heard .+, 2 polls$/, "an ended attempt asks nothing next");
  assert.match(remoteLines({ ...r, deadline: at(1_200_000) })[1], /; asks next .+; given up .+$/, "open work shows its deadline");
  assert.match(remoteLines({ ...r, deadline: at(1_200_000) }, false)[1], /^heard .+, 2 polls$/, "ended work no deadline");
});

test("a job's trace: each span under its parent, siblings by start, the client's span (not recorded) a root's parent", () => {
  const span = (id, parent, start, end, over = {}) => ({ span_id: id, parent_span_id: parent, name: id, kind: "internal",
    service: "onejob-run", start: at(start), end: at(end), error: false, ...over });
  const l = layoutSpans([
    span("call-2", "attempt-2", 700, 900, { kind: "client" }),
    span("run", "create", 100, 1000),
    span("attempt-2", "run", 650, 950),
    span("create", "client", 0, 50, { service: "onejob-api" }),
    span("attempt-1", "run", 150, 600, { error: true }),
    span("loop-a", "loop-b", 0, 1), span("loop-b", "loop-a", 0, 1), // a cycle: shown once each, after the tree
  ]);
  assert.deepEqual(l.rows.filter((r) => !r.id.startsWith("loop")).map((r) => `${r.id}@${r.depth}`),
    ["create@0", "run@1", "attempt-1@2", "attempt-2@2", "call-2@3"]);
  assert.deepEqual(l.rows.slice(5).map((r) => `${r.id}@${r.depth}`), ["loop-a@0", "loop-b@1"]);
  const byId = Object.fromEntries(l.rows.map((r) => [r.id, r]));
  assert.equal(l.end - l.start, 1000);
  assert.deepEqual([byId.run.left, byId.run.width, byId["call-2"].left, byId["call-2"].durationMs], [10, 90, 70, 200]);
  assert.ok(byId["attempt-1"].error && !byId.run.error);
  assert.deepEqual(layoutSpans([]).rows, []);
});

test("a stream read in pieces: events whole whatever the cuts, ids kept, each attempt's text in order", () => {
  const text = "id: 1.0\r\nevent: attempt.started\r\ndata: {\"attempt\":1,\"provider\":\"sim-primary\",\"hedge\":false,\"fallback\":false}\r\n\r\n" +
    ": hb\n\nid: 1.1\nevent: output.delta\ndata: {\"attempt\":1,\"seq\":1,\"text\":\"hel\"}\n\n" +
    "id: 1.2\revent: output.delta\rdata: {\"attempt\":1,\"seq\":2,\"text\":\"lo\"}\r\r" +
    "id: 1.2d\nevent: attempt.discarded\ndata: {\"attempt\":1,\"reason\":\"cut\"}\n\n" +
    "id: 1.2d,f\nevent: job.failed\ndata: {\"id\":\"job_a\",\"status\":\"failed\"}\n\nevent: half\ndata: {";
  for (const size of [1, 2, 3, 7, 64, text.length]) {
    const p = new SSEParser();
    const events = [];
    for (let i = 0; i < text.length; i += size) events.push(...p.feed(text.slice(i, i + size)));
    assert.deepEqual(events.map((e) => [e.id, e.type]), [["1.0", "attempt.started"], ["1.1", "output.delta"], ["1.2", "output.delta"],
      ["1.2d", "attempt.discarded"], ["1.2d,f", "job.failed"]], `cut every ${size}`);
    const attempts = new Map();
    const finals = events.map((e) => applyStreamEvent(attempts, e));
    assert.deepEqual(attempts.get(1), { attempt: 1, provider: "sim-primary", hedge: false, fallback: false, text: "hello", seq: 2, discarded: "cut" });
    assert.deepEqual(finals.at(-1), { id: "job_a", status: "failed" });
  }
  // A delta out of order is text repeated or missing: refused.
  const attempts = new Map();
  applyStreamEvent(attempts, { id: "1", type: "attempt.started", data: '{"attempt":1,"provider":"p"}' });
  applyStreamEvent(attempts, { id: "2", type: "output.delta", data: '{"attempt":1,"seq":1,"text":"a"}' });
  assert.throws(() => applyStreamEvent(attempts, { id: "2", type: "output.delta", data: '{"attempt":1,"seq":1,"text":"a"}' }), /delta 1 after 1/);
  assert.throws(() => applyStreamEvent(attempts, { id: "3", type: "output.delta", data: '{"attempt":1,"seq":3,"text":"c"}' }), /delta 3 after 1/);
});

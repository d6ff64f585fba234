package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Issues 29 and 40: what a long job costs while it waits, synchronous (one
// run holds the provider call) against asynchronous (the run submits and
// ends its execution with the job parked; the webhook, or the scheduled
// pass polling by the work's id, applies its end, and a run is started
// only if the job then needs one). Nothing here is measured on its own:
// every row is the happy path measured in the same run plus the design's
// counts, taken from the code (the poll and wait schedules, the pass's
// period, the work's deadline, the call timeout, the state machine's loop)
// and priced as the cost table prices a scenario.

// longJobLatencies are the provider latencies the section prices.
var longJobLatencies = []time.Duration{2 * time.Second, 30 * time.Second, 10 * time.Minute, 8 * time.Hour, 24 * time.Hour}

// silentWindow is how long a silent attempt is priced for.
const silentWindow = time.Hour

// fallbackLatency is when the asynchronous work that fails, and so wakes
// its job for a fallback, ends (any latency costs the same).
const fallbackLatency = 10 * time.Minute

// Cases of a long job's row.
const (
	caseAnswer   = "answered"
	caseWebhook  = "webhook arrives"
	casePolling  = "webhook lost (polling only)"
	caseFallback = "work failed, synchronous fallback"
	caseSilent   = "provider silent, first hour"
	happyPathRow = "happy path"
	// holdFromRow is the scenario whose hold invocations give the hold
	// function's billed time (the happy path never holds).
	holdFromRow = "unknown then resolved"
)

// Modes of a long job's row, as provider.Mode names them: the mode a
// provider runs a job's window in.
var (
	modeSync  = string(provider.ModeSync)
	modeAsync = string(provider.ModeBackground)
)

// tierFor is the tier a job whose provider takes latency must wait in:
// work given up before it ended would never answer (job.RemotePolicy).
func tierFor(latency time.Duration) job.Tier {
	for _, t := range job.Tiers() {
		if (job.RemotePolicy{}).Deadline(time.Time{}, t).Sub(time.Time{}) > latency {
			return t
		}
	}
	return job.TierFlex8h
}

// longJobInputs is everything the section's rows are computed from, printed
// with them so a reader can check them.
type longJobInputs struct {
	// MemoryMB is the run, hold and API functions' memory (deploy.Functions).
	MemoryMB map[string]int `json:"memory_mb"`
	// Per invocation, billed: the happy path's run and API (the create's
	// round trip), the hold of HoldFrom (RunMS when it has none).
	RunMS    float64 `json:"run_billed_ms"`
	APIMS    float64 `json:"api_billed_ms"`
	HoldMS   float64 `json:"hold_billed_ms"`
	HoldFrom string  `json:"hold_from"`
	// RRUPerRead and WRUPerWrite are the happy path's means (failed
	// conditions' local read-backs left out; modelled index writes in).
	RRUPerRead  float64 `json:"rru_per_read"`
	WRUPerWrite float64 `json:"wru_per_write"`
	// CallTimeoutS is the deployed cap on one provider call
	// (deploy.CallTimeout).
	CallTimeoutS float64 `json:"call_timeout_s"`
	// Loop is the states one turn of the wait loop enters after a run that
	// did not end the job (statemachine/onejob.asl.json, Run's Catch of
	// WaitOpen; the timeout's Catch enters the same); BeforeWait how many
	// of them are entered before its Wait elapses.
	Loop       []string `json:"loop"`
	BeforeWait int      `json:"states_entered_before_the_wait"`
	// PollFirstS and PollLastS are job.DefaultPollSchedule's (tier now);
	// WaitStepsS job.DefaultWait's. PassEveryS is the scheduled pass's
	// period (deploy.PollEvery): a poll is made by the first pass at or
	// after it is due. DeadlineS is when work of tier now is given up
	// (job.RemotePolicy's defaults: the provider's max_processing_time,
	// 10 min, plus 10 min).
	PollFirstS float64   `json:"poll_first_s"`
	PollLastS  float64   `json:"poll_last_s"`
	PassEveryS float64   `json:"pass_every_s"`
	DeadlineS  float64   `json:"deadline_s"`
	WaitStepsS []float64 `json:"wait_steps_s"`
	WindowS    float64   `json:"silent_window_s"`
	// Base is the happy path as measured: the job's create and its first
	// run, which every row starts from.
	Base   perJob           `json:"-"`
	Prices map[string]price `json:"-"`
	// Batch is what the batch rows are computed from; Tokens the price
	// every row's tokens are billed at (cdk.json's).
	Batch  batchInputs `json:"batch"`
	Tokens tokenInputs `json:"tokens"`
}

// longJobRow is one mode and case at one provider latency, per job, and
// its cost per million jobs.
type longJobRow struct {
	// Name is how a page cites it: `bench:long_jobs/<name>`.
	Name     string  `json:"name"`
	Mode     string  `json:"mode"`
	Case     string  `json:"case"`
	LatencyS float64 `json:"provider_latency_s"`
	// Turns is, sync, how many runs the wait loop makes after the first
	// (checks of an unknown attempt), at Times: seconds after the call
	// timeout; async, how many polls the scheduled pass makes (the last,
	// polling only, finding the work ended), at Times: seconds after the
	// submit. HeldS is how long one run holds the provider call.
	Turns  int       `json:"loop_turns"`
	TimesS []float64 `json:"turn_times_s,omitempty"`
	HeldS  float64   `json:"call_held_s"`
	// EndsAtS is when the job ends (0: not within the window).
	EndsAtS           float64            `json:"job_ends_at_s"`
	LambdaInvocations map[string]float64 `json:"lambda_invocations"`
	LambdaBilledMS    map[string]float64 `json:"lambda_billed_ms"`
	LambdaGBs         float64            `json:"lambda_gb_seconds"`
	StateTransitions  float64            `json:"state_transitions"`
	DynamoReads       float64            `json:"dynamodb_reads"`
	DynamoWrites      float64            `json:"dynamodb_writes"`
	APIRequests       float64            `json:"api_requests"`
	CostPerMillion    costRow            `json:"cost_per_million_jobs_usd"`
	// RatioToSync is this row's total over the synchronous row's at the
	// same latency (or the silent synchronous attempt's).
	RatioToSync float64 `json:"cost_ratio_to_sync"`
	// TokenTier is the tier the job's tokens are billed at (the tier its
	// provider runs its window at), TokenUSD what Inputs.Tokens' job
	// costs at it, per million jobs; TokenModelled: that tier's rate is
	// modelled (a flex rate cdk.json gives no provider).
	TokenTier     job.Tier `json:"token_tier"`
	TokenUSD      float64  `json:"token_usd_per_million_jobs"`
	TokenModelled bool     `json:"token_rate_modelled,omitempty"`
	Note          string   `json:"note,omitempty"`
}

// longJobs is the section: its inputs and rows.
type longJobs struct {
	Inputs longJobInputs `json:"inputs"`
	Rows   []longJobRow  `json:"rows"`
	// Cannot are the modes that cannot take a latency, and why.
	Cannot []longJobGap `json:"cannot"`
}

// aslLoop reads a state machine definition: the states an execution enters
// after state from ends with the error named errName (its first matching
// Catch, States.ALL matching any) until it enters from again, and how many
// of them it has entered when its Wait state begins. A normal end of from
// must end the execution (End).
func aslLoop(definition []byte, from, errName string) (loop []string, beforeWait int, err error) {
	var def struct {
		States map[string]struct {
			Type  string
			Next  string
			End   bool
			Catch []struct {
				ErrorEquals []string
				Next        string
			}
		}
	}
	if err := json.Unmarshal(definition, &def); err != nil {
		return nil, 0, fmt.Errorf("state machine: %w", err)
	}
	st, ok := def.States[from]
	if !ok {
		return nil, 0, fmt.Errorf("state machine: no state %s", from)
	}
	if !st.End {
		return nil, 0, fmt.Errorf("state machine: a normal end of %s does not end the execution", from)
	}
	next := ""
	for _, c := range st.Catch {
		if slices.Contains(c.ErrorEquals, errName) || slices.Contains(c.ErrorEquals, "States.ALL") {
			next = c.Next
			break
		}
	}
	if next == "" {
		return nil, 0, fmt.Errorf("state machine: %s catches no %s", from, errName)
	}
	for range len(def.States) + 1 {
		s, ok := def.States[next]
		if !ok {
			return nil, 0, fmt.Errorf("state machine: no state %s", next)
		}
		loop = append(loop, next)
		if s.Type == "Wait" && beforeWait == 0 {
			beforeWait = len(loop)
		}
		if next == from {
			if beforeWait == 0 {
				return nil, 0, fmt.Errorf("state machine: %s after %s reaches %s again without waiting", errName, from, from)
			}
			return loop, beforeWait, nil
		}
		if s.Next == "" {
			return nil, 0, fmt.Errorf("state machine: %s after %s ends at %s, not back at %s", errName, from, next, from)
		}
		next = s.Next
	}
	return nil, 0, fmt.Errorf("state machine: %s after %s never reaches %s again", errName, from, from)
}

// pollTimes is when an asynchronous attempt's provider is asked about its
// work, as time since the submit, by schedule s and the scheduled pass
// that makes the polls every pass (the submit taken at a pass, the worst
// phase): every time before until, and the first at or after it. Each
// poll is made by the first pass at or after it is due, and the next is
// due from then.
func pollTimes(s job.PollSchedule, tier job.Tier, until, pass time.Duration) []time.Duration {
	var out []time.Duration
	var t time.Duration
	for {
		due := t + max(time.Second, s.Next(t, tier))
		t = (due + pass - 1) / pass * pass
		out = append(out, t)
		if t >= until {
			return out
		}
	}
}

// checkTimes is when a blocked job is checked by schedule w, as time since
// it became blocked: every check before until, and the first at or after.
func checkTimes(w job.WaitSchedule, until time.Duration) []time.Duration {
	var out []time.Duration
	var t time.Duration
	for {
		t += max(time.Second, w.Next(t))
		out = append(out, t)
		if t >= until {
			return out
		}
	}
}

// before counts the times earlier than until.
func before(times []time.Duration, until time.Duration) int {
	n := 0
	for _, t := range times {
		if t < until {
			n++
		}
	}
	return n
}

// tally is one job's counts: the happy path's, plus what a row adds.
type tally struct {
	in          longJobInputs
	inv, ms     map[string]float64
	transitions float64
	reads       float64
	writes      float64
	// smallWrites are writes of an item under 1 KB (1 WRU each, not the
	// happy path's mean): a webhook delivery taken by its id.
	smallWrites float64
	api         float64
	// A provider batch's item, its share per line: requests and their
	// units (the item's size, not the happy path's mean).
	batchReads, batchRRU, batchWrites, batchWRU float64
}

func newTally(in longJobInputs) *tally {
	inv, ms := maps.Clone(in.Base.LambdaInvocations), maps.Clone(in.Base.LambdaBilledMS)
	if inv == nil {
		inv = map[string]float64{}
	}
	if ms == nil {
		ms = map[string]float64{}
	}
	return &tally{in: in, inv: inv, ms: ms, transitions: in.Base.StateTransitions, api: in.Base.APIRequests}
}

func (t *tally) invoke(fn string, n, msEach float64) {
	if n == 0 {
		return
	}
	t.inv[fn] += n
	t.ms[fn] += n * msEach
}

// polls adds n questions of the scheduled pass about the job's work: each
// a read of its due entry (by_poll) and of the job, and the billed time
// of one (the happy path's run: a read, a provider call, a write); the
// pass's invocation, once a minute for the whole deployment, is no job's.
// What the question writes is the caller's.
func (t *tally) polls(n int) {
	if n == 0 {
		return
	}
	t.ms[deploy.FnEvents] += float64(n) * t.in.RunMS
	t.reads += float64(2 * n)
}

// webhook adds a provider's webhook taken by the events function: one API
// request and invocation (billed as the create), the delivery taken by
// its webhook-id (a write of 1 WRU) and the job read.
func (t *tally) webhook() {
	t.api++
	t.invoke(deploy.FnEvents, 1, t.in.APIMS)
	t.smallWrites++
	t.reads++
}

// loops adds n turns of the wait loop: each enters the loop's states, and
// invokes the hold function and the run function, each of which reads the
// job once. What the run does beyond (ask the provider, write) is the
// caller's.
func (t *tally) loops(n int) {
	t.transitions += float64(n * len(t.in.Loop))
	t.invoke(deploy.FnHold, float64(n), t.in.HoldMS)
	t.invoke(deploy.FnRun, float64(n), t.in.RunMS)
	t.reads += float64(2 * n)
}

// waitOpen adds the states and hold of a loop entered and waiting when the
// window ends (the run after it is not made).
func (t *tally) waitOpen() {
	t.transitions += float64(t.in.BeforeWait)
	t.invoke(deploy.FnHold, 1, t.in.HoldMS)
	t.reads++
}

// row prices the tally as the cost table prices a scenario: the happy
// path's DynamoDB units plus the added requests at its mean units.
func (t *tally) row(mode, kase string, latency time.Duration) longJobRow {
	b := t.in.Base
	p := perJob{
		Scenario:          mode + ", " + kase,
		ReadUnits:         max(0, b.ReadUnits-b.ReadBacks) + t.reads*t.in.RRUPerRead + t.batchRRU,
		WriteUnits:        b.WriteUnits + b.IndexWriteUnits + t.writes*t.in.WRUPerWrite + t.smallWrites + t.batchWRU,
		StateTransitions:  t.transitions,
		LambdaInvocations: t.inv,
		LambdaBilledMS:    t.ms,
		APIRequests:       t.api,
	}
	reads, writes := baseRequests(b)
	c := roundCost(costOf(p, t.in.Prices))
	return longJobRow{Name: longJobName(mode, kase, latency), Mode: mode, Case: kase, LatencyS: latency.Seconds(),
		LambdaInvocations: roundAll(t.inv), LambdaBilledMS: roundAll(t.ms), LambdaGBs: round4(p.lambdaGBSeconds(lambdaMemoryGB)),
		StateTransitions: t.transitions, DynamoReads: round2(reads + t.reads + t.batchReads),
		DynamoWrites: round2(writes + t.writes + t.smallWrites + t.batchWrites),
		APIRequests:  t.api, CostPerMillion: c}
}

// baseRequests splits the happy path's DynamoDB requests into reads and
// writes, leaving out the local-only read-backs.
func baseRequests(b perJob) (reads, writes float64) {
	for op, n := range b.DynamoByOp {
		switch op {
		case "GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems":
			reads += n
		default:
			writes += n
		}
	}
	return max(0, reads-b.ReadBacks), writes
}

// longJobInputsFrom takes the section's inputs from the per-job rows
// measured in this run, the state machine definition and the code.
func longJobInputsFrom(rows []perJob, definition []byte) (longJobInputs, error) {
	in := longJobInputs{MemoryMB: map[string]int{}, CallTimeoutS: deploy.CallTimeout.Seconds(), WindowS: silentWindow.Seconds(),
		PollFirstS: job.DefaultPollSchedule().First.Seconds(), PollLastS: job.DefaultPollSchedule().Last.Seconds(),
		PassEveryS: deploy.PollEvery.Seconds(), DeadlineS: (job.RemotePolicy{}).Deadline(time.Time{}, job.TierNow).Sub(time.Time{}).Seconds()}
	for _, s := range job.DefaultWait().Steps {
		in.WaitStepsS = append(in.WaitStepsS, s.Seconds())
	}
	for _, fn := range []string{deploy.FnAPI, deploy.FnRun, deploy.FnHold, deploy.FnEvents} {
		f, ok := deploy.Lookup(fn)
		if !ok {
			return in, fmt.Errorf("no function %s", fn)
		}
		in.MemoryMB[fn] = f.MemoryMB
	}
	var err error
	if in.Loop, in.BeforeWait, err = aslLoop(definition, "Run", string(job.SignalWaitOpen)); err != nil {
		return in, err
	}
	// An unknown synchronous attempt's run ends by its timeout: the loop
	// it enters must be the same (the rows count one).
	timeout, _, err := aslLoop(definition, "Run", "States.Timeout")
	if err != nil {
		return in, err
	}
	if !slices.Equal(timeout, in.Loop) {
		return in, fmt.Errorf("a run's timeout enters %v, WaitOpen %v", timeout, in.Loop)
	}
	i := slices.IndexFunc(rows, func(p perJob) bool { return p.Scenario == happyPathRow })
	if i < 0 {
		return in, errors.New("no happy path measured")
	}
	in.Base = rows[i]
	perCall := func(p perJob, fn string) float64 {
		if p.LambdaInvocations[fn] == 0 {
			return 0
		}
		return round2(p.LambdaBilledMS[fn] / p.LambdaInvocations[fn])
	}
	in.RunMS, in.APIMS = perCall(in.Base, deploy.FnRun), perCall(in.Base, deploy.FnAPI)
	in.HoldMS, in.HoldFrom = in.RunMS, happyPathRow+" (its run's)"
	if i := slices.IndexFunc(rows, func(p perJob) bool { return p.Scenario == holdFromRow }); i >= 0 && perCall(rows[i], deploy.FnHold) > 0 {
		in.HoldMS, in.HoldFrom = perCall(rows[i], deploy.FnHold), holdFromRow
	}
	if in.Batch, err = batchInputsFrom(in); err != nil {
		return in, err
	}
	reads, writes := baseRequests(in.Base)
	in.RRUPerRead, in.WRUPerWrite = 1, 1
	if reads > 0 {
		in.RRUPerRead = round2(max(0, in.Base.ReadUnits-in.Base.ReadBacks) / reads)
	}
	if writes > 0 {
		in.WRUPerWrite = round2((in.Base.WriteUnits + in.Base.IndexWriteUnits) / writes)
	}
	return in, nil
}

// syncAttempt is a synchronous attempt whose provider answers after
// latency: one run holds the call that long. Past the call timeout the call
// is cut and the attempt is unknown: the execution checks it on the wait
// schedule (job.DefaultWait, from the timeout), a check reads the job and
// asks the provider under the same key, and the first check at or after
// latency finds the answer and ends the job.
func syncAttempt(in longJobInputs, latency time.Duration) longJobRow {
	t := newTally(in)
	callTimeout := time.Duration(in.CallTimeoutS * float64(time.Second))
	held := min(latency, callTimeout)
	t.ms[deploy.FnRun] += held.Seconds() * 1000
	ends := latency
	var times []time.Duration
	var note string
	if latency > callTimeout {
		times = checkTimes(job.DefaultWait(), latency-callTimeout)
		t.loops(len(times))
		t.writes++ // the hold marks the attempt unknown; the answer is the happy path's outcome write
		ends = callTimeout + times[len(times)-1]
		note = fmt.Sprintf("past the %s call timeout: cut, unknown, checked on the wait schedule; ends at the first check after the answer", callTimeout)
	}
	r := t.row(modeSync, caseAnswer, latency)
	r.Turns, r.TimesS, r.HeldS, r.EndsAtS, r.Note = len(times), seconds(times), held.Seconds(), ends.Seconds(), note
	return r
}

// asyncAttempt is an asynchronous attempt whose work ends after latency,
// in the tier that latency needs (tierFor). The submitting run is billed
// as the happy path's run, plus one write (the work's id), and ends its
// execution: the job is parked, and its one state transition is the happy
// path's, whatever the latency. Each poll before the end is a question of
// the scheduled pass (polls) and a write of what it heard. With the
// webhook the job ends at latency through the events function (one API
// request and invocation, billed as the create, one read, one write of
// 1 WRU: the delivery taken by its webhook-id, review N-L1; the outcome
// write is the happy path's), and no run is started: the job is done.
// Without it, the first poll at or after latency reads the work ended and
// writes the outcome (the happy path's write).
func asyncAttempt(in longJobInputs, latency time.Duration, webhook bool) longJobRow {
	t := newTally(in)
	pass := time.Duration(in.PassEveryS * float64(time.Second))
	times := pollTimes(job.DefaultPollSchedule(), tierFor(latency), latency, pass)
	heard := before(times, latency)
	t.writes++ // the work's id
	t.polls(heard)
	t.writes += float64(heard)
	kase, ends, turns := casePolling, times[len(times)-1], len(times)
	if webhook {
		kase, ends, turns = caseWebhook, latency, heard
		t.webhook()
	} else {
		t.polls(1)
	}
	r := t.row(modeAsync, kase, latency)
	r.Turns, r.TimesS, r.EndsAtS = turns, seconds(times[:turns]), ends.Seconds()
	if tier := tierFor(latency); tier != job.TierNow {
		r.Note = fmt.Sprintf("tier %s: its work's deadline %s", tier, (job.RemotePolicy{}).Deadline(time.Time{}, tier).Sub(time.Time{}))
	}
	return r
}

// asyncFallback is asynchronous work that fails at fallbackLatency (its
// webhook says so) on a job with a synchronous fallback left: the events
// function writes the failure and starts the run the job needs (its
// execution named <job_id>-1: StartExecution is not billed, the Run state
// is one transition), which reads the job, launches the fallback (a write,
// and its ledger copy) and completes the job by the happy path's outcome
// write. +1 transition and one run, whatever the latency.
func asyncFallback(in longJobInputs) longJobRow {
	t := newTally(in)
	pass := time.Duration(in.PassEveryS * float64(time.Second))
	times := pollTimes(job.DefaultPollSchedule(), tierFor(fallbackLatency), fallbackLatency, pass)
	heard := before(times, fallbackLatency)
	t.writes++ // the work's id
	t.polls(heard)
	t.writes += float64(heard)
	t.webhook()
	t.writes++ // attempt 1 failed
	t.transitions++
	t.invoke(deploy.FnRun, 1, in.RunMS)
	t.reads++
	t.writes += 2 // attempt 2 launched, and its ledger copy
	r := t.row(modeAsync, caseFallback, fallbackLatency)
	r.Turns, r.TimesS, r.EndsAtS = heard, seconds(times[:heard]), fallbackLatency.Seconds()
	r.Note = "the webhook's failure wakes the job: one more run (execution <job_id>-1), one more transition"
	return r
}

// silentSync is a synchronous attempt whose provider never answers, over
// the window: the run holds the call until the call timeout, the attempt
// is unknown, and the execution checks it on the wait schedule (each check
// reads the job; its hold reads it too). The write that marks it unknown is
// counted as the happy path's outcome write.
func silentSync(in longJobInputs) longJobRow {
	t := newTally(in)
	callTimeout := time.Duration(in.CallTimeoutS * float64(time.Second))
	window := time.Duration(in.WindowS * float64(time.Second))
	t.ms[deploy.FnRun] += callTimeout.Seconds() * 1000
	times := checkTimes(job.DefaultWait(), window-callTimeout)
	checks := before(times, window-callTimeout)
	t.loops(checks)
	t.waitOpen()
	r := t.row(modeSync, caseSilent, 0)
	r.Turns, r.TimesS, r.HeldS = checks, seconds(times[:checks]), callTimeout.Seconds()
	return r
}

// silentAsync is an asynchronous attempt whose work never ends and whose
// webhook never comes: polled by the pass until its deadline (DeadlineS:
// job.RemotePolicy's, tier now), each poll a question and a write; at the
// deadline the pass asks the provider to cancel (the cancel recorded, a
// write) and gives the work up (job.DecideAbandon, a write), and starts
// the run the job then needs, which reads it and, no provider left, fails
// it (the happy path's outcome write): one more transition and run. The
// job ends at its deadline, within the window.
func silentAsync(in longJobInputs) longJobRow {
	t := newTally(in)
	pass := time.Duration(in.PassEveryS * float64(time.Second))
	deadline := time.Duration(in.DeadlineS * float64(time.Second))
	times := pollTimes(job.DefaultPollSchedule(), job.TierNow, deadline, pass)
	polls := before(times, deadline)
	t.writes++ // the work's id
	t.polls(polls)
	t.writes += float64(polls)
	t.polls(1)      // the deadline's question (the cancel)
	t.writes += 2   // the cancel asked, the work given up
	t.transitions++ // the woken run
	t.invoke(deploy.FnRun, 1, in.RunMS)
	t.reads++
	ends := (deadline + pass - 1) / pass * pass
	r := t.row(modeAsync, caseSilent, 0)
	r.Turns, r.TimesS, r.EndsAtS = polls, seconds(times[:polls]), ends.Seconds()
	r.Note = fmt.Sprintf("given up at its deadline (%s: max_processing_time + 10 min), the job woken and failed", dur(in.DeadlineS))
	return r
}

// longJobRows computes the section: at each latency the synchronous
// attempt, the background one with and without its webhook, the flex call
// (answered, and paused once by a 429) and the batch line (in a full batch
// and alone), each where its mode can take the latency (the others in
// Cannot); then the silent attempts. Every row's tokens are billed at the
// tier its provider runs its window at.
func longJobRows(in longJobInputs) ([]longJobRow, []longJobGap, error) {
	var out []longJobRow
	var gaps []longJobGap
	add := func(r longJobRow, sync longJobRow, kind string, tier job.Tier) error {
		var err error
		if r.TokenTier, r.TokenUSD, r.TokenModelled, err = tokenBill(in.Tokens, kind, r.Mode, tier); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		r.RatioToSync = ratio(r.CostPerMillion.Total, sync.CostPerMillion.Total)
		out = append(out, r)
		return nil
	}
	gap := func(mode string, l time.Duration, why string) {
		gaps = append(gaps, longJobGap{Mode: mode, LatencyS: l.Seconds(), Why: why})
	}
	for _, l := range longJobLatencies {
		s := syncAttempt(in, l)
		if err := add(s, s, kindSync, job.TierNow); err != nil {
			return nil, nil, err
		}
		if why := backgroundCannot(l); why != "" {
			gap(modeAsync, l, why)
		} else {
			for _, webhook := range []bool{true, false} {
				if err := add(asyncAttempt(in, l, webhook), s, kindBackground, tierFor(l)); err != nil {
					return nil, nil, err
				}
			}
			if l == fallbackLatency {
				if err := add(asyncFallback(in), s, kindBackground, tierFor(l)); err != nil {
					return nil, nil, err
				}
			}
		}
		if why := flexCannot(in, l); why != "" {
			gap(modeFlex, l, why)
		} else {
			for _, paused := range []bool{false, true} {
				if err := add(flexAttempt(in, l, paused), s, kindFlex, flexTier()); err != nil {
					return nil, nil, err
				}
			}
		}
		if why := batchCannot(l); why != "" {
			gap(modeBatch, l, why)
		} else {
			for _, lines := range batchLinesPriced {
				if err := add(batchLine(in, in.Batch, l, lines), s, kindBatch, job.TierBatch24h); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	s, a := silentSync(in), silentAsync(in)
	if err := add(s, s, kindSync, job.TierNow); err != nil {
		return nil, nil, err
	}
	if err := add(a, s, kindBackground, job.TierNow); err != nil {
		return nil, nil, err
	}
	return out, gaps, nil
}

// longJobName is a row's name: its mode, its provider's latency (or
// none, for a silent provider) and its case.
func longJobName(mode, kase string, latency time.Duration) string {
	if kase == caseSilent {
		return mode + ", " + kase
	}
	return mode + ", " + latencyLabel(latency) + ", " + kase
}

// latencyLabel prints a latency as a page names it: 2 s, 10 min, 8 h.
func latencyLabel(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// longJobRowNames are the section's row names, from the rows it computes
// (benchRows: what a page may cite).
func longJobRowNames(definition []byte) ([]string, error) {
	in, err := longJobInputsFrom([]perJob{{Scenario: happyPathRow}}, definition)
	if err != nil {
		return nil, err
	}
	rows, _, err := longJobRows(in)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Name
	}
	return names, nil
}

// measureLongJobs is the section for this run's per-job rows.
func measureLongJobs(rows []perJob, definition []byte, pr map[string]price, tokens tokenInputs) (*longJobs, error) {
	in, err := longJobInputsFrom(rows, definition)
	if err != nil {
		return nil, err
	}
	in.Prices, in.Tokens = pr, tokens
	out, gaps, err := longJobRows(in)
	if err != nil {
		return nil, err
	}
	return &longJobs{Inputs: in, Rows: out, Cannot: gaps}, nil
}

// roundCost rounds a cost row's dollars to cents, as the cost table does.
func roundCost(c costRow) costRow {
	c.DynamoDB, c.StepFunctions, c.LambdaReq = round2(c.DynamoDB), round2(c.StepFunctions), round2(c.LambdaReq)
	c.LambdaGBs, c.APIGateway, c.Total = round2(c.LambdaGBs), round2(c.APIGateway), round2(c.Total)
	return c
}

func seconds(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = round2(x.Seconds())
	}
	return out
}

func roundAll(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = round2(v)
	}
	return out
}

func round4(f float64) float64 { return math.Round(f*10000) / 10000 }

// printLongJobs prints the section: its inputs, the table, and when each
// row's loop turns.
func printLongJobs(w io.Writer, l longJobs) {
	in := l.Inputs
	section(w, "Long jobs (issues 29, 40): per job and USD per million jobs, synchronous, background (parked), flex and batch by provider latency, a fallback after failed work, "+
		"and an attempt whose provider goes silent (first hour); the tokens each window bills")
	var mem []string
	for _, fn := range sortedKeys(in.MemoryMB) {
		mem = append(mem, fmt.Sprintf("%s %d MB", fn, in.MemoryMB[fn]))
	}
	var steps []string
	for _, s := range in.WaitStepsS {
		steps = append(steps, dur(s))
	}
	b := in.Base
	fmt.Fprintf(w, "inputs: memory %s (deploy.Functions); measured happy path per job: %.0f API request, %g state transition, "+
		"%.2f DynamoDB requests (%.2f RRU, %.2f WRU with index), billed run %.1f ms and API %.1f ms per invocation; hold %.1f ms per invocation (%s); "+
		"an added read %.2f RRU, an added write %.2f WRU (the happy path's means)\n",
		strings.Join(mem, ", "), b.APIRequests, b.StateTransitions, b.DynamoRequests, max(0, b.ReadUnits-b.ReadBacks),
		b.WriteUnits+b.IndexWriteUnits, in.RunMS, in.APIMS, in.HoldMS, in.HoldFrom, in.RRUPerRead, in.WRUPerWrite)
	fmt.Fprintf(w, "design: call timeout %s (deploy.CallTimeout); wait loop of a synchronous attempt unknown past it: %s, %d transitions a turn "+
		"(statemachine/onejob.asl.json: Run's Catch of WaitOpen, and of States.Timeout), %d entered before its wait; checks of an unknown attempt "+
		"(job.DefaultWait): %s. Asynchronous: the run submits and ends its execution (parked: no transition while the work runs); "+
		"polls by the scheduled pass every %s (deploy.PollEvery; job.DefaultPollSchedule: after %s, then at the work's age, at most every %s, "+
		"made by the first pass after), each a slice of the pass's invocation, two reads and a write; work of tier now given up at %s "+
		"(job.RemotePolicy)\n",
		dur(in.CallTimeoutS), strings.Join(in.Loop, " → "), len(in.Loop), in.BeforeWait, strings.Join(steps, ", "), dur(in.PassEveryS),
		dur(in.PollFirstS), dur(in.PollLastS), dur(in.DeadlineS))
	bi, tk := in.Batch, in.Tokens
	var sizes []string
	for _, n := range batchLinesPriced {
		sizes = append(sizes, fmt.Sprintf("%s bytes at %s line(s)", thousands(bi.ItemBytes[n]), thousands(n)))
	}
	fmt.Fprintf(w, "flex: one call at the flex tier (%s runs a job that may wait %s or longer there), held by the run up to the call timeout; "+
		"a 429 Resource Unavailable pauses the provider and the job waits a turn of the loop. Batch (job.DefaultBatchPolicy): a line queued and parked "+
		"at its run; lines gathered up to %d a batch or %s (up to %d passes list a line, a read each); the batch's item in the batches table "+
		"(%s; modelled from job.Batch's JSON) written whole at its record, claim, submit, each poll that finds it running, its end and its delete, "+
		"read whole by every pass while open (the open batches' query, consistent); the batch asked about on job.DefaultPollSchedule (tier now), "+
		"its submit and each poll billed as a run of the events function, shared by its lines\n",
		kindFlex, flexTier(), bi.MaxLines, dur(bi.GatherS), bi.GatherPasses, strings.Join(sizes, ", "))
	var discounts []string
	for _, t := range sortedKeys(tk.DiscountPercent) {
		discounts = append(discounts, fmt.Sprintf("%s %d%%", t, tk.DiscountPercent[t]))
	}
	fmt.Fprintf(w, "tokens: a job of %d tokens in and %d out at cdk.json's %s price (%s, kind %s: $%s in, $%s out per million tokens; off: %s), "+
		"billed at the tier its provider runs its window at (provider.RunTier: sync %s, background %s, flex %s, batch %s; a flex rate cdk.json "+
		"prices no provider at is modelled at the batch discount, OpenAI's flex being \"priced at Batch API rates\")\n",
		tk.TokensIn, tk.TokensOut, tk.Provider, tk.Version, tk.Kind, tk.InputUSD, tk.OutputUSD, strings.Join(discounts, ", "),
		kindSync, kindBackground, kindFlex, kindBatch)
	tw := table(w)
	fmt.Fprintln(tw, "mode\tprovider latency\tcase\tcall held\tturns (sync loop, async polls)\tjob ends at\tLambda invocations\tLambda GB-s\ttransitions\tDDB reads\tDDB writes\tAPI requests\t"+
		"Lambda requests\tLambda duration\tStep Functions\tDynamoDB\tAPI Gateway\ttotal USD\t×sync\ttokens at\ttokens USD\t")
	for _, r := range l.Rows {
		latency, ends := latencyLabel(time.Duration(r.LatencyS*float64(time.Second))), "-"
		if r.Case == caseSilent {
			latency = "never (" + dur(in.WindowS) + ")"
		}
		if r.EndsAtS > 0 {
			ends = dur(r.EndsAtS)
		}
		var inv float64
		for _, v := range r.LambdaInvocations {
			inv += v
		}
		c := r.CostPerMillion
		tokens := string(r.TokenTier)
		if r.TokenModelled {
			tokens += " (modelled)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%.4g\t%.4f\t%g\t%.4g\t%.4g\t%g\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%.2f\t\n",
			r.Mode, latency, r.Case, dur(r.HeldS), r.Turns, ends, inv, r.LambdaGBs, r.StateTransitions, r.DynamoReads, r.DynamoWrites,
			r.APIRequests, c.LambdaReq, c.LambdaGBs, c.StepFunctions, c.DynamoDB, c.APIGateway, c.Total, r.RatioToSync, tokens, r.TokenUSD)
	}
	tw.Flush()
	for _, g := range l.Cannot {
		fmt.Fprintf(w, "cannot: %s at %s: %s\n", g.Mode, latencyLabel(time.Duration(g.LatencyS*float64(time.Second))), g.Why)
	}
	fmt.Fprintln(w, "loop turns (sync: checks after the call timeout; flex: the pause) and polls (background: after the submit; batch: of its batch, after the submit) at:")
	for _, r := range l.Rows {
		if r.Turns == 0 {
			continue
		}
		at := make([]string, len(r.TimesS))
		for i, t := range r.TimesS {
			at[i] = dur(t)
		}
		fmt.Fprintf(w, "  %s: %s\n", r.Name, strings.Join(at, " "))
	}
	for _, r := range l.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "note: %s: %s\n", r.Name, r.Note)
		}
	}
	fmt.Fprintln(w, "note: every row is the happy path's counts (measured in this run) plus the design's (docs/long-jobs.md), modelled from the code, not measured: "+
		"a check's run, a poll of the pass, a batch's submit and poll and a line's apply are billed as the happy path's run, the provider answering at once. "+
		"A provider that hangs on a question holds that run, or that slice of the pass, up to the settle timeout instead.")
	fmt.Fprintf(w, "note: issue 40: every row of a waiting mode (%s) is at most %d state transitions; the report fails otherwise\n",
		strings.Join(waitingModes, ", "), maxWaitingTransitions)
}

// dur prints seconds as a duration.
func dur(s float64) string {
	if s == 0 {
		return "0"
	}
	return time.Duration(s * float64(time.Second)).Round(10 * time.Millisecond).String()
}

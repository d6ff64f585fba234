package faultproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/faultproxy"
)

// TestFaultsKeepJobsConsistent is issue 7's acceptance run: with 5% of
// DynamoDB requests faulted (every kind the proxy knows), hundreds of jobs
// are created by concurrent duplicate submissions and driven to an outcome
// by concurrent runners and completers. Every fourth call goes through a
// client that does not retry, so some calls end with an unknown outcome and
// are redelivered, as Step Functions would. Read back without faults, every
// job is one item, every acknowledged create is there, every outcome has at
// most one winner, and no call was told something the final state denies.
//
// ONEJOB_FAULT_JOBS (default 300) and ONEJOB_FAULT_SEED (default 7) scale
// and vary the run.
func TestFaultsKeepJobsConsistent(t *testing.T) {
	t.Parallel()
	n := testenv.EnvInt(t, "ONEJOB_FAULT_JOBS", 300)
	seed := uint64(testenv.EnvInt(t, "ONEJOB_FAULT_SEED", 7))
	r := newRig(t, faultproxy.Config{Rate: 0.05, Seed: seed, Latency: 25 * time.Millisecond}, 10)
	run := &faultRun{r: r, cases: make([]*jobCase, n)}
	for i := range run.cases {
		run.cases[i] = newJobCase(i)
	}
	began := time.Now()
	run.parallel(24, run.submitAll)
	createdIn := time.Since(began)
	run.verifyCreates(t)

	began = time.Now()
	run.parallel(32, func(c *jobCase) {
		if c.exists {
			run.drive(t, c)
		}
	})
	drivenIn := time.Since(began)
	run.verifyOutcomes(t)

	t.Logf("seed=%d jobs=%d submissions=%d (replays=%d key_reused=%d unacknowledged=%d) create phase %s, lifecycle phase %s",
		seed, n, run.submissions.Load(), run.replays.Load(), run.reused.Load(), run.unacked.Load(),
		createdIn.Round(time.Millisecond), drivenIn.Round(time.Millisecond))
	t.Logf("engine calls: starts=%d mark_running=%d completes=%d resolves=%d cancels=%d redeliveries=%d",
		run.starts.Load(), run.marks.Load(), run.completes.Load(), run.resolves.Load(), run.cancels.Load(), run.redeliveries.Load())
	t.Logf("proxy: %s", r.proxy.Stats())
	sdk := r.obs.Stats()
	t.Logf("sdk: operations=%d attempts=%d retries=%d ambiguous_attempts=%d throttled=%d",
		sdk.Operations, sdk.Attempts, sdk.Retries, sdk.Ambiguous, sdk.Throttled)
	if s := r.proxy.Stats(); s.Injected[faultproxy.ResetAfter] == 0 || s.Injected[faultproxy.InternalErrorAfter] == 0 {
		t.Fatalf("no applied-then-lost fault was injected (%s): the run proves little", s)
	}
}

type scenario int

const (
	// hedgeRace: attempts 1 and 2 run, each result delivered twice, concurrently.
	hedgeRace scenario = iota
	// unknownResolve: attempt 1 times out and is resolved out of band while
	// attempt 2's result arrives twice.
	unknownResolve
	// redelivery: one attempt, claimed by three runners, its result delivered three times.
	redelivery
	// cancelRace: a cancel races both attempts' results.
	cancelRace
)

func (s scenario) String() string {
	return [...]string{"hedge_race", "unknown_resolve", "redelivery", "cancel_race"}[s]
}

// jobCase is one job: what was asked and what every call was told.
type jobCase struct {
	i          int
	owner, key string
	id         string
	input      string
	other      string // a conflicting input for the same key; empty: none
	dups       int    // concurrent submissions of input
	scenario   scenario
	resolution job.AttemptState // unknownResolve: how attempt 1 is resolved

	mu   sync.Mutex
	subs []submission

	// Read back after the create phase.
	exists    bool
	fp        string
	createdAt string

	attempts    map[int]string // number → provider
	misreported int            // starts refused as blocked by their own attempt
	abandoned   bool           // some call ended with an unknown outcome
	claims      map[int][]claim
	completions []completion
	resolved    []resolveResult
	cancels     []error
}

type submission struct {
	conflicting bool
	sentAt      string // created_at of the job this call's create wrote
	id          string
	replayed    bool
	err         error
	retried     bool // the SDK retried the create after an attempt that may have applied
}

type claim struct {
	claimed bool
	err     error
}

type completion struct {
	attempt int
	won     bool
	lost    *job.LostRace
	err     error
}

type resolveResult struct {
	completedBy int
	err         error
}

// providers are every job's providers: attempt 1 runs on the first, the
// hedge on the second.
func providers() []string { return []string{"sim-primary", "sim-fallback"} }

func newJobCase(i int) *jobCase {
	c := &jobCase{
		i:        i,
		owner:    fmt.Sprintf("owner-%d", i%7),
		key:      fmt.Sprintf("key-%04d", i),
		input:    fmt.Sprintf(`{"prompt":"job %d"}`, i),
		dups:     1 + i%3,
		attempts: map[int]string{},
		claims:   map[int][]claim{},
	}
	c.id = job.NewID(c.owner, c.key)
	if i%25 == 0 {
		c.other = fmt.Sprintf(`{"prompt":"job %d","variant":"other"}`, i)
	}
	switch i % 10 {
	case 6, 7:
		c.scenario = unknownResolve
		c.resolution = job.AttemptSucceeded
		if i%10 == 7 {
			c.resolution = job.AttemptFailed
		}
	case 8:
		c.scenario = redelivery
	case 9:
		c.scenario = cancelRace
	}
	return c
}

func (c *jobCase) request(input string) job.Request {
	return job.Request{Owner: c.owner, IdempotencyKey: c.key, Type: "demo", Input: json.RawMessage(input), Providers: providers(), Primary: "sim-primary"}
}

func (c *jobCase) result(n int) string { return fmt.Sprintf(`{"job":%d,"attempt":%d}`, c.i, n) }

func (c *jobCase) resolvedResult(n int) string {
	return fmt.Sprintf(`{"job":%d,"attempt":%d,"resolved":true}`, c.i, n)
}

// faultRun drives the cases through the faulty lifecycle.
type faultRun struct {
	r     *rig
	cases []*jobCase

	calls                                                         atomic.Int64
	submissions, replays, reused, unacked                         atomic.Int64
	starts, marks, completes, resolves, cancels, redeliveries     atomic.Int64
	phantomReplays, misreportedStarts, lostClaims, laggingLedgers atomic.Int64
	abandonedLags                                                 atomic.Int64
}

// eng picks the engine for the next call: every fourth call is impatient,
// so some calls of every kind end with an unknown outcome.
func (run *faultRun) eng() *lifecycle.Engine {
	if run.calls.Add(1)%4 == 0 {
		return run.r.impatient
	}
	return run.r.eng
}

// parallel runs f over every case on workers goroutines.
func (run *faultRun) parallel(workers int, f func(*jobCase)) {
	ch := make(chan *jobCase)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range ch {
				f(c)
			}
		})
	}
	for _, c := range run.cases {
		ch <- c
	}
	close(ch)
	wg.Wait()
}

// submitAll sends the case's submissions at once, as a double-clicking
// client and a conflicting one would.
func (run *faultRun) submitAll(c *jobCase) {
	inputs := make([]string, 0, c.dups+1)
	for range c.dups {
		inputs = append(inputs, c.input)
	}
	if c.other != "" {
		inputs = append(inputs, c.other)
	}
	subs := make([]submission, len(inputs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k, in := range inputs {
		wg.Go(func() {
			<-start
			subs[k] = run.submit(c, in)
		})
	}
	close(start)
	wg.Wait()
	c.subs = subs
}

func (run *faultRun) submit(c *jobCase, input string) submission {
	run.submissions.Add(1)
	tr := &faultproxy.Trace{}
	j, replayed, err := run.eng().Create(faultproxy.WithTrace(context.Background(), tr), c.request(input))
	s := submission{conflicting: input != c.input, id: j.ID, replayed: replayed, err: err}
	var reused *job.KeyReusedError
	switch {
	case errors.As(err, &reused):
		s.id = reused.JobID
		run.reused.Add(1)
	case err != nil:
		run.unacked.Add(1)
	case replayed:
		run.replays.Add(1)
	}
	for _, op := range tr.Ops() {
		// The create is the jobs table's one write conditioned on the
		// job's absence.
		if in, ok := op.Input.(*dynamodb.UpdateItemInput); ok && aws.ToString(in.TableName) == run.r.names.Jobs &&
			strings.HasPrefix(aws.ToString(in.ConditionExpression), "attribute_not_exists") {
			s.sentAt = setTo(in, "created_at")
			s.retried = s.retried || op.RetriedAfterAmbiguous()
		}
	}
	return s
}

// setTo is the string value an UpdateItem's SET clause gives attribute.
func setTo(in *dynamodb.UpdateItemInput, attribute string) string {
	set, _, _ := strings.Cut(strings.TrimPrefix(aws.ToString(in.UpdateExpression), "SET "), " REMOVE ")
	for _, a := range strings.Split(set, ", ") {
		name, value, ok := strings.Cut(a, " = ")
		if ok && in.ExpressionAttributeNames[name] == attribute {
			if v, ok := in.ExpressionAttributeValues[value].(*types.AttributeValueMemberS); ok {
				return v.Value
			}
		}
	}
	return ""
}

func fingerprint(t *testing.T, input string) string {
	t.Helper()
	fp, err := job.Fingerprint("demo", json.RawMessage(input), providers())
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// verifyCreates reads the jobs table without faults: one item per
// (owner, key), every acknowledged create present, every call told the truth.
func (run *faultRun) verifyCreates(t *testing.T) {
	t.Helper()
	items := map[string]map[string]types.AttributeValue{}
	for _, it := range run.r.scan(t, run.r.names.Jobs) {
		id := str(it, dynamo.AttrID)
		if want := job.NewID(str(it, dynamo.AttrOwner), str(it, "idem_key")); id != want {
			t.Errorf("item %s is not the ID of its (owner, key) (%s)", id, want)
		}
		items[id] = it
	}
	known := map[string]bool{}
	for _, c := range run.cases {
		known[c.id] = true
		item, ok := items[c.id]
		acked := false
		for _, s := range c.subs {
			acked = acked || s.err == nil || errors.Is(s.err, job.ErrIdempotencyKeyReused)
		}
		if !ok {
			if acked {
				t.Errorf("%s: an acknowledged create is missing", c.key)
			}
			continue
		}
		c.exists, c.fp, c.createdAt = true, str(item, "fingerprint"), str(item, "created_at")
		fpOf := map[bool]string{false: fingerprint(t, c.input)}
		if c.other != "" {
			fpOf[true] = fingerprint(t, c.other)
		}
		writers, created := 0, 0
		for _, s := range c.subs {
			mine := fpOf[s.conflicting]
			isWriter := s.sentAt != "" && s.sentAt == c.createdAt
			if isWriter {
				writers++
			}
			switch {
			case s.err == nil:
				if s.id != c.id || mine != c.fp {
					t.Errorf("%s: told ok for job %s (input conflicting=%v) but %s holds another request", c.key, s.id, s.conflicting, c.id)
				}
				if !s.replayed {
					created++
					if !isWriter {
						t.Errorf("%s: told created, but another call wrote the job", c.key)
					}
				} else if isWriter {
					run.phantomReplays.Add(1)
					if !s.retried {
						t.Errorf("%s: the call that wrote the job was told replayed without an SDK retry", c.key)
					}
				}
			case errors.Is(s.err, job.ErrIdempotencyKeyReused):
				if s.id != c.id || mine == c.fp {
					t.Errorf("%s: spurious key reuse (job %s, conflicting=%v): %v", c.key, s.id, s.conflicting, s.err)
				}
			case !errors.Is(s.err, lifecycle.ErrUnavailable):
				t.Errorf("%s: create: %v", c.key, s.err)
			}
		}
		if writers != 1 || created > 1 {
			t.Errorf("%s: %d calls wrote the job, %d were told created", c.key, writers, created)
		}
	}
	for id := range items {
		if !known[id] {
			t.Errorf("unexpected job %s", id)
		}
	}
	never(t, "phantom-replay", int(run.phantomReplays.Load()),
		"dynamo.Create told the call whose write created the job replayed=true (its SDK retry failed the condition)")
}

const redeliveries = 6

// redeliver calls f again while it fails with an unknown outcome, as Step
// Functions re-invokes a task whose store call failed.
func (run *faultRun) redeliver(c *jobCase, f func() error) {
	for try := range redeliveries {
		if try > 0 {
			run.redeliveries.Add(1)
		}
		err := f()
		c.noteErr(err)
		if !errors.Is(err, lifecycle.ErrUnavailable) {
			return
		}
	}
}

func (run *faultRun) drive(t *testing.T, c *jobCase) {
	ctx := context.Background()
	n1, ok := run.start(t, c, providers()[0], false)
	if !ok {
		return
	}
	copies := 2
	if c.scenario == redelivery {
		copies = 3
	}
	run.markRunning(t, c, n1, copies)
	if c.scenario == redelivery {
		run.concurrently(func() { run.complete(c, n1) }, func() { run.complete(c, n1) }, func() { run.complete(c, n1) })
		return
	}
	n2, ok := run.start(t, c, providers()[1], true)
	if !ok {
		return
	}
	run.markRunning(t, c, n2, 2)
	switch c.scenario {
	case hedgeRace:
		run.concurrently(func() { run.complete(c, n1) }, func() { run.complete(c, n1) },
			func() { run.complete(c, n2) }, func() { run.complete(c, n2) })
	case unknownResolve:
		run.concurrently(func() {
			run.redeliver(c, func() error {
				_, err := run.eng().MarkUnknown(ctx, c.id, n1, "timeout")
				return err
			})
			run.redeliver(c, func() error {
				run.resolves.Add(1)
				res := job.Resolution{Outcome: c.resolution, Reason: "checked with the provider"}
				if c.resolution == job.AttemptSucceeded {
					res.Result = json.RawMessage(c.resolvedResult(n1))
				}
				j, err := run.eng().Resolve(ctx, c.id, n1, res)
				c.record(func() { c.resolved = append(c.resolved, resolveResult{completedBy: j.CompletedBy, err: err}) })
				return err
			})
		}, func() { run.complete(c, n2) }, func() { run.complete(c, n2) })
	case cancelRace:
		run.concurrently(func() {
			run.redeliver(c, func() error {
				run.cancels.Add(1)
				_, err := run.eng().Cancel(ctx, c.id)
				c.record(func() { c.cancels = append(c.cancels, err) })
				return err
			})
		}, func() { run.complete(c, n1) }, func() { run.complete(c, n2) })
	}
}

// noteErr remembers a call that ended with an unknown outcome: its write
// may have applied without the ledger copy that follows it.
func (c *jobCase) noteErr(err error) {
	if errors.Is(err, lifecycle.ErrUnavailable) {
		c.record(func() { c.abandoned = true })
	}
}

// resolutionRefused reports whether a resolution was refused as a conflict.
func (c *jobCase) resolutionRefused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rr := range c.resolved {
		var conflict *job.ResolutionConflictError
		if errors.As(rr.err, &conflict) {
			return true
		}
	}
	return false
}

func (c *jobCase) record(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

func (run *faultRun) concurrently(fs ...func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, f := range fs {
		wg.Go(func() { <-start; f() })
	}
	close(start)
	wg.Wait()
}

// start starts an attempt on provider. A start whose write applied but
// whose reply was lost is found by reading the job, as job.Next would.
func (run *faultRun) start(t *testing.T, c *jobCase, provider string, hedge bool) (int, bool) {
	ctx := context.Background()
	startFn := run.r.eng.StartAttempt
	if hedge {
		startFn = run.r.eng.StartHedge
	}
	for range redeliveries {
		run.starts.Add(1)
		_, a, err := startFn(ctx, c.id, provider)
		c.noteErr(err)
		if err == nil {
			c.attempts[a.Number] = provider
			return a.Number, true
		}
		var blocked *job.BlockedError
		if !errors.As(err, &blocked) && !errors.Is(err, lifecycle.ErrUnavailable) {
			t.Errorf("%s: start on %s: %v", c.key, provider, err)
			return 0, false
		}
		j, gerr := run.r.check.Get(ctx, c.id)
		if gerr != nil {
			t.Errorf("%s: read: %v", c.key, gerr)
			return 0, false
		}
		for _, a := range j.Attempts {
			if a.Provider == provider {
				if blocked != nil && blocked.Attempt == a.Number {
					c.misreported++
					run.misreportedStarts.Add(1)
				}
				c.attempts[a.Number] = provider
				return a.Number, true
			}
		}
		if blocked != nil {
			t.Errorf("%s: start on %s blocked by attempt %d (%s)", c.key, provider, blocked.Attempt, blocked.State)
			return 0, false
		}
	}
	t.Errorf("%s: start on %s kept failing", c.key, provider)
	return 0, false
}

// markRunning claims attempt n from several runners at once (a redelivered
// task), then again while none got an answer.
func (run *faultRun) markRunning(t *testing.T, c *jobCase, n, copies int) {
	ctx := context.Background()
	claimOnce := func() {
		run.marks.Add(1)
		_, claimed, err := run.eng().MarkRunning(ctx, c.id, n)
		c.noteErr(err)
		c.record(func() { c.claims[n] = append(c.claims[n], claim{claimed: claimed, err: err}) })
	}
	fs := make([]func(), copies)
	for k := range fs {
		fs[k] = claimOnce
	}
	run.concurrently(fs...)
	for range redeliveries {
		answered := false
		for _, cl := range c.claims[n] {
			answered = answered || cl.err == nil
		}
		if answered {
			return
		}
		run.redeliveries.Add(1)
		claimOnce()
	}
	t.Errorf("%s: mark running %d kept failing", c.key, n)
}

func (run *faultRun) complete(c *jobCase, n int) {
	run.redeliver(c, func() error {
		run.completes.Add(1)
		res, err := run.eng().Complete(context.Background(), c.id, n, json.RawMessage(c.result(n)), "")
		c.record(func() {
			c.completions = append(c.completions, completion{attempt: n, won: res.Won, lost: res.Lost, err: err})
		})
		return err
	})
}

// verifyOutcomes reads every job and its ledger without faults.
func (run *faultRun) verifyOutcomes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, c := range run.cases {
		if !c.exists {
			continue
		}
		j, err := run.r.check.Get(ctx, c.id)
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if problems := run.checkOutcome(t, c, j); len(problems) > 0 {
			t.Errorf("%s (%s, job %s): %v\njob: status=%s version=%d completed_by=%d attempts=%+v",
				c.key, c.scenario, c.id, problems, j.Status, j.Version, j.CompletedBy, j.Attempts)
		}
	}
	never(t, "start-misreported", int(run.misreportedStarts.Load()),
		"lifecycle.StartAttempt returned BlockedError naming the attempt its own (retried) write started")
	never(t, "claim-lost", int(run.lostClaims.Load()),
		"no MarkRunning call was told claimed=true although all answered and the attempt is running")
	never(t, "ledger-lag", int(run.laggingLedgers.Load()),
		"the attempts table disagrees with the job item although every call answered "+
			"(a write the SDK retried after it applied skipped its ledger copy)")
	if n := run.abandonedLags.Load(); n > 0 {
		t.Logf("ledger copies missing after a call gave up with an unknown outcome: %d (allowed: ListAttempts prefers the job item)", n)
	}
}

func (run *faultRun) checkOutcome(t *testing.T, c *jobCase, j job.Job) []string {
	t.Helper()
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	wantStatus := job.StatusSucceeded
	if c.scenario == cancelRace && j.Status == job.StatusCancelled {
		wantStatus = job.StatusCancelled
	}
	if j.Status != wantStatus || j.Version != 1 || (j.Status == job.StatusSucceeded) != (j.CompletedBy != 0) {
		fail("status=%s version=%d completed_by=%d", j.Status, j.Version, j.CompletedBy)
	}
	raw, err := run.r.clean.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(run.r.names.Jobs),
		Key: map[string]types.AttributeValue{dynamo.AttrID: &types.AttributeValueMemberS{Value: c.id}}, ConsistentRead: aws.Bool(true)})
	// A finished job leaves the open index with the write that ends its
	// last attempt in flight (issue 26), and not before.
	if err != nil || (raw.Item[dynamo.AttrOpenShard] != nil) != j.Unsettled() {
		fail("open index entry %v for a job with work in flight %v (err %v)", raw.Item[dynamo.AttrOpenShard] != nil, j.Unsettled(), err)
	}
	if j.AttemptCount != len(j.Attempts) || len(j.Attempts) != len(c.attempts) {
		fail("attempt_count=%d attempts=%d started=%d", j.AttemptCount, len(j.Attempts), len(c.attempts))
	}
	succeeded := 0
	for _, a := range j.Attempts {
		if c.attempts[a.Number] != a.Provider {
			fail("attempt %d on %s, started on %q", a.Number, a.Provider, c.attempts[a.Number])
		}
		switch {
		case a.State == job.AttemptSucceeded:
			succeeded++
			if a.Number != j.CompletedBy {
				fail("attempt %d succeeded but %d won", a.Number, j.CompletedBy)
			}
		case a.State == job.AttemptDiscarded:
		case a.State == job.AttemptFailed && c.scenario == unknownResolve && c.resolution == job.AttemptFailed && a.Number == 1:
		case a.State == job.AttemptUnknown && c.scenario == unknownResolve && c.resolution == job.AttemptSucceeded && a.Number == 1 &&
			j.CompletedBy == 2 && c.resolutionRefused():
			// The hedge won first: a succeeded resolution could no longer be
			// kept and was refused, writing nothing (job.DecideResolve).
		default:
			fail("attempt %d left %s", a.Number, a.State)
		}
	}
	if want := map[bool]int{true: 1, false: 0}[j.CompletedBy != 0]; succeeded != want {
		fail("%d attempts succeeded", succeeded)
	}
	if j.CompletedBy != 0 {
		want := c.result(j.CompletedBy)
		if c.scenario == unknownResolve && j.CompletedBy == 1 {
			want = c.resolvedResult(1)
		}
		if string(j.Result) != want {
			fail("result %s, want %s", j.Result, want)
		}
	}

	// The ledger: directly, and as the API lists it (job item preferred).
	ledger := run.r.ledger(t, c.id)
	if len(ledger) > len(j.Attempts) {
		fail("ledger holds %d attempts, job %d", len(ledger), len(j.Attempts))
	}
	for _, a := range j.Attempts {
		switch {
		case ledger[a.Number] == string(a.State):
		case !a.State.Terminal():
			// The ledger copies an attempt when it starts and when it ends
			// (job.Transition.RecordsAttempt); an open one is the job
			// item's alone.
		case c.abandoned:
			// A caller that gave up after its write applied never wrote the
			// copy: by design the job item is the authority (see below).
			run.abandonedLags.Add(1)
		default:
			run.laggingLedgers.Add(1)
		}
	}
	listed, err := run.r.check.Attempts(context.Background(), j)
	if err != nil || len(listed) != len(j.Attempts) {
		fail("list attempts: %d, %v", len(listed), err)
	}
	for k, a := range listed {
		if k < len(j.Attempts) && (a.Number != j.Attempts[k].Number || a.State != j.Attempts[k].State) {
			fail("listed attempt %d %s, job says %d %s", a.Number, a.State, j.Attempts[k].Number, j.Attempts[k].State)
		}
	}

	// What each call was told must agree with the final state.
	reportedWinner := false
	for _, cp := range c.completions {
		switch {
		case cp.err != nil:
		case cp.won:
			reportedWinner = reportedWinner || cp.attempt == j.CompletedBy
			if cp.attempt != j.CompletedBy {
				fail("attempt %d was told it won; %d did", cp.attempt, j.CompletedBy)
			}
		case cp.lost != nil:
			if cp.attempt == j.CompletedBy || cp.lost.Winner != j.CompletedBy {
				fail("attempt %d was told it lost to %d; %d won", cp.attempt, cp.lost.Winner, j.CompletedBy)
			}
		default:
			fail("attempt %d was told neither won nor lost", cp.attempt)
		}
	}
	for _, rr := range c.resolved {
		var conflict *job.ResolutionConflictError
		switch {
		case errors.As(rr.err, &conflict):
			if j.CompletedBy == 1 && !conflict.Resolved {
				fail("a resolution was refused (%v), yet attempt 1 won", rr.err)
			}
			continue
		case rr.err != nil && !errors.Is(rr.err, lifecycle.ErrUnavailable):
			fail("resolve: %v", rr.err)
			continue
		case rr.err != nil:
			continue
		}
		won := rr.completedBy == 1 && c.resolution == job.AttemptSucceeded
		reportedWinner = reportedWinner || won
		if won != (j.CompletedBy == 1 && c.resolution == job.AttemptSucceeded) {
			fail("resolve saw completed_by=%d; final %d", rr.completedBy, j.CompletedBy)
		}
	}
	if j.CompletedBy != 0 && !reportedWinner {
		fail("nobody was told attempt %d won", j.CompletedBy)
	}
	for _, err := range c.cancels {
		switch {
		case err == nil && j.Status != job.StatusCancelled:
			fail("cancel succeeded; job %s", j.Status)
		case errors.Is(err, job.ErrJobFinished) && j.Status != job.StatusSucceeded:
			fail("cancel refused as finished; job %s", j.Status)
		case err != nil && !errors.Is(err, job.ErrJobFinished) && !errors.Is(err, lifecycle.ErrUnavailable):
			fail("cancel: %v", err)
		}
	}
	for n, cls := range c.claims {
		claimed, answered := 0, 0
		for _, cl := range cls {
			if cl.err == nil {
				answered++
				if cl.claimed {
					claimed++
				}
			}
		}
		switch {
		case claimed > 1:
			fail("attempt %d claimed by %d runners", n, claimed)
		case claimed == 0 && answered == len(cls):
			run.lostClaims.Add(1)
		}
	}
	return problems
}

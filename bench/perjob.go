package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/receiver"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// benchOwners is how many owners share make run's stack in its rows.
const benchOwners = 4

// scenario is one kind of job, run n times at once (on make run's stack,
// by benchOwners owners in turn).
type scenario struct {
	Name    string
	jobType string
	script  map[string]any
	// resolve settles attempt 1 as failed through the admin API once it is
	// unknown, as an operator would.
	resolve bool
	want    string // the settled attempts, "n:provider:state,..."; empty: any, as long as the job succeeded
	// makeRun: on a stack configured as make run is (per-owner quotas on,
	// breakers that act); the others run with quotas off and breakers that
	// never act, so that each measures its own path.
	makeRun bool
	// rate: on a stack whose demo providers declare a rate_limit (too high
	// to bind), quotas off and breakers that never act: what declaring a
	// rate adds.
	rate bool
	// createRate: on a stack whose only quota is a create rate (600 a
	// minute, a burst of 1,000: never binding) for its owner, whose burst
	// comes faster than the rate refills: what the token bucket adds.
	createRate bool
	// budget: on a stack whose owners' spend is budgeted ($1,000 a day at
	// the demo prices: never binding) and no quota: what a reservation at
	// the create and its settlement at the attempt's end add.
	budget bool
	// brownout: the primary hangs brownoutHang on every call while the
	// jobs are submitted over brownoutSpread (then recovers); makeRun.
	brownout bool
	// endpoint: the owner has one webhook endpoint (a loopback receiver
	// answering 204); makeRun. Without handoff, the write that records an
	// event hands nothing off: once the jobs settled, the notifier's passes
	// run until every event is delivered, and count with the jobs (the
	// schedule alone, as before issue 28). With handoff, each such write
	// invokes the notify function at once (asynchronously), which tries its
	// job's deliveries; no pass runs.
	endpoint, handoff bool
}

// The brownout scenario: issue 19's drill as a cost row.
const (
	brownoutJobs   = 40
	brownoutSpread = 10 * time.Second
	brownoutHang   = 20 * time.Second
)

func scenarios() []scenario {
	return []scenario{
		{Name: "happy path", jobType: "demo", want: "1:sim-primary:succeeded"},
		{Name: "one fallback", jobType: "demo", script: map[string]any{sim.DemoPrimary: map[string]any{"outcome": "error"}},
			want: "1:sim-primary:failed,2:sim-fallback:succeeded"},
		{Name: "hedge", jobType: "demo-hedge", script: map[string]any{
			sim.DemoPrimary:  map[string]any{"outcome": "ok", "latency_ms": 1500},
			sim.DemoFallback: map[string]any{"outcome": "ok", "latency_ms": 100},
		}, want: "1:sim-primary:discarded,2:sim-fallback:succeeded"},
		{Name: "unknown then resolved", jobType: "demo", script: map[string]any{sim.DemoPrimary: map[string]any{"outcome": "timeout"}},
			resolve: true, want: "1:sim-primary:failed,2:sim-fallback:succeeded"},
		// The answer comes after the type's 2 s timeout: the reconciler
		// asks again under the same key and gets it.
		{Name: "unknown then settled automatically", jobType: "demo", script: map[string]any{sim.DemoPrimary: map[string]any{"outcome": "ok", "latency_ms": 3500}},
			want: "1:sim-primary:succeeded"},
		// make run's configuration: quotas on (one conditional write on the
		// owner's counters per create and one per finished job) and the
		// demo providers' declared max_concurrent, counted from admission
		// for the fair share (issue 26: one write of the provider's health
		// at the admission, one at the release).
		{Name: "happy path, quotas on", jobType: "demo", want: "1:sim-primary:succeeded", makeRun: true},
		// A declared rate (issue 26): its spend rides on one conditional
		// write of the provider's health at the admission.
		{Name: "happy path, rate limit declared (requests and tokens)", jobType: "demo", want: "1:sim-primary:succeeded", rate: true},
		// A create rate (issue 26): spent in the owner's counting write (the
		// quotas' count and uncount, which it needs), a second write when
		// the owner's bucket is not full (its creates come faster than its
		// rate refills).
		{Name: "happy path, create rate", jobType: "demo", want: "1:sim-primary:succeeded", createRate: true},
		// A budget (issue 26): a reservation written on the owner's item
		// with the create, a settling write when the attempt ends.
		{Name: "happy path, budget", jobType: "demo", want: "1:sim-primary:succeeded", budget: true},
		// The same with one webhook endpoint: the outcome write also
		// appends the event to the job's outbox (no extra request), then
		// the notifier fans it out and delivers it.
		{Name: "happy path, quotas on, one endpoint, schedule only", jobType: "demo", want: "1:sim-primary:succeeded", makeRun: true, endpoint: true},
		// Issue 28: the event handed to the notify function by the write
		// that records it (one asynchronous invoke), which tries it at once.
		{Name: "happy path, quotas on, one endpoint", jobType: "demo", want: "1:sim-primary:succeeded", makeRun: true, endpoint: true, handoff: true},
		{Name: "brownout", jobType: "demo", brownout: true, makeRun: true},
	}
}

// perJob is what one job of a scenario cost, averaged over its runs.
type perJob struct {
	Scenario string `json:"scenario"`
	Jobs     int    `json:"jobs"`
	// DynamoDB, per job.
	DynamoRequests  float64            `json:"dynamodb_requests"`
	DynamoByOp      map[string]float64 `json:"dynamodb_requests_by_operation"`
	ReadUnits       float64            `json:"read_request_units"`
	WriteUnits      float64            `json:"write_request_units"`
	IndexWriteUnits float64            `json:"index_write_request_units_modelled"`
	CondFailed      float64            `json:"conditional_check_failures"`
	// ReadBacks are GetItems the store makes after a failed condition on the
	// jobs and providers tables only because dynalite ignores
	// ReturnValuesOnConditionCheckFailure; DynamoDB would not see them.
	ReadBacks        float64 `json:"local_only_read_backs"`
	StateTransitions float64 `json:"state_transitions"`
	// Lambda, per job: invocations and billed milliseconds per function
	// ("api" is the create request, timed at the client).
	LambdaInvocations map[string]float64 `json:"lambda_invocations"`
	LambdaBilledMS    map[string]float64 `json:"lambda_billed_ms"`
	APIRequests       float64            `json:"api_requests"`
	// Seconds is the wall time until every job of the scenario settled.
	Seconds float64 `json:"seconds"`
	// FirstTryP50MS and FirstTryP99MS: for the endpoint rows, how long
	// after its event (the write that ended the job) each event's first
	// try reached the endpoint. Without a hand-off the bench runs the
	// passes as soon as the jobs settled; deployed, the schedule adds up
	// to a minute (docs/webhooks.md).
	FirstTryP50MS float64 `json:"first_try_p50_ms,omitempty"`
	FirstTryP99MS float64 `json:"first_try_p99_ms,omitempty"`
}

func (p perJob) lambdaInvocations() float64 {
	var n float64
	for _, v := range p.LambdaInvocations {
		n += v
	}
	return n
}

func (p perJob) lambdaGBSeconds(memoryGB float64) float64 {
	var ms float64
	for _, v := range p.LambdaBilledMS {
		ms += v
	}
	return ms / 1000 * memoryGB
}

// benchCallTimeout bounds the run function's wait on a silent provider in
// the bench (the deployed worker waits up to 4 minutes; see costs).
const benchCallTimeout = 5 * time.Second

// measurePerJob runs each scenario on a stack whose DynamoDB traffic goes
// through the counting proxy, with the sweeper off so nothing else writes.
func measurePerJob(ctx context.Context, o options, dynamoURL string, logOut *slog.Logger) ([]perJob, []waitRow, *stack.Stack, func(), error) {
	names := dynamo.NamesWithPrefix("bench-cost")
	proxy := newDDBProxy(dynamoURL, names.Jobs, dynamo.NamesWithPrefix("bench-brownout").Jobs, dynamo.NamesWithPrefix("bench-rate").Jobs,
		dynamo.NamesWithPrefix("bench-create").Jobs, dynamo.NamesWithPrefix("bench-budget").Jobs)
	ps := httptest.NewServer(proxy)
	times := newLambdaTimes()
	log := slog.New(captureHandler{next: logOut.Handler(), observe: times.observe})
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL,
		TablePrefix: "bench-cost", CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, DemoProviders: stack.BreakersNeverAct,
		Quotas: &job.Quotas{}, NotificationsOff: true})
	if err != nil {
		ps.Close()
		return nil, nil, nil, nil, err
	}
	closeAll := func() { _ = s.Close(); ps.Close() }
	// make run's configuration (quotas, breakers), on tables of its own.
	b, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL,
		TablePrefix: "bench-brownout", CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, NotifyHandoff: true})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	closeAll = func() { _ = b.Close(); _ = s.Close(); ps.Close() }
	// A declared rate (requests and tokens: both ride the admission's
	// write), on tables of its own.
	rs, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL,
		TablePrefix: "bench-rate", CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, Quotas: &job.Quotas{}, NotificationsOff: true,
		DemoProviders: func(c provider.Config) provider.Config {
			c = stack.BreakersNeverAct(c)
			for i := range c.Providers {
				c.Providers[i].RateLimit = &provider.RateLimitConfig{Requests: 1_000_000, Tokens: 1_000_000_000, Per: "1m"}
			}
			return c
		}})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	closeAll = func() { _ = rs.Close(); _ = b.Close(); _ = s.Close(); ps.Close() }
	// A create rate, on tables of its own.
	cs, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL,
		TablePrefix: "bench-create", CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, NotificationsOff: true,
		Quotas: &job.Quotas{Creates: job.CreateRate{PerMinute: 600, Burst: 1_000}}, DemoProviders: stack.BreakersNeverAct})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	closeAll = func() { _ = cs.Close(); _ = rs.Close(); _ = b.Close(); _ = s.Close(); ps.Close() }
	// A budget, on tables of its own.
	bs, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: ps.URL,
		TablePrefix: "bench-budget", CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, NotificationsOff: true,
		Quotas: &job.Quotas{}, DemoProviders: stack.BreakersNeverAct,
		Budget: job.Budget{Amount: 1000 * job.NanosPerUSD, Period: 24 * time.Hour, Prices: stack.DemoPrices()}})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	closeAll = func() {
		_ = bs.Close()
		_ = cs.Close()
		_ = rs.Close()
		_ = b.Close()
		_ = s.Close()
		ps.Close()
	}
	bsUser, err := newAPIClient(bs.APIURL, bs.JWTSecret(), "bench-cost")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	bsReader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: bs.Tables})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	cUser, err := newAPIClient(cs.APIURL, cs.JWTSecret(), "bench-cost")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	cReader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: cs.Tables})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	rUser, err := newAPIClient(rs.APIURL, rs.JWTSecret(), "bench-cost")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	rReader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: rs.Tables})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	user, err := newAPIClient(s.APIURL, s.JWTSecret(), "bench-cost")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	admin, err := newAPIClient(s.APIURL, s.JWTSecret(), "bench-operator", "jobs:admin")
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	// Polling reads go straight to dynalite so they are not counted.
	reader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: names})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	// make run's stack is shared by several owners, as production is: the
	// fair share keeps the last slots of a provider from an owner alone.
	var bUsers, bHooks []*apiClient
	for i := range benchOwners {
		u, err := newAPIClient(b.APIURL, b.JWTSecret(), fmt.Sprintf("bench-cost-%d", i))
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		h, err := newAPIClient(b.APIURL, b.JWTSecret(), fmt.Sprintf("bench-hooks-%d", i))
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		bUsers, bHooks = append(bUsers, u), append(bHooks, h)
	}
	bReader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: b.Tables})
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	// The endpoint rows' owner and its receiver.
	hooks, err := receiver.Start()
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	prevClose := closeAll
	closeAll = func() { prevClose(); _ = hooks.Close() }
	// The endpoint rows' owners: one endpoint each, at a path of its own.
	for i, h := range bHooks {
		path := fmt.Sprintf("/bench-%d", i)
		code, body, err := h.do(ctx, http.MethodPost, "/v1/webhook-endpoints", "", map[string]any{"url": hooks.URL + path})
		var ep struct{ Secret string }
		if err == nil && (code != http.StatusCreated || json.Unmarshal(body, &ep) != nil) {
			err = fmt.Errorf("register an endpoint: %d %s", code, body)
		}
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		hooks.Expect(path, ep.Secret)
	}
	var out []perJob
	for _, sc := range scenarios() {
		n := o.jobsPerScenario
		if sc.resolve {
			n = max(1, n/2) // each of these waits out the call timeout
		}
		on, u, rd := s, []*apiClient{user}, reader
		if sc.makeRun {
			// At most what the primary takes at once: more would rightly
			// go to the fallback, and the row measures the happy path.
			on, u, rd, n = b, bUsers, bReader, min(n, sim.DemoMaxConcurrent)
		}
		if sc.rate {
			on, u, rd = rs, []*apiClient{rUser}, rReader
		}
		if sc.createRate {
			on, u, rd = cs, []*apiClient{cUser}, cReader
		}
		if sc.budget {
			on, u, rd = bs, []*apiClient{bsUser}, bsReader
		}
		var hk *receiver.Receiver
		if sc.endpoint {
			u, hk = bHooks, hooks
		}
		if sc.brownout {
			n = brownoutJobs
		}
		r, err := runScenario(ctx, on, proxy, times, u, admin, rd, sc, n, hk)
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
		out = append(out, r)
	}
	waits, err := measureWaits(ctx, s, proxy, user, prices())
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, fmt.Errorf("waiting: %w", err)
	}
	return out, waits, s, closeAll, nil
}

func runScenario(ctx context.Context, s *stack.Stack, proxy *ddbProxy, times *lambdaTimes, users []*apiClient, admin *apiClient,
	reader *dynamo.Store, sc scenario, n int, hooks *receiver.Receiver) (perJob, error) {
	slog.Info("measuring", "scenario", sc.Name, "jobs", n)
	// Start from a quiet stack: nothing of the last scenario still running.
	if err := s.Lambda.Wait(ctx); err != nil {
		return perJob{}, err
	}
	ddb0 := proxy.snapshot()
	ms0, _ := times.snapshot()
	req0 := map[string]int{}
	for _, fn := range append(deploy.TaskNames(), deploy.FnNotify) {
		req0[fn] = s.Lambda.Requests(fn)
	}
	var delivered func() int
	var deliveredBefore int
	if hooks != nil {
		s.PauseHandoff(!sc.handoff)
		delivered = func() int {
			var k int
			for i := range users {
				k += len(receiver.Delivered(hooks.Deliveries(fmt.Sprintf("/bench-%d", i))))
			}
			return k
		}
		deliveredBefore = delivered()
	}
	start := time.Now()
	run := start.UnixNano()

	ids := make([]string, n)
	apiMS := make([]float64, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	if sc.brownout {
		if err := s.Sim.SetScript(sim.DemoPrimary, sim.DemoScript{LatencyMS: int(brownoutHang.Milliseconds()), Outcome: sim.OutcomeOK}); err != nil {
			return perJob{}, err
		}
	}
	for i := range n {
		if sc.brownout && i > 0 {
			time.Sleep(brownoutSpread / time.Duration(n)) // the load's shape: jobs arrive over the spread
		}
		wg.Go(func() {
			input := map[string]any{"prompt": fmt.Sprintf("bench %s %d", sc.Name, i)}
			if sc.script != nil {
				input["simulate"] = sc.script
			}
			t0 := time.Now()
			id, code, err := users[i%len(users)].create(ctx, fmt.Sprintf("cost-%d-%d", run, i), map[string]any{"type": sc.jobType, "input": input})
			apiMS[i] = float64(time.Since(t0).Milliseconds() + 1)
			if err == nil && code != http.StatusCreated {
				err = fmt.Errorf("create answered %d", code)
			}
			ids[i], errs[i] = id, err
		})
	}
	wg.Wait()
	if sc.brownout {
		s.Sim.ClearScript(sim.DemoPrimary) // it recovers; the hung calls still finish their work
	}
	if err := errors.Join(errs...); err != nil {
		return perJob{}, err
	}
	apiRequests := 1.0

	// Settle: every job terminal, every attempt closed, every execution over.
	resolved := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	if sc.brownout {
		deadline = deadline.Add(2 * brownoutHang)
	}
	for {
		done := 0
		for _, id := range ids {
			j, err := reader.Get(ctx, id)
			if err != nil {
				return perJob{}, err
			}
			if a, ok := j.Attempt(1); sc.resolve && ok && a.State == job.AttemptUnknown && !resolved[id] {
				code, body, err := admin.do(ctx, http.MethodPost, "/v1/jobs/"+id+"/attempts/1/resolve", "",
					map[string]any{"outcome": "failed", "reason": "provider has no record of the request"})
				if err != nil || code != http.StatusOK {
					return perJob{}, fmt.Errorf("resolve %s: %d %v %s", id, code, err, body)
				}
				resolved[id] = true
			}
			if j.Status.Terminal() && len(j.Open()) == 0 {
				if got := states(j); (sc.want != "" && got != sc.want) || (sc.want == "" && j.Status != job.StatusSucceeded) {
					return perJob{}, fmt.Errorf("job %s settled as %s, want %s", id, got, sc.want)
				}
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			return perJob{}, fmt.Errorf("%d of %d jobs settled within 60 s", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sc.resolve {
		apiRequests++ // the operator's resolve
	}
	var transitions int
	for _, id := range ids {
		if err := awaitExecution(ctx, s, id); err != nil {
			return perJob{}, err
		}
		t, err := s.SFN.StateTransitions(ctx, id)
		if err != nil {
			return perJob{}, err
		}
		transitions += t
	}
	// Late work (the hedge's loser, a call waiting out its timeout) still
	// reads and writes after the job settled: it belongs to the job.
	if err := s.Lambda.Wait(ctx); err != nil {
		return perJob{}, err
	}
	// The notifier (the notify function's passes), until every event is
	// delivered: each pass's fixed queries (by_notify and by_due, every
	// shard) are shared by the jobs it serves.
	var passes int
	var notifyMS float64
	if hooks != nil && sc.handoff {
		// Handed off: the notify function's invocations deliver them.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := hooks.Await(wctx, "", func([]receiver.Delivery) bool { return delivered() >= deliveredBefore+n })
		cancel()
		if err != nil {
			return perJob{}, fmt.Errorf("%d of %d events handed off were delivered", delivered()-deliveredBefore, n)
		}
		if err := s.Lambda.Wait(ctx); err != nil { // their last writes
			return perJob{}, err
		}
	}
	if hooks != nil && !sc.handoff {
		before := deliveredBefore
		for delivered() < before+n {
			if passes > 50 {
				return perJob{}, fmt.Errorf("%d of %d events delivered after %d notifier passes", delivered()-before, n, passes)
			}
			t0 := time.Now()
			if _, err := s.Notifier.Pass(ctx); err != nil {
				return perJob{}, fmt.Errorf("notifier: %w", err)
			}
			notifyMS += float64(time.Since(t0).Milliseconds() + 1)
			passes++
		}
	}
	elapsed := time.Since(start)

	d := deltaOf(ddb0, proxy.snapshot())
	tot, byOp := d.totals()
	ms1, _ := times.snapshot()
	fn := float64(n)
	var readBacks int
	for k, st := range d {
		if strings.HasSuffix(k, " "+s.Tables.Jobs) || strings.HasSuffix(k, " "+s.Tables.Providers) {
			readBacks += st.CondFailed
		}
	}
	r := perJob{
		Scenario: sc.Name, Jobs: n,
		DynamoRequests: round2(float64(tot.Requests) / fn), DynamoByOp: map[string]float64{},
		ReadUnits: round2(tot.ReadUnits / fn), WriteUnits: round2(tot.WriteUnits / fn),
		IndexWriteUnits: round2(tot.IndexWriteUnits / fn), CondFailed: round2(float64(tot.CondFailed) / fn),
		ReadBacks:         round2(float64(readBacks) / fn),
		StateTransitions:  round2(float64(transitions) / fn),
		LambdaInvocations: map[string]float64{"api": apiRequests},
		LambdaBilledMS:    map[string]float64{"api": round2(sum(apiMS) / fn)},
		APIRequests:       apiRequests,
		Seconds:           round2(elapsed.Seconds()),
	}
	if sc.resolve {
		// The resolve request is billed like a create; use the create's time.
		r.LambdaBilledMS["api"] = round2(2 * sum(apiMS) / fn)
	}
	for op, k := range byOp {
		r.DynamoByOp[op] = round2(float64(k) / fn)
	}
	for _, f := range append(deploy.TaskNames(), deploy.FnNotify) {
		if k := s.Lambda.Requests(f) - req0[f]; k > 0 {
			r.LambdaInvocations[f] = round2(float64(k) / fn)
			r.LambdaBilledMS[f] = round2((ms1[f] - ms0[f]) / fn)
		}
	}
	if hooks != nil {
		r.FirstTryP50MS, r.FirstTryP99MS = firstTries(hooks, len(users), start)
	}
	if passes > 0 {
		// Deployed, one scheduled invocation drains them all; counted here
		// as one per pass (an upper bound).
		r.LambdaInvocations[deploy.FnNotify] = round2(float64(passes) / fn)
		r.LambdaBilledMS[deploy.FnNotify] = round2(notifyMS / fn)
	}
	return r, nil
}

// awaitExecution waits until the job's execution has closed.
func awaitExecution(ctx context.Context, s *stack.Stack, id string) error {
	arn := strings.Replace(s.SFN.StateMachineARN(), ":stateMachine:", ":execution:", 1) + ":" + id
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := s.SFNClient.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			return fmt.Errorf("describe %s: %w", id, err)
		}
		if out.Status != sfntypes.ExecutionStatusRunning {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("execution %s still running", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func states(j job.Job) string {
	parts := make([]string, 0, len(j.Attempts))
	for _, a := range j.Attempts {
		parts = append(parts, fmt.Sprintf("%d:%s:%s", a.Number, a.Provider, a.State))
	}
	return strings.Join(parts, ",")
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// firstTries is the p50 and p99, in milliseconds, of how long after its
// event (the body's timestamp) each event created since start first
// reached its endpoint.
func firstTries(hooks *receiver.Receiver, owners int, since time.Time) (p50, p99 float64) {
	var lat []time.Duration
	for i := range owners {
		for _, d := range receiver.Delivered(hooks.Deliveries(fmt.Sprintf("/bench-%d", i))) {
			var body struct {
				Timestamp time.Time `json:"timestamp"`
			}
			if json.Unmarshal(d.Body, &body) != nil || body.Timestamp.Before(since) {
				continue
			}
			lat = append(lat, d.At.Sub(body.Timestamp))
		}
	}
	return percentile(lat, 0.50), percentile(lat, 0.99)
}

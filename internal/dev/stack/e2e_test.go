package stack_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/emf"
)

func defaultStack(t *testing.T) *stack.Stack {
	t.Helper()
	return sharedStack(t, "default", stack.Config{CertifyDemo: true, SweepInterval: sharedSweep})
}

func TestHappyPath(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "happy")
	j := c.submit("demo", "happy-1", nil)
	j = c.await(j.ID, 15*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "succeeded" || len(j.Attempts) != 1 || j.Attempts[0].Provider != sim.DemoPrimary ||
		j.ResultProvider() != sim.DemoPrimary || j.CompletedBy != 1 || j.Version != 1 {
		t.Fatalf("job = %+v (%s)", j, j.States())
	}
	if keys := s.Sim.IdempotencyKeys(sim.DemoPrimary); !slices.Contains(keys, s.ProviderKey(j.ID, 1)) {
		t.Fatalf("sim-primary never saw idempotency key %s/1", j.ID)
	}
}

func TestFallbackAfterProviderError(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "fallback")
	j := c.submit("demo", "fb-1", script{sim.DemoPrimary: {"outcome": "error"}})
	j = c.await(j.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "succeeded" || j.States() != "1:sim-primary:failed,2:sim-fallback:succeeded" ||
		j.ResultProvider() != sim.DemoFallback || j.CompletedBy != 2 {
		t.Fatalf("job = %+v (%s)", j, j.States())
	}
}

func TestBothProvidersFailFailsWithLastError(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "allfail")
	j := c.submit("demo", "af-1", script{sim.DemoPrimary: {"outcome": "error"}, sim.DemoFallback: {"outcome": "malformed"}})
	j = c.await(j.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "failed" || j.States() != "1:sim-primary:failed,2:sim-fallback:failed" || len(j.Error) == 0 {
		t.Fatalf("job = %+v (%s) error=%s", j, j.States(), j.Error)
	}
}

func TestTimeoutBlocksUntilResolved(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "timeout")
	admin := newClient(t, s, "operator", "jobs:admin")
	// Attempt 1 never answers: asked again, the provider says it is still
	// in progress (409), so nothing settles it but an operator.
	j := c.submit("demo", "to-1", script{sim.DemoPrimary: {"outcome": "timeout"}})
	j = c.await(j.ID, 10*time.Second, "status unknown", func(j apiclient.Job) bool { return j.Status == "unknown" })
	if j.States() != "1:sim-primary:unknown" {
		t.Fatalf("after timeout: %s", j.States())
	}
	// Blocked: no attempt 2 through three rounds of the execution deciding
	// again (Run, Hold, Wait), although a fallback exists; each round asks
	// the provider about attempt 1 and hears it is still in progress.
	blocked := `"msg":"attempt_blocked","job_id":"` + j.ID + `"`
	awaitLogs(t, s, blocked, 3, 30*time.Second)
	awaitLogs(t, s, `"msg":"settle_pending","job_id":"`+j.ID+`","attempt":1`, 2, 30*time.Second)
	if got := c.get(j.ID); len(got.Attempts) != 1 || got.Status != "unknown" {
		t.Fatalf("new attempt while unknown: %s (%s)", got.Status, got.States())
	}
	if slices.Contains(s.Sim.IdempotencyKeys(sim.DemoFallback), s.ProviderKey(j.ID, 2)) {
		t.Fatal("fallback was called while attempt 1 was unknown")
	}
	code, _, body := admin.do(http.MethodPost, "/v1/jobs/"+j.ID+"/attempts/1/resolve", "",
		map[string]any{"outcome": "failed", "reason": "provider confirmed the request was dropped"})
	if code != http.StatusOK {
		t.Fatalf("resolve: %d %s", code, body)
	}
	j = c.await(j.ID, 10*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "succeeded" || j.CompletedBy != 2 || j.ResultProvider() != sim.DemoFallback ||
		j.States() != "1:sim-primary:failed,2:sim-fallback:succeeded" {
		t.Fatalf("after resolve: %+v (%s)", j, j.States())
	}
	// Asked again and again, the primary ran attempt 1 once.
	if st := s.Sim.Stats()[sim.DemoPrimary]; slices.Contains(st.ExecutedMoreThanOnce, s.ProviderKey(j.ID, 1)) || st.InProgress == 0 {
		t.Fatalf("the primary's stats %+v: attempt 1 executed more than once, or never asked again", st)
	}
}

func TestAnUnknownAttemptIsSettledByAskingAgain(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "late")
	// The answer comes after the attempt's 2 s timeout: the attempt goes
	// unknown, and the reconciler, asking the provider again under the same
	// key, gets the first answer once the work is done.
	j := c.submit("demo", "late-1", script{sim.DemoPrimary: {"outcome": "ok", "latency_ms": 3500}})
	c.await(j.ID, 10*time.Second, "status unknown", func(j apiclient.Job) bool { return j.Status == "unknown" })
	j = c.await(j.ID, 15*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "succeeded" || j.States() != "1:sim-primary:succeeded" || j.ResultProvider() != sim.DemoPrimary {
		t.Fatalf("job = %+v (%s)", j, j.States())
	}
	atts := c.attempts(j.ID)
	if len(atts) != 1 || atts[0].Resolution == nil || atts[0].Resolution.By != "reconciler" {
		t.Fatalf("attempts %+v, want attempt 1 settled by the reconciler", atts)
	}
	if st := s.Sim.Stats()[sim.DemoPrimary]; slices.Contains(st.ExecutedMoreThanOnce, s.ProviderKey(j.ID, 1)) {
		t.Fatalf("the primary executed attempt 1 more than once: %+v", st)
	}
}

func TestHedgeReverseOrderFinish(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "hedge")
	// The primary holds its answer until the hedge has won (an event, not
	// a latency: a busy machine was seen to start the hedge 2 s late, and
	// another past the 4 s timeout the type had then), then answers inside
	// its 15 s timeout and loses.
	release := s.Sim.Gate(sim.DemoPrimary, "e2e rev-1")
	defer release()
	j := c.submit("demo-hedge", "rev-1", script{sim.DemoFallback: {"outcome": "ok", "latency_ms": 100}})
	c.await(j.ID, 15*time.Second, "the hedge won", func(j apiclient.Job) bool {
		return j.Status == "succeeded" && j.CompletedBy == 2
	})
	release()
	j = c.await(j.ID, 15*time.Second, "both attempts closed", func(j apiclient.Job) bool {
		return j.Terminal() && len(j.Attempts) == 2 && j.Attempts[0].State != "running"
	})
	if j.Status != "succeeded" || j.States() != "1:sim-primary:discarded,2:sim-fallback:succeeded" ||
		j.CompletedBy != 2 || j.ResultProvider() != sim.DemoFallback || j.Version != 1 {
		t.Fatalf("job = %+v (%s)", j, j.States())
	}
	if atts := c.attempts(j.ID); len(atts) != 2 || atts[0].Hedge || !atts[1].Hedge {
		t.Fatalf("attempts = %+v, want attempt 2 to be the hedge", atts)
	}
	// The loser's discard is visible before its runner logs and counts
	// it (a busy machine saw the read win): wait for both, bounded.
	awaitLogs(t, s, `"msg":"race_lost","job_id":"`+j.ID+`"`, 1, 15*time.Second)
	for deadline := time.Now().Add(15 * time.Second); s.Metrics.Get(emf.RaceLost) < 1 || s.Metrics.Get(emf.AttemptsDiscarded) < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("race_lost=%v discarded=%v, want counted", s.Metrics.Get(emf.RaceLost), s.Metrics.Get(emf.AttemptsDiscarded))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDuplicateDeliverySameEndStates(t *testing.T) {
	t.Parallel()
	s := ownStack(t, "duplicate", stack.Config{CertifyDemo: true, DuplicateDelivery: true})
	c := newClient(t, s, "dup")
	cases := []struct {
		name, jobType string
		script        script
		want          string
	}{
		{"Happy", "demo", nil, "1:sim-primary:succeeded"},
		{"Fallback", "demo", script{sim.DemoPrimary: {"outcome": "error"}}, "1:sim-primary:failed,2:sim-fallback:succeeded"},
		// The primary holds its answer until the hedge has won (Gate).
		{"Hedge", "demo-hedge", script{sim.DemoFallback: {"outcome": "ok", "latency_ms": 100}},
			"1:sim-primary:discarded,2:sim-fallback:succeeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &client{t: t, api: c.api}
			release := func() {}
			if tc.jobType == "demo-hedge" {
				release = s.Sim.Gate(sim.DemoPrimary, "e2e dup-"+tc.name)
				defer release()
			}
			j := c.submit(tc.jobType, "dup-"+tc.name, tc.script)
			j = c.await(j.ID, 30*time.Second, "settled", func(j apiclient.Job) bool {
				if j.CompletedBy == 2 {
					release()
				}
				return j.Terminal() && j.States() == tc.want
			})
			if j.Version != 1 {
				t.Fatalf("version %d, want 1", j.Version)
			}
			for _, p := range []string{sim.DemoPrimary, sim.DemoFallback} {
				seen := map[string]int{}
				for _, k := range s.Sim.IdempotencyKeys(p) {
					seen[k]++
				}
				for n := 1; n <= len(j.Attempts); n++ {
					if seen[fmt.Sprintf("%s/%d", j.ID, n)] > 1 {
						t.Fatalf("%s called %d times for attempt %d", p, seen[fmt.Sprintf("%s/%d", j.ID, n)], n)
					}
				}
			}
		})
	}
	if s.Lambda.Invocations(deploy.FnRun) < 2*s.Lambda.Requests(deploy.FnRun) {
		t.Fatalf("duplicate delivery off: %d runs for %d requests", s.Lambda.Invocations(deploy.FnRun), s.Lambda.Requests(deploy.FnRun))
	}
}

func TestFiftyRandomJobs(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "random")
	outcomes := []string{"ok", "ok", "error", "malformed", "timeout"}
	rng := rand.New(rand.NewPCG(7, 11))
	type planned struct {
		key     string
		primary string
		backup  string
	}
	var jobs []planned
	for i := range 50 {
		jobs = append(jobs, planned{key: fmt.Sprintf("rnd-%d", i), primary: outcomes[rng.IntN(len(outcomes))], backup: outcomes[rng.IntN(len(outcomes))]})
	}
	var wg sync.WaitGroup
	for _, p := range jobs {
		wg.Go(func() {
			cc := &client{t: t, api: c.api}
			j := cc.submit("demo", p.key, script{
				sim.DemoPrimary:  {"outcome": p.primary, "latency_ms": rng32(p.key) % 200},
				sim.DemoFallback: {"outcome": p.backup, "latency_ms": rng32(p.key+"b") % 200},
			})
			want, wantStates := expect(p.primary, p.backup)
			j = cc.await(j.ID, 30*time.Second, want, func(j apiclient.Job) bool { return j.Status == want && j.States() == wantStates })
			winners := 0
			for _, a := range j.Attempts {
				if a.State == "succeeded" {
					winners++
				}
			}
			if winners > 1 || (want == "succeeded") != (j.CompletedBy != 0) {
				t.Errorf("%s: %d winners, completed_by %d", p.key, winners, j.CompletedBy)
			}
		})
	}
	wg.Wait()
	// One execution per job, named by the job ID.
	out, err := s.SFNClient.ListExecutions(context.Background(), &sfn.ListExecutionsInput{StateMachineArn: aws.String(s.SFN.StateMachineARN())})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, e := range out.Executions {
		names[aws.ToString(e.Name)]++
	}
	for n, k := range names {
		if k != 1 {
			t.Fatalf("execution %s exists %d times", n, k)
		}
	}
}

// expect is what a script implies: primary ok wins; a failing primary falls
// back; a silent provider leaves the job unknown.
func expect(primary, backup string) (string, string) {
	switch primary {
	case "ok":
		return "succeeded", "1:sim-primary:succeeded"
	case "timeout":
		return "unknown", "1:sim-primary:unknown"
	}
	switch backup {
	case "ok":
		return "succeeded", "1:sim-primary:failed,2:sim-fallback:succeeded"
	case "timeout":
		return "unknown", "1:sim-primary:failed,2:sim-fallback:unknown"
	}
	return "failed", "1:sim-primary:failed,2:sim-fallback:failed"
}

func rng32(s string) int {
	h := 0
	for _, c := range s {
		h = h*31 + int(c)
	}
	if h < 0 {
		h = -h
	}
	return h
}

// Every attempt-level log line names its job and attempt, and the lifecycle
// counters move.
func TestObservability(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "observe")
	j := c.submit("demo-hedge", "obs-1", script{
		sim.DemoPrimary:  {"outcome": "error", "latency_ms": 10},
		sim.DemoFallback: {"outcome": "ok", "latency_ms": 10},
	})
	c.await(j.ID, 20*time.Second, "an outcome", apiclient.Job.Terminal)
	lines := 0
	for _, line := range strings.Split(logsOf(s), "\n") {
		if !strings.Contains(line, `"msg":"attempt_`) && !strings.Contains(line, `"msg":"race_lost"`) &&
			!strings.Contains(line, `"msg":"provider_called"`) {
			continue
		}
		lines++
		if !strings.Contains(line, `"job_id":"job_`) || !strings.Contains(line, `"attempt":`) {
			t.Fatalf("attempt log line without job_id and attempt: %s", line)
		}
	}
	if lines == 0 {
		t.Fatal("no attempt log lines")
	}
	for _, name := range []string{emf.AttemptsStarted, emf.Fallbacks} {
		if s.Metrics.Get(name) < 1 {
			t.Fatalf("counter %s = %v", name, s.Metrics.Get(name))
		}
	}
}

// TestOversizedResultFallsBack: a provider result the job item cannot hold
// (450 KiB; DynamoDB's items stop at 400 KB) fails its attempt as a
// contract violation and the job falls back — never unknown for a store
// fault, never a retry loop: the provider is called once.
func TestOversizedResultFallsBack(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "oversized")
	ops := newClient(t, s, "oversized-operator", "jobs:admin")
	j := c.submit("demo", "big-1", script{sim.DemoPrimary: {"outcome": sim.OutcomeOversized}})
	j = c.await(j.ID, 30*time.Second, "an outcome", apiclient.Job.Terminal)
	if j.Status != "succeeded" || j.States() != "1:sim-primary:failed,2:sim-fallback:succeeded" || j.ResultProvider() != sim.DemoFallback {
		t.Fatalf("job = %+v (%s)", j, j.States())
	}
	a := ops.attempts(j.ID)[0]
	if !strings.Contains(string(a.Error), `"class":"contract_violation"`) || !strings.Contains(string(a.Error), "too large to store") {
		t.Fatalf("attempt 1's error: %s", a.Error)
	}
	// Executed once: on a loaded machine the attempt may go unknown and the
	// reconciler re-send its request, which the primary answers from memory.
	calls := 0
	for _, k := range s.Sim.IdempotencyKeys(sim.DemoPrimary) {
		if k == s.ProviderKey(j.ID, 1) {
			calls++
		}
	}
	if twice := s.Sim.Stats()[sim.DemoPrimary].ExecutedMoreThanOnce; calls == 0 || slices.Contains(twice, s.ProviderKey(j.ID, 1)) {
		t.Fatalf("the primary got %d requests for attempt 1 and executed it more than once: %v", calls, slices.Contains(twice, s.ProviderKey(j.ID, 1)))
	}
	// On a loaded machine the run may outlive its 2 s timeout while it
	// reads and checks the answer: then the attempt is unknown, by the rule,
	// until that answer's failure settles it. Nothing else may make it so.
	for _, line := range strings.Split(logsOf(s), "\n") {
		switch {
		case !strings.Contains(line, `"job_id":"`+j.ID+`"`):
		case strings.Contains(line, `"msg":"attempt_unknown"`) && !strings.Contains(line, "no answer within the run's timeout"):
			t.Fatalf("the oversized result made an attempt unknown: %s", line)
		case strings.Contains(line, "StoreUnavailable"), strings.Contains(line, "StoreRefused"):
			t.Fatalf("the oversized result looked like a store fault: %s", line)
		}
	}
}

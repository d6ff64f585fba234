package stack_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider/openai"
)

// asyncSpeed compresses the asynchronous provider's clock and onejob's poll
// schedule alike, so each run of the drill asks the provider as often as a
// deployment would (job.DefaultPollSchedule) while its 2 minutes of work
// pass in 5 s.
const asyncSpeed = 24

// TestAsyncJobsOnTheLocalStack drives the asynchronous demo provider
// (OpenAI's Responses API in background mode, simulated) through the whole
// local stack, as deployed: the API, the state machine's Run → Hold → Wait
// loop, the run function's submit and polls, and the events function taking
// the provider's signed webhooks. Two owners; one phase after the other,
// since the provider's switches (dropped webhooks, a lost answer) are its
// own, not a job's.
func TestAsyncJobsOnTheLocalStack(t *testing.T) {
	t.Parallel()
	d := job.DefaultPollSchedule()
	s := ownStack(t, "async", stack.Config{AsyncWork: 2 * time.Minute, AsyncSpeed: asyncSpeed,
		Poll: job.PollSchedule{First: d.First / asyncSpeed, Last: d.Last / asyncSpeed}})
	alice, bob := newClient(t, s, "async-alice"), newClient(t, s, "async-bob")
	const bound = 2 * time.Minute // only bounds a failure

	// The provider works 2 minutes (its clock); the run function is billed
	// for the submit and the polls only, and the webhook ends the job.
	runBilled, runs := s.Lambda.Billed("run"), s.Lambda.Invocations("run")
	j := alice.submit("demo-async", "async-webhook", nil)
	done := alice.await(j.ID, bound, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	awaitExecution(t, s, j.ID)
	billed, invoked := s.Lambda.Billed("run")-runBilled, s.Lambda.Invocations("run")-runs
	transitions, err := s.SFN.StateTransitions(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedJob(t, s, j.ID)
	rem := stored.Attempts[0].Remote
	key := stored.Attempts[0].SentKey()
	t.Logf("webhook: provider worked %s (its clock), run function billed %s in %d invocations, %d polls, %d state transitions",
		2*time.Minute, billed, invoked, rem.Polls, transitions)
	if billed >= time.Second || string(done.Result) == "" {
		t.Fatalf("run function billed %s (want under 1 s); result %s", billed, done.Result)
	}
	if !loggedLine(logsOf(s), `"msg":"provider_event"`, rem.ID, `"outcome":"applied"`) {
		t.Fatalf("no webhook of work %s was applied by the events function", rem.ID)
	}
	if n := s.AsyncSim.Executed(openai.MetadataKey, key); n != 1 || len(s.AsyncSim.ByMetadata(openai.MetadataKey, key)) != 1 {
		t.Fatalf("the work ran %d times, %d responses", n, len(s.AsyncSim.ByMetadata(openai.MetadataKey, key)))
	}

	// A duplicate, a forged and a replayed delivery change nothing.
	events := s.AsyncSim.Events()
	ev := events[len(events)-1]
	before := storedJob(t, s, j.ID)
	if _, err := s.AsyncSim.Redeliver(t.Context(), ev.EventID); err != nil {
		t.Fatal(err)
	}
	post := func(header http.Header, body []byte) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.APIURL+"/v1/provider-events/"+sim.DemoAsync, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := ownClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	forgedBody := []byte(strings.Replace(string(ev.Body), ev.ResponseID, "resp_forged", 1))
	signed, _ := webhooks.Headers([]string{s.AsyncSim.WebhookSecret()}, ev.WebhookID, now, ev.Body)
	stale, _ := webhooks.Headers([]string{s.AsyncSim.WebhookSecret()}, ev.WebhookID, now.Add(-10*time.Minute), ev.Body)
	if code := post(signed, forgedBody); code != http.StatusBadRequest {
		t.Fatalf("forged delivery: %d", code)
	}
	if code := post(stale, ev.Body); code != http.StatusBadRequest {
		t.Fatalf("replayed delivery: %d", code)
	}
	if code := post(signed, ev.Body); code != http.StatusOK {
		t.Fatalf("a genuine repeat: %d", code)
	}
	if after := storedJob(t, s, j.ID); after.Revision != before.Revision {
		t.Fatalf("a repeated, forged or replayed delivery wrote the job (revision %d → %d)", before.Revision, after.Revision)
	}

	// Its webhook lost, the job still ends: the run asks by id.
	s.AsyncSim.DropWebhooks(true)
	lost := bob.submit("demo-async", "async-no-webhook", nil)
	bob.await(lost.ID, bound, "succeeded by polling", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	s.AsyncSim.DropWebhooks(false)
	if r := storedJob(t, s, lost.ID).Attempts[0].Remote; r == nil || r.Polls == 0 {
		t.Fatalf("ended without a poll: %+v", r)
	}

	// A submit whose answer was lost: the attempt is unknown, nothing is
	// submitted again, and the webhook finds its work by the key it
	// carries; the provider ran it once.
	s.AsyncSim.LoseAnswers(1)
	found := alice.submit("demo-async", "async-lost-submit", nil)
	alice.await(found.ID, bound, "succeeded once found", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	got := storedJob(t, s, found.ID)
	fk := got.Attempts[0].SentKey()
	if got.AttemptCount != 1 || got.Attempts[0].Remote == nil || !got.Attempts[0].Remote.Found ||
		len(s.AsyncSim.ByMetadata(openai.MetadataKey, fk)) != 1 || s.AsyncSim.Executed(openai.MetadataKey, fk) != 1 {
		t.Fatalf("lost submit: %d attempts, remote %+v, %d responses, executed %d", got.AttemptCount, got.Attempts[0].Remote,
			len(s.AsyncSim.ByMetadata(openai.MetadataKey, fk)), s.AsyncSim.Executed(openai.MetadataKey, fk))
	}

	// Cancelling the job cancels its work at the provider, once.
	c := bob.submit("demo-async", "async-cancel", nil)
	awaitStored(t, s, c.ID, bound, func(j job.Job) bool { return len(j.Attempts) == 1 && j.Attempts[0].Remote != nil })
	if code, _, body := bob.do(http.MethodPost, "/v1/jobs/"+c.ID+"/cancel", "", map[string]any{}); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	ended := awaitStored(t, s, c.ID, bound, func(j job.Job) bool { return j.Attempts[0].State == job.AttemptCancelled })
	rec, _ := s.AsyncSim.Get(ended.Attempts[0].Remote.ID)
	if rec.Cancels != 1 || rec.Executions != 0 {
		t.Fatalf("the provider saw %d cancels, %d executions", rec.Cancels, rec.Executions)
	}

	// The other asynchronous kind, webhook-async (a receiver keeping the
	// asynchronous webhook contract), on the same stack: its signed
	// callbacks reach the same events function, for two owners; then a
	// submit whose answer was lost is found again (by its key: the
	// receiver's lookup, or its callback) and executed once.
	// All three at once: the provider's 2 minutes pass for them together.
	s.HookAsyncSim.LoseAnswers(1)
	hf := bob.submit("demo-hook-async", "hook-async-lost", nil)
	type hookJob struct {
		who *client
		id  string
	}
	hooked := []hookJob{{alice, alice.submit("demo-hook-async", "hook-async-a", nil).ID}, {bob, bob.submit("demo-hook-async", "hook-async-b", nil).ID}}
	for _, h := range hooked {
		h.who.await(h.id, bound, "succeeded by its callback", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
		got := storedJob(t, s, h.id)
		if n := s.HookAsyncSim.Executions(got.Attempts[0].SentKey()); n != 1 || got.Attempts[0].Remote == nil || got.Attempts[0].Remote.Found {
			t.Fatalf("webhook-async work of %s ran %d times, remote %+v", h.id, n, got.Attempts[0].Remote)
		}
		// Its callback reached the events function and was taken (2xx:
		// applied, or a duplicate when a poll ended the job first).
		work := got.Attempts[0].Remote.ID
		taken := func() bool {
			for _, cb := range s.HookAsyncSim.Callbacks() {
				for _, d := range cb.Deliveries {
					if cb.WorkID == work && d.Status == http.StatusOK {
						return true
					}
				}
			}
			return false
		}
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		err := s.HookAsyncSim.WaitFor(ctx, taken)
		cancel()
		if err != nil {
			t.Fatalf("no callback of work %s was taken by the events function: %+v", work, s.HookAsyncSim.Callbacks())
		}
	}
	bob.await(hf.ID, bound, "succeeded once found", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	got = storedJob(t, s, hf.ID)
	if r := got.Attempts[0].Remote; got.AttemptCount != 1 || r == nil || !r.Found || s.HookAsyncSim.Executions(got.Attempts[0].SentKey()) != 1 {
		t.Fatalf("webhook-async lost submit: %d attempts, remote %+v, executed %d", got.AttemptCount, r, s.HookAsyncSim.Executions(got.Attempts[0].SentKey()))
	}
}

func storedJob(t *testing.T, s *stack.Stack, id string) job.Job {
	t.Helper()
	j, err := s.Store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// awaitStored waits until the stored job meets cond; the timeout only
// bounds a failure.
func awaitStored(t *testing.T, s *stack.Stack, id string, timeout time.Duration, cond func(job.Job) bool) job.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := storedJob(t, s, id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: not reached within %s; last: %+v", id, timeout, j)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitExecution waits until the job's execution has ended, and checks it
// succeeded.
func awaitExecution(t *testing.T, s *stack.Stack, jobID string) {
	t.Helper()
	arn := strings.Replace(s.SFN.StateMachineARN(), ":stateMachine:", ":execution:", 1) + ":" + jobID
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := s.SFNClient.DescribeExecution(t.Context(), &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != sfntypes.ExecutionStatusRunning {
			if out.Status != sfntypes.ExecutionStatusSucceeded {
				t.Fatalf("execution %s", out.Status)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the execution did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loggedLine reports whether one log line holds every part.
func loggedLine(logs string, parts ...string) bool {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

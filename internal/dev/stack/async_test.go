package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider/openai"
)

// asyncSpeed compresses the asynchronous providers' clocks and onejob's
// poll schedule, its pass's period and its waits' graces alike, so each
// run of the drill asks the provider as often as a deployment would
// (job.DefaultPollSchedule, deploy.PollEvery) while its 10 minutes of work
// pass in 5 s.
const (
	asyncSpeed = 120
	asyncWork  = 10 * time.Minute
)

// TestAsyncJobsOnTheLocalStack drives the asynchronous demo provider
// (OpenAI's Responses API in background mode, simulated) through the whole
// local stack, as deployed: the API, the state machine's run, which submits
// and ends its execution with the job parked, the events function taking
// the provider's signed webhooks and its scheduled pass polling and
// cancelling. Two owners; one phase after the other, since the provider's
// switches (dropped webhooks, a lost answer) are its own, not a job's.
func TestAsyncJobsOnTheLocalStack(t *testing.T) {
	t.Parallel()
	d := job.DefaultPollSchedule()
	// The providers declare 30 minutes of max_processing_time (their
	// clock), so work is given up 40 minutes after its submit (20 s here);
	// each owner's spend is budgeted, so what stuck work holds shows.
	price := job.Price{Version: "demo-async", Input: 10 * job.NanosPerUSD, Output: 100 * job.NanosPerUSD}
	s := ownStack(t, "async", stack.Config{AsyncWork: asyncWork, AsyncSpeed: asyncSpeed,
		Poll: job.PollSchedule{First: d.First / asyncSpeed, Last: d.Last / asyncSpeed}, PassInterval: deploy.PollEvery / asyncSpeed,
		RemoteGrace: job.DefaultRemoteGrace / asyncSpeed, CancelGrace: job.DefaultCancelGrace / asyncSpeed,
		AsyncMaxProcessing: 30 * time.Minute / asyncSpeed,
		Budget:             job.Budget{Amount: 10 * job.NanosPerUSD, Period: 24 * time.Hour, Prices: map[string]job.Price{sim.DemoAsync: price, sim.DemoHookAsync: price}}})
	alice, bob := newClient(t, s, "async-alice"), newClient(t, s, "async-bob")
	const bound = 2 * time.Minute // only bounds a failure

	// Whatever the provider's latency, a job costs the same: one state
	// transition (its run submits and parks), and its run function is
	// billed for the submit alone. alice's work ends at once, bob's after
	// the provider worked 10 minutes (its clock); each webhook ends its
	// job.
	runBilled, runs := s.Lambda.Billed("run"), s.Lambda.Invocations("run")
	fast := alice.submit("demo-async", "async-webhook-fast", nil)
	slow := bob.submit("demo-async", "async-webhook", nil)
	fastWork := awaitStored(t, s, fast.ID, bound, func(j job.Job) bool { return len(j.Attempts) == 1 && j.Attempts[0].Remote != nil })
	if err := s.AsyncSim.Complete(fastWork.Attempts[0].Remote.ID); err != nil {
		t.Fatal(err)
	}
	var latency [2]time.Duration
	var transitions [2]int
	for i, c := range []struct {
		who *client
		id  string
	}{{alice, fast.ID}, {bob, slow.ID}} {
		done := c.who.await(c.id, bound, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
		awaitExecution(t, s, c.id)
		if string(done.Result) == "" {
			t.Fatalf("job %s: no result", c.id)
		}
		stored := storedJob(t, s, c.id)
		latency[i] = stored.Attempts[0].Usage.Latency * asyncSpeed
		transitions[i] = jobTransitions(t, s, stored)
		rem := stored.Attempts[0].Remote
		if !loggedLine(logsOf(s), `"msg":"provider_event"`, rem.ID, `"outcome":"applied"`) {
			t.Fatalf("no webhook of work %s was applied by the events function", rem.ID)
		}
		if key := stored.Attempts[0].SentKey(); s.AsyncSim.Executed(openai.MetadataKey, key) > 1 || len(s.AsyncSim.ByMetadata(openai.MetadataKey, key)) != 1 {
			t.Fatalf("the work ran %d times, %d responses", s.AsyncSim.Executed(openai.MetadataKey, key), len(s.AsyncSim.ByMetadata(openai.MetadataKey, key)))
		}
	}
	billed, invoked := s.Lambda.Billed("run")-runBilled, s.Lambda.Invocations("run")-runs
	t.Logf("webhook: provider worked %s and %s (its clock), %d and %d state transitions; run function billed %s in %d invocations for both",
		latency[0].Round(time.Second), latency[1].Round(time.Second), transitions[0], transitions[1], billed, invoked)
	if transitions[0] != transitions[1] || transitions[1] > 3 || latency[1] < asyncWork {
		t.Fatalf("state transitions %v at latencies %v: want the same, at most 3, and the slow one %s", transitions, latency, asyncWork)
	}
	if billed >= time.Second || invoked != 2 {
		t.Fatalf("run function billed %s in %d invocations for two jobs (want under 1 s, one each)", billed, invoked)
	}
	j := slow
	rem := storedJob(t, s, j.ID).Attempts[0].Remote
	// A duplicate, a forged and a replayed delivery change nothing.
	var ev sim.WebhookEventRecord
	for _, e := range s.AsyncSim.Events() {
		if e.ResponseID == rem.ID {
			ev = e
		}
	}
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
	if code := post(signed, forgedBody); code != http.StatusUnauthorized {
		t.Fatalf("forged delivery: %d", code)
	}
	if code := post(stale, ev.Body); code != http.StatusUnauthorized {
		t.Fatalf("replayed delivery: %d", code)
	}
	if code := post(signed, ev.Body); code != http.StatusOK {
		t.Fatalf("a genuine repeat: %d", code)
	}
	if after := storedJob(t, s, j.ID); after.Revision != before.Revision {
		t.Fatalf("a repeated, forged or replayed delivery wrote the job (revision %d → %d)", before.Revision, after.Revision)
	}

	// Its webhook lost, the job still ends: the scheduled pass asks by
	// id, and the job costs the same one transition.
	s.AsyncSim.DropWebhooks(true)
	lost := bob.submit("demo-async", "async-no-webhook", nil)
	bob.await(lost.ID, bound, "succeeded by polling", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	s.AsyncSim.DropWebhooks(false)
	polled := storedJob(t, s, lost.ID)
	if r := polled.Attempts[0].Remote; r == nil || r.Polls == 0 {
		t.Fatalf("ended without a poll: %+v", r)
	}
	if n := jobTransitions(t, s, polled); n != transitions[1] {
		t.Fatalf("the job ended by polling made %d state transitions, the one its webhook ended %d", n, transitions[1])
	}

	// Work that fails wakes its job: the events function, which took the
	// webhook, starts the run the job then needs (execution <job_id>-1),
	// which fails it (no provider left): one more transition, 2 in all.
	s.AsyncSim.SetOutcome(sim.WorkFailed)
	broken := alice.submit("demo-async", "async-work-fails", nil)
	alice.await(broken.ID, bound, "failed by its woken run", func(j apiclient.Job) bool { return j.Status == string(job.StatusFailed) })
	s.AsyncSim.SetOutcome(sim.WorkCompleted)
	awaitExecution(t, s, broken.ID+"-1")
	if n := jobTransitions(t, s, storedJob(t, s, broken.ID)); n != 2 {
		t.Fatalf("a job woken by its failed work made %d state transitions, want 2", n)
	}
	if !loggedLine(logsOf(s), `"msg":"job_woken"`, broken.ID, broken.ID+"-1") {
		t.Fatalf("no job_woken line for %s", broken.ID)
	}

	// Work its provider never ends, and a cancel it never confirms (review
	// N-M2): three owners' jobs wait on stalled work, and one owner cancels
	// its job. With no operator, each ends by its deadline (the cancelled
	// one by its cancel's), the provider asked to cancel each once, and
	// every owner's unfinished-job slot and budget reservation come back.
	s.AsyncSim.Stall(true)
	stalledAt := time.Now()
	carol := newClient(t, s, "async-carol")
	stuck := []struct {
		who   *client
		owner string
		id    string
	}{{who: alice, owner: "async-alice"}, {who: bob, owner: "async-bob"}, {who: carol, owner: "async-carol"}}
	for i := range stuck {
		stuck[i].id = stuck[i].who.submit("demo-async", "async-stuck", nil).ID
	}
	for _, st := range stuck {
		awaitStored(t, s, st.id, bound, func(j job.Job) bool { return len(j.Attempts) == 1 && j.Attempts[0].Remote != nil })
	}
	if code, _, body := carol.do(http.MethodPost, "/v1/jobs/"+stuck[2].id+"/cancel", "", map[string]any{}); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	for i, st := range stuck {
		want := job.StatusFailed
		if i == 2 {
			want = job.StatusCancelled
		}
		got := awaitStored(t, s, st.id, bound, func(j job.Job) bool { return j.Status == want && !j.Unsettled() })
		a := got.Attempts[0]
		rec, _ := s.AsyncSim.Get(a.Remote.ID)
		if a.State != job.AttemptFailed || a.Outcome != "abandoned" || rec.Cancels != 1 || rec.Executions != 0 {
			t.Fatalf("%s's stuck job: attempt %s %q %+v; the provider saw %d cancels", st.owner, a.State, a.Outcome, a.Error, rec.Cancels)
		}
		u, err := s.Store.Usage(t.Context(), st.owner)
		if err != nil {
			t.Fatal(err)
		}
		if u.Unfinished != 0 || u.Budget.Held() != 0 {
			t.Fatalf("%s after its stuck job ended: %d unfinished, %s USD held", st.owner, u.Unfinished, u.Budget.Held().USD())
		}
	}
	s.AsyncSim.Stall(false)
	t.Logf("stalled work: 3 owners' jobs ended by their deadlines %s after their submits (deadline 30 min + 10 min of the provider's clock), "+
		"one cancelled, each asked to cancel once; slots and reservations back, no operator", time.Since(stalledAt).Round(100*time.Millisecond))

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

	// Cancelling the parked job: the scheduled pass cancels its work at
	// the provider, once.
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
	// All three at once: the provider's 2 minutes pass for them together;
	// beside them another owner's openai-background job, ended by its
	// webhook too (for the replays below).
	jb := bob.submit("demo-async", "async-webhook-b", nil)
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

	// Review N-L1: a signed delivery captured as sent (its headers and
	// bytes) and replayed to the route while its signature verifies is
	// answered duplicate without asking the provider: two owners' jobs of
	// each asynchronous kind.
	t.Run("ReplayedDeliveriesAreDuplicates", func(t *testing.T) {
		bob.await(jb.ID, bound, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
		bw := storedJob(t, s, jb.ID).Attempts[0].Remote.ID
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		err := s.AsyncSim.WaitFor(ctx, func() bool {
			for _, e := range s.AsyncSim.Events() {
				for _, d := range e.Deliveries {
					if e.ResponseID == bw && d.Status == http.StatusOK {
						return true
					}
				}
			}
			return false
		})
		cancel()
		if err != nil {
			t.Fatalf("no webhook of work %s was taken by the events function", bw)
		}
		var replays []replay
		for _, id := range []string{j.ID, jb.ID} {
			work := storedJob(t, s, id).Attempts[0].Remote.ID
			for _, e := range s.AsyncSim.Events() {
				for _, d := range e.Deliveries {
					if e.ResponseID == work && d.Status == http.StatusOK {
						replays = append(replays, replay{id, work, d.Header, e.Body, func() int { r, _ := s.AsyncSim.Get(work); return r.Reads }})
					}
				}
			}
		}
		for _, h := range hooked {
			work := storedJob(t, s, h.id).Attempts[0].Remote.ID
			for _, cb := range s.HookAsyncSim.Callbacks() {
				for _, d := range cb.Deliveries {
					if cb.WorkID == work && d.Status == http.StatusOK {
						replays = append(replays, replay{h.id, work, d.Header, cb.Body, func() int { r, _ := s.HookAsyncSim.Get(work); return r.Reads }})
					}
				}
			}
		}
		if len(replays) < 4 {
			t.Fatalf("%d deliveries taken to replay, want at least one per job (4)", len(replays))
		}
		replayDeliveries(t, s, replays)
	})
}

// replay is one delivery as its provider sent it, to send again.
type replay struct {
	jobID, work string
	header      http.Header
	body        []byte
	reads       func() int // how often the provider was asked for the work
}

// replayDeliveries sends each captured delivery again, as captured, three
// times at once: each copy is answered 200 duplicate, the provider is not
// asked for the work again and the job is not written.
func replayDeliveries(t *testing.T, s *stack.Stack, replays []replay) {
	t.Helper()
	const copies = 3
	client := ownClient(t)
	for _, r := range replays {
		before, read := storedJob(t, s, r.jobID), r.reads()
		if read == 0 {
			t.Fatalf("work %s was never read: its delivery did not reach the provider", r.work)
		}
		provider := sim.DemoAsync
		if strings.Contains(string(r.body), "work.ended") {
			provider = sim.DemoHookAsync
		}
		answers := make(chan string, copies)
		for range copies {
			go func() {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.APIURL+"/v1/provider-events/"+provider, bytes.NewReader(r.body))
				if err != nil {
					answers <- err.Error()
					return
				}
				req.Header = r.header.Clone()
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					answers <- err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				answers <- fmt.Sprintf("%d %s", resp.StatusCode, body)
			}()
		}
		for range copies {
			if a := <-answers; a != `200 {"outcome":"duplicate"}` {
				t.Fatalf("a copy of delivery %s: %s; want 200 duplicate", r.header.Get(webhooks.HeaderID), a)
			}
		}
		if n := r.reads(); n != read {
			t.Fatalf("%d copies of delivery %s read work %s %d more times", copies, r.header.Get(webhooks.HeaderID), r.work, n-read)
		}
		if after := storedJob(t, s, r.jobID); after.Revision != before.Revision {
			t.Fatalf("copies wrote job %s (revision %d → %d)", r.jobID, before.Revision, after.Revision)
		}
		if !loggedLine(logsOf(s), `"msg":"provider_event"`, r.header.Get(webhooks.HeaderID), `"taken_before":true`) {
			t.Fatalf("no copy of delivery %s was logged as taken before", r.header.Get(webhooks.HeaderID))
		}
	}
	t.Logf("replays: %d deliveries (2 owners, both asynchronous kinds), %d copies each, all duplicate, 0 provider reads", len(replays), copies)
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

// jobTransitions sums the state transitions of every execution the job's
// name rule gives it (job.ExecutionName: its ID, and one per end of its
// work at a provider that woke it).
func jobTransitions(t *testing.T, s *stack.Stack, j job.Job) int {
	t.Helper()
	names := []string{j.ID}
	for _, a := range j.Attempts {
		if a.Remote != nil && !a.State.Open() {
			names = append(names, j.ID+"-"+strconv.Itoa(a.Number))
		}
	}
	total := 0
	for _, name := range names {
		n, err := s.SFN.StateTransitions(t.Context(), name)
		if err != nil && strings.Contains(err.Error(), "404") {
			continue // no run was woken by that end
		}
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// awaitExecution waits until the execution named name (a job's ID, or
// the name of a run that woke it) has ended, and checks it succeeded.
func awaitExecution(t *testing.T, s *stack.Stack, name string) {
	t.Helper()
	arn := strings.Replace(s.SFN.StateMachineARN(), ":stateMachine:", ":execution:", 1) + ":" + name
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

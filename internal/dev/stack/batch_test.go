package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// batchSpeed runs the batch providers' clocks so that a day passes in
// 10 s; batchWork is a batch's work, nearly its whole window (a batch
// that has not ended at 24 h expires); onejob's questions about a batch are compressed alike
// (asked about every few seconds, as often, in its clock, as a deployment
// asks every half hour).
const (
	batchSpeed = 8640
	batchWork  = 23 * time.Hour
)

// submitTier creates a job of jobType that may wait tier.
func (c *client) submitTier(jobType, key string, tier job.Tier) apiclient.Job {
	c.t.Helper()
	code, _, body := c.do(http.MethodPost, "/v1/jobs", key, map[string]any{"type": jobType, "tier": string(tier),
		"input": map[string]any{"prompt": "batch " + key}})
	if code != http.StatusCreated {
		c.t.Fatalf("submit %s: %d %s", key, code, body)
	}
	var j apiclient.Job
	if err := json.Unmarshal(body, &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}

// TestBatchJobsOnTheLocalStack (issue 40) drives jobs that may wait a day
// through the whole local stack, as deployed: the API, the run that
// queues each as a line of a provider batch and parks it (its execution
// ends), the events function's scheduled pass that gathers the lines of
// three owners into one batch per provider, records it, submits it once,
// asks about it once per due time and applies each line's result through
// its job's compare-and-swap, waking the job whose line failed. Two
// simulated batch APIs (OpenAI Batch, Anthropic Message Batches), a
// batch of a day's work each (its clock compressed): a job costs the one
// state transition of its run, as one answered at once would, and its
// run function well under a second.
func TestBatchJobsOnTheLocalStack(t *testing.T) {
	t.Parallel()
	const perProvider = 15
	d := job.DefaultBatchPolicy()
	// A provider's lines go once it has 15 (the drill's batch); the
	// gathering time only bounds a failure.
	s := ownStack(t, "batch", stack.Config{BatchWork: batchWork, BatchSpeed: batchSpeed, PassInterval: 250 * time.Millisecond,
		Batch: job.BatchPolicy{MaxLines: perProvider, MaxGather: time.Minute, LostSubmitGrace: d.LostSubmitGrace,
			Poll: job.PollSchedule{First: time.Second, Last: 3 * time.Second}}})
	owners := []*client{newClient(t, s, "batch-ana"), newClient(t, s, "batch-bo"), newClient(t, s, "batch-cy")}
	providerOf := map[string]string{"demo-batch": sim.DemoBatchOpenAI, "demo-batch-claude": sim.DemoBatchAnthropic}
	const bound = 2 * time.Minute // only bounds a failure
	queued := func(j job.Job) bool {
		return len(j.Attempts) == 1 && j.Attempts[0].Remote != nil && j.Attempts[0].Remote.IsLine()
	}

	// Thirty jobs of three owners, half on each provider. OpenAI's create
	// answer is lost: the batch is found again by its ID in its
	// metadata, and sent once. cy's first job is cancelled once its line
	// is queued, before its batch is sent: it is dropped, never sent.
	s.BatchSim.OpenAI.LoseAnswers(1)
	runBilled, runs := s.Lambda.Billed("run"), s.Lambda.Invocations("run")
	var jobs []apiclient.Job
	owner, key, typeOf := map[string]*client{}, map[string]string{}, map[string]string{}
	var dropped, failing apiclient.Job
	lines := map[string]string{} // job ID → its line's custom_id
	for i := range 10 {
		for o, c := range owners {
			typ := "demo-batch"
			if i%2 == 1 {
				typ = "demo-batch-claude"
			}
			k := fmt.Sprintf("day-%d", i)
			j := c.submitTier(typ, k, job.TierBatch24h)
			jobs = append(jobs, j)
			owner[j.ID], key[j.ID], typeOf[j.ID] = c, k, typ
			switch {
			case i == 0 && o == 2:
				dropped = j
				lines[j.ID] = awaitStored(t, s, j.ID, bound, queued).Attempts[0].Remote.Line
				if code, _, body := c.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", "", map[string]any{"reason": "drill"}); code != http.StatusOK {
					t.Fatalf("cancel: %d %s", code, body)
				}
			case i == 1 && o == 1:
				// bo's line the provider reports errored.
				failing = j
				lines[j.ID] = awaitStored(t, s, j.ID, bound, queued).Attempts[0].Remote.Line
				s.BatchSim.Anthropic.FailLines(lines[j.ID])
			}
		}
	}
	for _, j := range jobs {
		want := job.StatusSucceeded
		switch j.ID {
		case dropped.ID:
			want = job.StatusCancelled
		case failing.ID:
			want = job.StatusFailed
		}
		got := owner[j.ID].await(j.ID, bound, string(want), func(a apiclient.Job) bool { return a.Status == string(want) })
		if want == job.StatusSucceeded {
			var out struct{ Text, Provider string }
			if json.Unmarshal(got.Result, &out) != nil || !strings.HasSuffix(out.Text, "batch "+key[j.ID]) ||
				out.Provider != providerOf[typeOf[j.ID]] {
				t.Fatalf("job %s (%s of %s): result %s, want its own line's", j.ID, key[j.ID], typeOf[j.ID], got.Result)
			}
		}
	}
	// The job cancelled before its batch was sent: its line dropped,
	// never sent, nothing billed.
	if a := storedJob(t, s, dropped.ID).Attempts[0]; a.State != job.AttemptFailed || a.Error == nil || !a.Error.NotActed() || a.Remote.Batch != "" {
		t.Fatalf("the job cancelled before its batch was sent: attempt %s %+v, batch %q", a.State, a.Error, a.Remote.Batch)
	}
	// The errored line's job was woken, and its run failed it: it has no
	// other provider.
	awaitExecution(t, s, failing.ID+"-1")
	if a := storedJob(t, s, failing.ID).Attempts[0]; a.State != job.AttemptFailed || a.Remote.Status != "errored" {
		t.Fatalf("the errored line's attempt: %s %+v", a.State, a.Remote)
	}

	// One batch per provider, the one whose answer was lost sent once;
	// each asked about once per due time, never per line.
	logs := logsOf(s)
	asked := map[string]int{}
	for name, want := range map[string]int{sim.DemoBatchOpenAI: perProvider - 1, sim.DemoBatchAnthropic: perProvider} {
		bs := batchesOf(s, name)
		if len(bs) != 1 || len(bs[0].Lines) != want {
			t.Fatalf("%s took %d batches (%+v), want one of %d lines", name, len(bs), bs, want)
		}
		if slices.Contains(bs[0].Lines, lines[dropped.ID]) {
			t.Fatalf("the dropped line was sent to %s", name)
		}
		polls := strings.Count(logs, `"msg":"batch_polled","provider":"`+name+`"`)
		asked[name] = bs[0].Reads
		if bs[0].Reads < 1 || bs[0].Reads > polls || bs[0].Reads >= want {
			t.Fatalf("%s's batch was read %d times (%d polls logged): once per due time, not per line", name, bs[0].Reads, polls)
		}
	}
	if c := s.BatchSim.OpenAI.Creates() + s.BatchSim.Anthropic.Creates(); c != 2 || !batchesOf(s, sim.DemoBatchOpenAI)[0].AnswerLost {
		t.Fatalf("%d creates, want one per provider (the OpenAI one's answer lost)", c)
	}
	if !loggedLine(logs, `"msg":"batch_looked_for"`, `"found":true`) {
		t.Fatal("the lost submit was not found again")
	}

	// A day's wait costs a job its run's one state transition, as a job
	// answered at once costs; the woken one two runs.
	transitions := map[string]int{}
	for _, j := range jobs {
		if j.ID != failing.ID {
			awaitExecution(t, s, j.ID)
		}
		n := jobTransitions(t, s, storedJob(t, s, j.ID))
		transitions[j.ID] = n
		if n > 3 || n != 1 && j.ID != failing.ID {
			t.Fatalf("job %s: %d state transitions, want 1 (2 for the woken one, at most 3)", j.ID, n)
		}
	}
	billed, invoked := s.Lambda.Billed("run")-runBilled, s.Lambda.Invocations("run")-runs
	t.Logf("batch: %d jobs of 3 owners, one batch per provider (%s of work, its clock compressed %dx), one dropped before it was sent, one line errored; "+
		"1 state transition a job (%d for the errored line's, woken); run function billed %s in %d invocations (%s a job); the batches read %v times",
		len(jobs), batchWork, batchSpeed, transitions[failing.ID], billed, invoked, billed/time.Duration(len(jobs)), asked)
	if billed/time.Duration(len(jobs)) >= time.Second || invoked != len(jobs)+1 {
		t.Fatalf("run function billed %s in %d invocations for %d jobs (want under 1 s a job, one each and the woken one's)", billed, invoked, len(jobs))
	}
}

// batchesOf is the batch demo provider name's batches, in creation order.
func batchesOf(s *stack.Stack, name string) []sim.BatchRecord {
	if name == sim.DemoBatchAnthropic {
		return s.BatchSim.Anthropic.Batches()
	}
	return s.BatchSim.OpenAI.Batches()
}

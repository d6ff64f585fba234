package providertest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// BatchSim is what the batch suite drives of a batch simulator
// (sim.OpenAIBatch, sim.MessageBatches).
type BatchSim interface {
	Advance(d time.Duration)
	Complete(id string) error
	LoseAnswers(n int)
	FailLines(ids ...string)
	Creates() int
	Batches() []sim.BatchRecord
}

// BatchHarness describes a batch adapter to the suite.
type BatchHarness struct {
	// Start serves a batch simulator built from opts (Lines, APIKey,
	// Window set) and returns it with its handler.
	Start func(t *testing.T, opts sim.BatchOptions) (BatchSim, http.Handler)
	// New builds the adapter against env (the simulator's URL), for model.
	New func(t *testing.T, env Env, model string) provider.Batcher
}

// batchRig is a served batch simulator with its adapter.
type batchRig struct {
	sim   BatchSim
	lines *sim.Simulator
	b     provider.Batcher
}

func (h BatchHarness) start(t *testing.T, model string, window time.Duration) batchRig {
	t.Helper()
	lines := sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: goodOutput}, APIKey: APIKey, Model: "batch-model"})
	s, handler := h.Start(t, sim.BatchOptions{Lines: lines, APIKey: APIKey, Window: window})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	b := h.New(t, Env{BaseURL: srv.URL, APIKey: provider.Secret(APIKey), Logger: provider.DiscardLogger(),
		Now: func() time.Time { return fixedNow }}, model)
	return batchRig{sim: s, lines: lines, b: b}
}

// batchLines are n lines of the suite's request, attempts 1..n of
// distinct jobs, keyed in a deployment's namespace.
func batchLines(b provider.Batcher, n int) []provider.BatchLine {
	out := make([]provider.BatchLine, n)
	for i := range out {
		req := Request(1)
		req.JobID = job.NewID("owner", fmt.Sprintf("key-%d", i))
		req.IdempotencyKey = job.ProviderKeyIn("dev", req.JobID, 1)
		out[i] = provider.BatchLine{CustomID: b.LineID(req.IdempotencyKey), Request: req}
	}
	return out
}

// results reads an ended batch's results by custom_id, failing on a
// repeat.
func results(t *testing.T, b provider.Batcher, w provider.BatchWork) map[string]provider.LineResult {
	t.Helper()
	out := map[string]provider.LineResult{}
	for r, err := range b.BatchResults(t.Context(), w) {
		if err != nil {
			t.Fatalf("results of %s: %v", w.ID, err)
		}
		if _, dup := out[r.CustomID]; dup {
			t.Fatalf("the results of %s name %s twice", w.ID, r.CustomID)
		}
		out[r.CustomID] = r
	}
	return out
}

func ended(t *testing.T, b provider.Batcher, id string) provider.BatchWork {
	t.Helper()
	w, err := b.RetrieveBatch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Ended {
		t.Fatalf("batch %s is %s, not ended", id, w.Status)
	}
	return w
}

// RunBatches runs the batch suite against a Batcher and its simulator.
func RunBatches(t *testing.T, h BatchHarness) {
	t.Run("EachLinesResultComesBackUnderItsCustomID", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", 0)
		lines := batchLines(r.b, 5)
		meta := provider.BatchMeta{ID: "bat_suite1", SentAt: fixedNow, Lines: len(lines)}
		w, err := r.b.SubmitBatch(t.Context(), lines, meta)
		if err != nil {
			t.Fatal(err)
		}
		if w.ID == "" || w.Ended || w.Lines != len(lines) {
			t.Fatalf("submitted: %+v", w)
		}
		open, err := r.b.RetrieveBatch(t.Context(), w.ID)
		if err != nil || open.Ended {
			t.Fatalf("retrieved before it ended: %+v, %v", open, err)
		}
		r.sim.Advance(time.Minute)
		if err := r.sim.Complete(w.ID); err != nil {
			t.Fatal(err)
		}
		got := results(t, r.b, ended(t, r.b, w.ID))
		if len(got) != len(lines) {
			t.Fatalf("%d results for %d lines", len(got), len(lines))
		}
		for _, l := range lines {
			res, ok := got[l.CustomID]
			if !ok {
				t.Fatalf("no result for line %s", l.CustomID)
			}
			resp, err := res.Outcome(l.Request)
			if err != nil || !JSONEqual(t, resp.Output, goodOutput) || res.Status != "succeeded" {
				t.Fatalf("line %s: %s, %s, %v", l.CustomID, res.Status, resp.Output, err)
			}
			if resp.Usage == nil || resp.Usage.OutputTokens == 0 || res.Usage == nil || *res.Usage != *resp.Usage {
				t.Fatalf("line %s reports usage %+v (result %+v): a succeeded line is billed", l.CustomID, resp.Usage, res.Usage)
			}
			// Each line ran once, as the synchronous API would have run
			// its request.
			if n := r.lines.Executions(l.CustomID); n != 1 {
				t.Fatalf("line %s ran %d times", l.CustomID, n)
			}
		}
		if r.sim.Creates() != 1 {
			t.Fatalf("%d creates for one batch", r.sim.Creates())
		}
	})
	t.Run("ALostSubmitIsFoundAgainAndNotSentTwice", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", 0)
		lines := batchLines(r.b, 3)
		meta := provider.BatchMeta{ID: "bat_suite2", SentAt: fixedNow, Lines: len(lines)}
		// Another batch of onejob's, of as many lines, submitted first.
		other, err := r.b.SubmitBatch(t.Context(), batchLines(r.b, 3), provider.BatchMeta{ID: "bat_other", SentAt: fixedNow, Lines: 3})
		if err != nil {
			t.Fatal(err)
		}
		meta.Taken = []string{other.ID}
		r.sim.LoseAnswers(1)
		_, err = r.b.SubmitBatch(t.Context(), lines, meta)
		if provider.Classify(err) != provider.ClassAmbiguous {
			t.Fatalf("a submit whose answer was lost: %v (%s), want ambiguous", err, provider.Classify(err))
		}
		w, found, err := r.b.FindBatch(t.Context(), meta)
		if err != nil || !found || w.ID == "" || w.ID == other.ID || w.Lines != 3 {
			t.Fatalf("found %v: %+v, %v", found, w, err)
		}
		batches := r.sim.Batches()
		if len(batches) != 2 || batches[1].ID != w.ID || !batches[1].AnswerLost {
			t.Fatalf("the simulator holds %+v; want the lost batch found", batches)
		}
		// A batch that was never sent is not found.
		if _, found, err := r.b.FindBatch(t.Context(), provider.BatchMeta{ID: "bat_never", SentAt: fixedNow, Lines: 7,
			Taken: []string{other.ID, w.ID}}); err != nil || found {
			t.Fatalf("a batch never sent was found: %v, %v", found, err)
		}
		if r.sim.Creates() != 2 {
			t.Fatalf("%d creates, want 2 (the lost one sent once)", r.sim.Creates())
		}
	})
	t.Run("AnErroredLineFailsAloneAndIsNotBilled", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", 0)
		lines := batchLines(r.b, 3)
		r.sim.FailLines(lines[1].CustomID)
		w, err := r.b.SubmitBatch(t.Context(), lines, provider.BatchMeta{ID: "bat_suite3", SentAt: fixedNow, Lines: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.sim.Complete(w.ID); err != nil {
			t.Fatal(err)
		}
		got := results(t, r.b, ended(t, r.b, w.ID))
		for i, l := range lines {
			res := got[l.CustomID]
			_, err := res.Outcome(l.Request)
			if i != 1 {
				if err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
				continue
			}
			ce := callError(t, err, provider.ClassRetryable)
			if res.Status != "errored" || res.Usage != nil || ce.Usage != nil || !(job.Failure{Class: job.ClassRetryable, ProviderStatus: ce.Status}).NotActed() {
				t.Fatalf("the errored line: %s, usage %v, %+v: errored, and not billed", res.Status, res.Usage, ce)
			}
		}
	})
	t.Run("ALineTheAPIRefusesEndsErrored", func(t *testing.T) {
		t.Parallel()
		// The adapter asks for a model the simulator does not serve: each
		// line is refused as the synchronous API refuses it.
		r := h.start(t, "other-model", 0)
		lines := batchLines(r.b, 2)
		w, err := r.b.SubmitBatch(t.Context(), lines, provider.BatchMeta{ID: "bat_suite4", SentAt: fixedNow, Lines: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.sim.Complete(w.ID); err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			res := results(t, r.b, ended(t, r.b, w.ID))[l.CustomID]
			_, err := res.Outcome(l.Request)
			ce := callError(t, err, provider.ClassNonRetryable)
			if res.Status != "errored" || ce.Status < 400 || ce.Status > 499 {
				t.Fatalf("a refused line: %s, %+v", res.Status, ce)
			}
		}
	})
	t.Run("ExpiredAndCanceledLinesNeverRanAndAreNotBilled", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", time.Hour)
		lines := batchLines(r.b, 2)
		exp, err := r.b.SubmitBatch(t.Context(), lines[:1], provider.BatchMeta{ID: "bat_suite5", SentAt: fixedNow, Lines: 1})
		if err != nil {
			t.Fatal(err)
		}
		can, err := r.b.SubmitBatch(t.Context(), lines[1:], provider.BatchMeta{ID: "bat_suite6", SentAt: fixedNow, Lines: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.b.CancelBatch(t.Context(), can.ID); err != nil {
			t.Fatal(err)
		}
		// A repeat of the cancel is safe.
		if _, err := r.b.CancelBatch(t.Context(), can.ID); err != nil {
			t.Fatalf("cancelled again: %v", err)
		}
		r.sim.Advance(2 * time.Hour)
		for i, c := range []struct {
			w      provider.BatchWork
			status string
		}{{exp, "expired"}, {can, "canceled"}} {
			res := results(t, r.b, ended(t, r.b, c.w.ID))[lines[i].CustomID]
			_, err := res.Outcome(lines[i].Request)
			ce := callError(t, err, provider.ClassRetryable)
			if res.Status != c.status || res.Usage != nil || ce.Status != 0 || r.lines.Executions(lines[i].CustomID) != 0 {
				t.Fatalf("%s line: %s, usage %v, status %d, ran %d times", c.status, res.Status, res.Usage, ce.Status, r.lines.Executions(lines[i].CustomID))
			}
		}
	})
	t.Run("LineIDsAreApartAndStable", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", 0)
		var ids []string
		for _, key := range []string{job.ProviderKeyIn("dev", "job_a", 1), job.ProviderKeyIn("dev", "job_a", 2),
			job.ProviderKeyIn("dev", "job_b", 1), job.AttemptKey("job_c", 1)} {
			id := r.b.LineID(key)
			if id == "" || id != r.b.LineID(key) || slices.Contains(ids, id) {
				t.Fatalf("LineID(%s) = %q: empty, unstable or repeated among %v", key, id, ids)
			}
			ids = append(ids, id)
		}
	})
	t.Run("NoLinesIsRefusedUnsent", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, "batch-model", 0)
		_, err := r.b.SubmitBatch(t.Context(), nil, provider.BatchMeta{ID: "bat_empty"})
		if !errors.Is(err, provider.ErrInvalidRequest) || r.sim.Creates() != 0 {
			t.Fatalf("no lines: %v, %d creates", err, r.sim.Creates())
		}
	})
}

package lifecycle_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
)

// TestAFlexJobPausesOnResourceUnavailable (issue 40): a job that may wait,
// on an openai-flex provider, is sent at the flex service tier; OpenAI's
// 429 Resource Unavailable is a pause, not a failure (a rate-limited
// attempt the job does not count, not billed), and the next run is
// answered at the flex tier; a job that may not wait goes at the default.
func TestAFlexJobPausesOnResourceUnavailable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	s := sim.New(sim.Options{Oracle: sim.Demo{Provider: "flex"}, APIKey: "sk"})
	srv := httptest.NewServer(s.OpenAI())
	t.Cleanup(srv.Close)
	a, err := openai.New(openai.Config{Name: "flex", BaseURL: srv.URL + "/v1", Model: "o4-mini", APIKey: "sk", Flex: true, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := catalog()
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: mapProviders{"flex": a}, Certifications: r.st, CallTimeout: callTimeout, PollInterval: pollInterval,
		OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	create := func(key string, tier job.Tier) job.Job {
		j, _, err := r.eng.Create(t.Context(), job.Request{Owner: "o", IdempotencyKey: key, Type: "demo",
			Input: json.RawMessage(`{"prompt":"hi"}`), Providers: []string{"flex"}, Primary: "flex", Tier: tier})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := create("k-flex", job.TierFlex8h)
	s.SetFlexUnavailable(1)
	_, _ = tasks.Run(t.Context(), lifecycle.RunInput{JobID: j.ID})
	got := r.get(t, j.ID)
	first, _ := got.Attempt(1)
	if first.State != job.AttemptFailed || first.Error.Class != job.ClassRateLimited || !first.Error.NotActed() || got.Counted() != 0 || got.Status.Terminal() {
		t.Fatalf("after the 429: job %s (%d counted), attempt %s %+v", got.Status, got.Counted(), first.State, first.Error)
	}
	if _, err := tasks.Run(t.Context(), lifecycle.RunInput{JobID: j.ID}); err != nil {
		t.Fatal(err)
	}
	if got := r.get(t, j.ID); got.Status != job.StatusSucceeded || got.CompletedBy != 2 {
		t.Fatalf("after the pause: %s by %d", got.Status, got.CompletedBy)
	}
	now := create("k-now", job.TierNow)
	if _, err := tasks.Run(t.Context(), lifecycle.RunInput{JobID: now.ID}); err != nil {
		t.Fatal(err)
	}
	var tiers []string
	for _, c := range s.Calls() {
		tiers = append(tiers, c.ServiceTier)
	}
	if len(tiers) != 3 || tiers[0] != "flex" || tiers[1] != "flex" || tiers[2] != "" {
		t.Fatalf("service tiers sent %q, want flex, flex, none", tiers)
	}
	if k, _ := provider.ModeFor(a, job.TierFlex8h); k != job.TierFlex8h {
		t.Fatalf("runs 8h at %s", k)
	}
}

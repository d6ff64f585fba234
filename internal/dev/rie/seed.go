package rie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The job the sample events in events/ talk about: user-1's demo job with
// Idempotency-Key order-4711, as events/api-create-job.json creates it
// (job_6ryn5nabj6d79smk97x5m81a98).
const (
	SeedOwner = "user-1"
	SeedKey   = "order-4711"
	SeedType  = "demo"
	seedInput = `{"prompt":"Summarise the attached ticket"}`
)

// seedAge backdates the seeded job past the sweeper's grace (2 minutes in
// functions/sweeper), so the sweeper treats it as stranded.
const seedAge = 10 * time.Minute

// Scenario is the state seeded before an event is invoked.
type Scenario string

// The scenarios, each one step further along a job's life.
const (
	// ScenarioEmpty: no job; a create makes one.
	ScenarioEmpty Scenario = "empty tables"
	// ScenarioPending: the job exists, no attempt yet.
	ScenarioPending Scenario = "job pending"
	// ScenarioRunning: attempt 1 claimed by a runner; sim-fallback
	// certified for demo, so a hedge may start attempt 2 on it.
	ScenarioRunning Scenario = "attempt 1 running, sim-fallback certified"
	// ScenarioUnknown: attempt 1 outlived its timeout.
	ScenarioUnknown Scenario = "attempt 1 unknown"
)

// FunctionForEvent names the function an events/ file is for: api-*.json
// are API Gateway events for api, <function>[-variant].json are for that
// function.
func FunctionForEvent(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	fn, _, _ := strings.Cut(base, "-")
	return fn
}

// eventShape is what seeding reads from an event: API Gateway's route and
// path parameters, or a task's job ID.
type eventShape struct {
	RouteKey       string            `json:"routeKey"`
	PathParameters map[string]string `json:"pathParameters"`
	JobID          string            `json:"job_id"`
	// RawPath is all a function URL's event says of the route.
	RawPath string `json:"rawPath"`
}

// ScenarioFor chooses what to seed so that the event means something:
// a create starts from empty tables, a resolve needs an unknown attempt,
// every other API event reads or cancels the pending job; each task
// function gets the state the state machine would call it in.
func ScenarioFor(fn string, event []byte) (Scenario, string, error) {
	var ev eventShape
	if err := json.Unmarshal(event, &ev); err != nil {
		return "", "", fmt.Errorf("event is not a JSON object: %w", err)
	}
	jobID := ev.JobID
	if id := ev.PathParameters["id"]; id != "" {
		jobID = id
	}
	switch fn {
	case deploy.FnAPI:
		switch {
		case ev.RouteKey == "POST /v1/jobs":
			return ScenarioEmpty, "", nil
		case strings.HasSuffix(ev.RouteKey, "/resolve"):
			return ScenarioUnknown, jobID, nil
		}
		return ScenarioPending, jobID, nil
	case deploy.FnSweeper:
		return ScenarioPending, jobID, nil
	case deploy.FnNotify:
		// A job of an owner without endpoints: nothing to tell.
		return ScenarioPending, jobID, nil
	case deploy.FnRun:
		return ScenarioPending, jobID, nil
	case deploy.FnHold:
		return ScenarioRunning, jobID, nil
	case deploy.FnEvents:
		// A webhook of work no job holds: nothing to seed.
		return ScenarioEmpty, "", nil
	case deploy.FnStream:
		// A function URL's event: the job is the one its path names
		// (/v1/jobs/{id}/stream), pending.
		if id, ok := strings.CutPrefix(ev.RawPath, "/v1/jobs/"); ok {
			jobID, _, _ = strings.Cut(id, "/")
		}
		return ScenarioPending, jobID, nil
	}
	return "", "", fmt.Errorf("no seeding known for function %q", fn)
}

// Seed writes the scenario through the real store and lifecycle. The job is
// user-1's order-4711 demo job; an event naming another job ID gets that ID
// instead (the ID then no longer derives from owner and key, which nothing
// here depends on).
func Seed(ctx context.Context, st *dynamo.Store, sc Scenario, jobID string) (job.Job, error) {
	if sc == ScenarioEmpty {
		return job.Job{}, nil
	}
	past := time.Now().Add(-seedAge)
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: func() time.Time { return past }})
	if err != nil {
		return job.Job{}, err
	}
	j, err := job.New(job.Request{Owner: SeedOwner, IdempotencyKey: SeedKey, Type: SeedType,
		Input: json.RawMessage(seedInput), Providers: []string{sim.DemoPrimary, sim.DemoFallback}, Primary: sim.DemoPrimary}, past)
	if err != nil {
		return job.Job{}, err
	}
	if jobID != "" {
		j.ID = jobID
	}
	if _, _, err := st.Create(ctx, j); err != nil {
		return job.Job{}, fmt.Errorf("seed job: %w", err)
	}
	if sc == ScenarioPending {
		return eng.Get(ctx, j.ID)
	}
	if _, _, launched, err := eng.LaunchOn(ctx, j, sim.DemoPrimary); err != nil || !launched {
		return job.Job{}, fmt.Errorf("seed attempt: launched=%v: %v", launched, err)
	}
	switch sc {
	case ScenarioRunning:
		if err := certify(ctx, st, SeedType, sim.DemoFallback, past); err != nil {
			return job.Job{}, err
		}
		return eng.Get(ctx, j.ID)
	case ScenarioUnknown:
		return eng.MarkUnknown(ctx, j.ID, 1, "no answer within the attempt timeout (seeded)")
	}
	return job.Job{}, errors.New("unknown scenario " + string(sc))
}

// certify records a passing contract run for the job type's current
// contract version, which is what lets the tasks use a fallback provider.
func certify(ctx context.Context, st *dynamo.Store, jobType, providerName string, at time.Time) error {
	cat, err := jobtype.Load()
	if err != nil {
		return err
	}
	t, ok := cat.Get(jobType)
	if !ok {
		return fmt.Errorf("unknown job type %q", jobType)
	}
	return st.PutCertification(ctx, job.Certification{JobType: jobType, ContractVersion: t.ContractVersion(),
		Provider: providerName, Model: "seeded", Passed: true, Cases: json.RawMessage(`[]`), CertifiedAt: at})
}

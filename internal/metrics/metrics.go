// Package metrics counts lifecycle events and writes them as CloudWatch
// Embedded Metric Format lines, which Lambda turns into metrics without an
// API call. The same counters are readable in process for tests and benches.
package metrics

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/engine"
	"github.com/onejob/onejob/internal/job"
)

// Metric names, shared with the alarms in infra/.
const (
	Namespace                    = "onejob"
	AttemptsStarted              = "AttemptsStarted"
	AttemptsUnknown              = "AttemptsUnknown"
	AttemptsDiscarded            = "AttemptsDiscarded"
	Fallbacks                    = "Fallbacks"
	RaceLost                     = "RaceLost"
	AttemptsUnknownOldestSeconds = "AttemptsUnknownOldestSeconds"
)

// Recorder counts and emits metrics.
type Recorder struct {
	mu     sync.Mutex
	counts map[string]float64
	out    io.Writer // nil: count only
	env    string
	now    func() time.Time
}

// New returns a Recorder writing EMF lines to out (nil for none).
func New(out io.Writer, env string, clock func() time.Time) *Recorder {
	if clock == nil {
		clock = time.Now
	}
	return &Recorder{counts: map[string]float64{}, out: out, env: env, now: clock}
}

// Add counts a metric and emits it.
func (r *Recorder) Add(ctx context.Context, name string, value float64, unit string, props map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[name] += value
	if r.out == nil {
		return
	}
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": r.now().UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  Namespace,
				"Dimensions": [][]string{{"env"}},
				"Metrics":    []any{map[string]string{"Name": name, "Unit": unit}},
			}},
		},
		"env": r.env,
		name:  value,
	}
	for k, v := range props {
		line[k] = v
	}
	b, _ := json.Marshal(line)
	_, _ = r.out.Write(append(b, '\n'))
}

// Gauge emits a point-in-time value (the count keeps the last value).
func (r *Recorder) Gauge(ctx context.Context, name string, value float64) {
	r.mu.Lock()
	r.counts[name] = 0
	r.mu.Unlock()
	r.Add(ctx, name, value, "Seconds", nil)
}

// Get returns a counter's value.
func (r *Recorder) Get(name string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

// Counters wires the recorder into the engine's lifecycle hooks.
func (r *Recorder) Counters() engine.Counters {
	attempt := func(name string) func(context.Context, job.Job, job.Attempt) {
		return func(ctx context.Context, j job.Job, a job.Attempt) {
			r.Add(ctx, name, 1, "Count", map[string]any{"job_id": j.ID, "attempt": a.Number, "provider": a.Provider})
		}
	}
	return engine.Counters{
		AttemptStarted:   attempt(AttemptsStarted),
		AttemptUnknown:   attempt(AttemptsUnknown),
		AttemptDiscarded: attempt(AttemptsDiscarded),
		Fallback:         attempt(Fallbacks),
		RaceLost: func(ctx context.Context, l job.LostRace) {
			r.Add(ctx, RaceLost, 1, "Count", map[string]any{"job_id": l.JobID, "attempt": l.Loser, "winning_attempt": l.Winner})
		},
	}
}

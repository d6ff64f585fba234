// Package emf is onejob's metrics adapter: it counts lifecycle events
// (lifecycle.Events) and writes them as CloudWatch Embedded Metric Format
// lines, which Lambda turns into metrics without an API call. The same
// counters are readable in process for tests and benches.
package emf

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Where the functions publish: namespace "onejob", exactly one dimension
// set [Dimension]. CloudWatch matches dimension sets exactly, so a metric
// emitted with extra dimensions would not reach the alarms infra/ builds
// on these names.
const (
	Namespace = "onejob"
	Dimension = "env"
)

// Metric names; infra/'s alarms use these constants.
const (
	AttemptsStarted              = "AttemptsStarted"
	AttemptsUnknown              = "AttemptsUnknown"
	AttemptsDiscarded            = "AttemptsDiscarded"
	Fallbacks                    = "Fallbacks"
	RaceLost                     = "RaceLost"
	AttemptsUnknownOldestSeconds = "AttemptsUnknownOldestSeconds"
	// AttemptsSettledAutomatically and AttemptsSettledByHand count unknown
	// attempts settled by the reconciler and by operators; SettleSeconds is
	// how long each had been unknown.
	AttemptsSettledAutomatically = "AttemptsSettledAutomatically"
	AttemptsSettledByHand        = "AttemptsSettledByHand"
	SettleSeconds                = "SettleSeconds"
	// ProvidersOpened counts breakers opening (the provider-opened alarm).
	ProvidersOpened = "ProvidersOpened"
	// AttemptsAbandoned counts attempts whose work at a provider outlived
	// its deadline and was given up (issue 40, review N-M2).
	AttemptsAbandoned = "AttemptsAbandoned"
	// AdmissionsUnread counts attempts let through to a provider whose
	// health could not be read (one that declares no rate_limit or
	// max_concurrent: it fails open); AdmissionsUnrecorded the admissions
	// refused because the health could not be read or written for a
	// provider that declares them (review N-L5: the job waits instead).
	AdmissionsUnread     = "AdmissionsUnread"
	AdmissionsUnrecorded = "AdmissionsUnrecorded"
	// DeliveryTries counts webhook delivery tries, DeliveriesFailed those
	// that failed; EndpointsDisabled counts webhook endpoints disabled
	// (410, or failing for days: the endpoint-disabled alarm);
	// DeliveriesDropped the deliveries a full endpoint backlog refused.
	DeliveryTries     = "DeliveryTries"
	DeliveriesFailed  = "DeliveryTriesFailed"
	EndpointsDisabled = "EndpointsDisabled"
	DeliveriesDropped = "DeliveriesDropped"
)

// Recorder counts and emits emf.
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
				"Dimensions": [][]string{{Dimension}},
				"Metrics":    []any{map[string]string{"Name": name, "Unit": unit}},
			}},
		},
		Dimension: r.env,
		name:      value,
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

func (r *Recorder) attempt(ctx context.Context, name string, j job.Job, a job.Attempt) {
	r.Add(ctx, name, 1, "Count", map[string]any{"job_id": j.ID, "attempt": a.Number, "provider": a.Provider})
}

// AttemptStarted counts a started attempt.
func (r *Recorder) AttemptStarted(ctx context.Context, j job.Job, a job.Attempt) {
	r.attempt(ctx, AttemptsStarted, j, a)
}

// AttemptUnknown counts an attempt whose outcome became unknown.
func (r *Recorder) AttemptUnknown(ctx context.Context, j job.Job, a job.Attempt) {
	r.attempt(ctx, AttemptsUnknown, j, a)
}

// AttemptDiscarded counts an attempt whose result lost the race.
func (r *Recorder) AttemptDiscarded(ctx context.Context, j job.Job, a job.Attempt) {
	r.attempt(ctx, AttemptsDiscarded, j, a)
}

// Fallback counts an attempt started on a fallback provider.
func (r *Recorder) Fallback(ctx context.Context, j job.Job, a job.Attempt) {
	r.attempt(ctx, Fallbacks, j, a)
}

// RaceLost counts a result discarded because another attempt won.
func (r *Recorder) RaceLost(ctx context.Context, l job.LostRace) {
	r.Add(ctx, RaceLost, 1, "Count", map[string]any{"job_id": l.JobID, "attempt": l.Loser, "winning_attempt": l.Winner})
}

// AttemptSettled counts an unknown attempt settled out of band, by whom,
// and how long it had been unknown.
func (r *Recorder) AttemptSettled(ctx context.Context, j job.Job, a job.Attempt, took time.Duration) {
	name := AttemptsSettledByHand
	if a.Resolution != nil && a.Resolution.By == job.Reconciler {
		name = AttemptsSettledAutomatically
	}
	r.attempt(ctx, name, j, a)
	r.Add(ctx, SettleSeconds, took.Seconds(), "Seconds", map[string]any{"job_id": j.ID, "attempt": a.Number, "provider": a.Provider})
}

// AttemptAbandoned counts an attempt whose work at its provider was given
// up at its deadline.
func (r *Recorder) AttemptAbandoned(ctx context.Context, j job.Job, a job.Attempt) {
	r.attempt(ctx, AttemptsAbandoned, j, a)
}

// ProviderOpened counts a provider's breaker opening.
func (r *Recorder) ProviderOpened(ctx context.Context, h job.Health) {
	r.Add(ctx, ProvidersOpened, 1, "Count", map[string]any{"provider": h.Provider, "reason": h.Reason})
}

// AdmissionUnrecorded counts an admission decided without the provider's
// health: let through (AdmissionsUnread) or refused (AdmissionsUnrecorded).
func (r *Recorder) AdmissionUnrecorded(ctx context.Context, provider string, a job.Admission) {
	name := AdmissionsUnrecorded
	if a.Allowed {
		name = AdmissionsUnread
	}
	r.Add(ctx, name, 1, "Count", map[string]any{"provider": provider})
}

// DeliveryTried counts a webhook delivery's try, and a failed one.
func (r *Recorder) DeliveryTried(ctx context.Context, d job.Delivery, t job.Try) {
	props := map[string]any{"job_id": d.JobID, "endpoint_id": d.EndpointID, "http_status": t.Status, "latency_ms": t.Latency.Milliseconds()}
	r.Add(ctx, DeliveryTries, 1, "Count", props)
	if !job.Delivered(t.Status) {
		r.Add(ctx, DeliveriesFailed, 1, "Count", props)
	}
}

// EndpointDisabled counts a webhook endpoint disabled.
func (r *Recorder) EndpointDisabled(ctx context.Context, e job.Endpoint) {
	r.Add(ctx, EndpointsDisabled, 1, "Count", map[string]any{"owner": e.Owner, "endpoint_id": e.ID, "reason": e.DisabledReason})
}

// DeliveryDropped counts a delivery its endpoint's full backlog refused.
func (r *Recorder) DeliveryDropped(ctx context.Context, d job.Delivery) {
	r.Add(ctx, DeliveriesDropped, 1, "Count", map[string]any{"owner": d.Owner, "job_id": d.JobID, "endpoint_id": d.EndpointID})
}

// OldestUnknown reports the age of the oldest unknown attempt.
func (r *Recorder) OldestUnknown(ctx context.Context, age time.Duration) {
	r.Gauge(ctx, AttemptsUnknownOldestSeconds, age.Seconds())
}

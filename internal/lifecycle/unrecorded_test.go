package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// faultyHealth is a health store whose reads or writes fail as the store
// does when DynamoDB throttles the provider's item.
type faultyHealth struct {
	lifecycle.HealthStore
	mu                    sync.Mutex
	failReads, failWrites bool
	writes                int
}

func (f *faultyHealth) set(reads, writes bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failReads, f.failWrites = reads, writes
}

func (f *faultyHealth) Health(ctx context.Context, p string) (job.Health, error) {
	f.mu.Lock()
	fail := f.failReads
	f.mu.Unlock()
	if fail {
		return job.Health{}, fmt.Errorf("%w: get provider health: ProvisionedThroughputExceededException", lifecycle.ErrUnavailable)
	}
	return f.HealthStore.Health(ctx, p)
}

func (f *faultyHealth) SaveHealth(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	f.mu.Lock()
	fail := f.failWrites
	f.writes++
	f.mu.Unlock()
	if fail {
		return false, job.Health{}, fmt.Errorf("%w: put provider health: ProvisionedThroughputExceededException", lifecycle.ErrUnavailable)
	}
	return f.HealthStore.SaveHealth(ctx, c)
}

// Limits a provider may declare, on the rig's health policy.
func declaring(rate, concurrent bool) job.HealthPolicy {
	p := healthPolicy()
	if rate {
		p.Rate = job.RateLimit{Requests: 100, Per: time.Minute}
	}
	if concurrent {
		p.MaxConcurrent, p.CountAdmitted = 8, true
	}
	return p
}

// Review N-L5: a failed or throttled read or write of a provider's health
// never admits an attempt past a declared rate, fair share or
// max_concurrent; it is refused with a short retry and counted. Only a
// provider that declares none is let through an unreadable health, and
// that is counted too. An operator's forced open, once seen, holds
// (review M3).
func TestAdmissionFailsClosedWhenItsHealthCannotBeRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	none, rate, concurrent := declaring(false, false), declaring(true, false), declaring(false, true)
	uncounted := declaring(false, false)
	uncounted.MaxConcurrent = 8 // count_running false: no admission is recorded, even when the store works
	tests := []struct {
		name   string
		policy job.HealthPolicy
		// before sets the health up while the store works (warm: this
		// process read it once).
		before      func(t *testing.T, b *lifecycle.Breakers)
		warm        bool
		reads, puts bool // which fail
		admitted    bool
		unrecorded  bool
		event       string
	}{
		{name: "ARateWhoseWritesFail", policy: rate, puts: true, unrecorded: true, event: "unrecorded sim-primary admitted=false"},
		{name: "AMaxConcurrentWhoseWritesFail", policy: concurrent, puts: true, unrecorded: true, event: "unrecorded sim-primary admitted=false"},
		{name: "ARateWhoseReadsFail", policy: rate, reads: true, unrecorded: true, event: "unrecorded sim-primary admitted=false"},
		{name: "AMaxConcurrentWhoseReadsFail", policy: concurrent, reads: true, unrecorded: true, event: "unrecorded sim-primary admitted=false"},
		{name: "AMaxConcurrentOfSlowCallsWhoseReadsFailOpen", policy: uncounted, reads: true, admitted: true, unrecorded: true,
			event: "unrecorded sim-primary admitted=true"},
		{name: "ARateOnAWarmInstanceWhoseReadsFail", policy: rate, warm: true, reads: true, unrecorded: true,
			event: "unrecorded sim-primary admitted=false"},
		{name: "NoLimitsWhoseWritesFailWritesNothing", policy: none, puts: true, admitted: true},
		{name: "NoLimitsWhoseReadsFailOpen", policy: none, reads: true, admitted: true, unrecorded: true, event: "unrecorded sim-primary admitted=true"},
		{name: "AProbeWhoseWriteFails", policy: none, puts: true, unrecorded: true, event: "unrecorded sim-primary admitted=false",
			before: func(t *testing.T, b *lifecycle.Breakers) {
				for i := range 2 {
					b.Observe(ctx, primary, job.HealthEvent{Kind: job.HealthServerError, Attempt: fmt.Sprintf("old/%d", i)})
				}
			}},
		{name: "AForcedOpenSeenHoldsWhoseReadsFail", policy: none, warm: true, reads: true,
			before: func(t *testing.T, b *lifecycle.Breakers) {
				if _, err := b.Force(ctx, primary, job.ProviderOpen, "op", "incident"); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			hs := &faultyHealth{HealthStore: r.st.Store}
			b, _ := r.withBreakersOn(t, nil, hs, func(string) job.HealthPolicy { return tc.policy })
			if tc.before != nil {
				tc.before(t, b)
			}
			if tc.warm {
				b.Available(ctx, primary, "alice")
			}
			r.clock.Advance(time.Minute) // past the cache, and any cooldown
			hs.set(tc.reads, tc.puts)
			a := b.Admit(ctx, primary, "job_1/1", "alice")
			if a.Allowed != tc.admitted || a.Unrecorded != tc.unrecorded {
				t.Fatalf("admission %+v: want allowed %v, unrecorded %v", a, tc.admitted, tc.unrecorded)
			}
			if !a.Allowed && tc.unrecorded && !a.RetryAt.Equal(r.clock.Now().Add(job.UnrecordedRetry)) {
				t.Fatalf("refused until %s, want %s from now", a.RetryAt, job.UnrecordedRetry)
			}
			if av := b.Available(ctx, primary, "alice"); tc.reads && av.Allowed != tc.admitted {
				t.Fatalf("available %+v while the health cannot be read, want allowed %v", av, tc.admitted)
			}
			got := strings.Join(r.events.list(), ",")
			if tc.event != "" && !strings.Contains(got, tc.event) || tc.event == "" && strings.Contains(got, "unrecorded") {
				t.Fatalf("events %q, want %q", got, tc.event)
			}
			// Once the store works again, the admission is recorded.
			hs.set(false, false)
			r.clock.Advance(job.UnrecordedRetry)
			if tc.policy.Rate.Declared() {
				if a := b.Admit(ctx, primary, "job_1/1", "alice"); !a.Allowed {
					t.Fatalf("after the fault: %+v", a)
				}
				h, _ := r.st.Health(ctx, primary)
				if total, mine := h.RateUsed("alice", tc.policy.Rate, r.clock.Now()); total != 1 || mine != 1 {
					t.Fatalf("the rate holds %d requests, %d of alice's: want only the one recorded", total, mine)
				}
			}
		})
	}
}

// A job whose only provider cannot record its admission waits, with a
// short retry, and says why to operators; it runs once the store works.
func TestAJobWaitsWhileItsAdmissionCannotBeRecorded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hs := &faultyHealth{HealthStore: r.st.Store}
	r.withBreakersOn(t, nil, hs, func(string) job.HealthPolicy { return declaring(true, true) })
	j := r.demo(t)
	hs.set(false, true)
	_, err := r.run(t, j.ID)
	taskError(t, err, string(job.SignalWaitOpen))
	got := r.get(t, j.ID)
	w := got.Waiting
	if w == nil || w.Reason != job.WaitProviders || !w.Until.Equal(r.clock.Now().Add(job.UnrecordedRetry)) ||
		!strings.Contains(w.Detail, primary+": its admission could not be recorded") || got.AttemptCount != 0 || r.prov[primary].calls.Load() != 0 {
		t.Fatalf("job %s, %d attempts, primary called %d times, waiting %+v", got.Status, got.AttemptCount, r.prov[primary].calls.Load(), w)
	}
	if hold := r.hold(t, j.ID, string(job.SignalWaitOpen)); hold.WaitSeconds != int(job.UnrecordedRetry/time.Second) {
		t.Fatalf("hold waits %d s, want %s", hold.WaitSeconds, job.UnrecordedRetry)
	}
	if logged(r.logs, "provider_admission_not_recorded") == 0 || logged(r.logs, "job_waiting_for_providers") == 0 {
		t.Fatalf("not logged:\n%s", r.logs)
	}
	hs.set(false, false)
	r.clock.Advance(job.UnrecordedRetry)
	if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("once the store works: %+v %v", res, err)
	}
}

package job_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

var h0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func hat(seconds float64) time.Time { return h0.Add(time.Duration(seconds * float64(time.Second))) }

// testPolicy opens after 3 failures within 10 s, for 5 s first, up to 20 s;
// one probe, half-open for at most 4 s; calls slow past 1 s; 4 held at most.
func testPolicy() job.HealthPolicy {
	return job.HealthPolicy{
		Breaker: job.BreakerPolicy{Failures: 3, FailureRate: 0.5, Window: 10 * time.Second, Cooldown: 5 * time.Second,
			MaxCooldown: 20 * time.Second, Probes: 1, HalfOpenMax: 4 * time.Second},
		SlowCallAfter: time.Second, MaxProcessingTime: time.Minute, MaxConcurrent: 4,
	}
}

// observe applies events in order, each at its time, and returns the health
// and whether each event changed it.
type step struct {
	at       float64
	kind     job.HealthEventKind
	key      string
	answered int
}

func observe(t *testing.T, h job.Health, steps ...step) (job.Health, []bool) {
	t.Helper()
	var changed []bool
	for _, s := range steps {
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: s.kind, Attempt: s.key, Answered: s.answered}, testPolicy(), hat(s.at))
		changed = append(changed, ok)
		if ok {
			if !c.Decided() || c.Before().Revision != h.Revision || c.After().Revision != h.Revision+1 {
				t.Fatalf("change of %s at %v is not a decided change on revision %d: %+v", s.kind, s.at, h.Revision, c)
			}
			h = c.After()
		}
	}
	return h, changed
}

func TestDecideHealth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		steps     []step
		state     job.ProviderState
		failures  int
		held      int
		writes    int // events that changed the health
		openUntil float64
		reason    string
	}{
		{"AnswersOnAClosedBreakerWriteNothing", []step{{1, job.HealthAnswered, "a/1", 0}, {2, job.HealthAnswered, "b/1", 0}},
			job.ProviderClosed, 0, 0, 0, 0, ""},
		{"FailuresBelowTheThresholdStayClosed", []step{{1, job.HealthServerError, "a/1", 0}, {2, job.HealthExhausted, "b/1", 0}},
			job.ProviderClosed, 2, 0, 2, 0, ""},
		{"ThresholdWithinTheWindowOpens", []step{{1, job.HealthServerError, "a/1", 0}, {2, job.HealthTransport, "b/1", 0}, {3, job.HealthSlow, "c/1", 0}},
			job.ProviderOpen, 3, 1, 3, 8, "3 failures within 10s, 100% of 3 calls reported (this window: 1 server_error, 1 transport, 1 slow)"},
		{"AFewFailuresAmongManyAnswersStayClosed", []step{{1, job.HealthServerError, "a/1", 4}, {2, job.HealthServerError, "b/1", 3},
			{3, job.HealthServerError, "c/1", 2}}, job.ProviderClosed, 3, 0, 3, 0, ""},
		{"ThenAFailureRateAboveHalfOpens", []step{{1, job.HealthServerError, "a/1", 2}, {2, job.HealthServerError, "b/1", 0},
			{3, job.HealthServerError, "c/1", 0}}, job.ProviderOpen, 3, 0, 3, 8, "3 failures within 10s, 60% of 5 calls reported (this window: 3 server_error)"},
		{"AWindowThatEndedStartsOver", []step{{1, job.HealthServerError, "a/1", 0}, {2, job.HealthServerError, "b/1", 0}, {12, job.HealthServerError, "c/1", 0}},
			job.ProviderClosed, 1, 0, 3, 0, ""},
		// The estimate slides: the window before weighs in proportion to
		// how much of it the last 10 s still cover.
		{"AnswersJustBeforeABoundaryStillCount", []step{{1, job.HealthServerError, "a/1", 20}, {11.5, job.HealthServerError, "b/1", 0},
			{11.6, job.HealthServerError, "c/1", 0}, {11.7, job.HealthServerError, "d/1", 0}}, job.ProviderClosed, 3, 0, 4, 0, ""},
		{"FailuresJustBeforeABoundaryStillCount", []step{{1, job.HealthServerError, "a/1", 0}, {9.5, job.HealthServerError, "b/1", 0},
			{11.5, job.HealthServerError, "c/1", 0}, {12, job.HealthServerError, "d/1", 0}}, job.ProviderOpen, 2, 0, 4, 17,
			"4 failures within 10s, 100% of 4 calls reported (this window: 2 server_error)"},
		{"TwoWindowsAgoIsForgotten", []step{{1, job.HealthServerError, "a/1", 20}, {21.5, job.HealthServerError, "b/1", 0},
			{21.6, job.HealthServerError, "c/1", 0}, {21.7, job.HealthServerError, "d/1", 0}}, job.ProviderOpen, 3, 0, 4, 26.7,
			"3 failures within 10s, 100% of 3 calls reported (this window: 3 server_error)"},
		{"SlowThenUnknownIsOneFailure", []step{{1, job.HealthSlow, "a/1", 0}, {3, job.HealthUnknown, "a/1", 0}, {4, job.HealthServerError, "b/1", 0}},
			job.ProviderClosed, 2, 1, 2, 0, ""},
		{"AnAnswerAfterSlowReleasesTheSlot", []step{{1, job.HealthSlow, "a/1", 0}, {2, job.HealthAnswered, "a/1", 0}},
			job.ProviderClosed, 1, 0, 2, 0, ""},
		{"ReleasedOfAnUnheldAttemptWritesNothing", []step{{1, job.HealthReleased, "a/1", 0}},
			job.ProviderClosed, 0, 0, 0, 0, ""},
		{"StragglersWhileOpenNeitherShortenNorLengthen", []step{{1, job.HealthServerError, "a/1", 0}, {2, job.HealthServerError, "b/1", 0},
			{3, job.HealthServerError, "c/1", 0}, {6, job.HealthUnknown, "d/1", 0}, {7, job.HealthServerError, "e/1", 0}},
			job.ProviderOpen, 5, 1, 5, 8, "3 failures within 10s, 100% of 3 calls reported (this window: 3 server_error)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, changed := observe(t, job.NewHealth("p"), tt.steps...)
			writes := 0
			for _, c := range changed {
				if c {
					writes++
				}
			}
			if h.Effective() != tt.state || h.FailureCount() != tt.failures || len(h.Held) != tt.held || writes != tt.writes {
				t.Fatalf("state %s failures %d held %d writes %d, want %s %d %d %d", h.Effective(), h.FailureCount(), len(h.Held), writes,
					tt.state, tt.failures, tt.held, tt.writes)
			}
			if tt.openUntil != 0 && !h.OpenUntil.Equal(hat(tt.openUntil)) {
				t.Fatalf("open until %v, want %v", h.OpenUntil, hat(tt.openUntil))
			}
			if tt.reason != "" && h.Reason != tt.reason {
				t.Fatalf("reason %q, want %q", h.Reason, tt.reason)
			}
		})
	}
}

// tripped is a breaker that opened at 3 s, until 8 s.
func tripped(t *testing.T) job.Health {
	t.Helper()
	h, _ := observe(t, job.NewHealth("p"), step{1, job.HealthServerError, "a/1", 0}, step{2, job.HealthServerError, "b/1", 0},
		step{3, job.HealthServerError, "c/1", 0})
	if h.State != job.ProviderOpen {
		t.Fatalf("not open: %+v", h)
	}
	return h
}

// admit admits key at time at, writing what the admission decides.
func admit(t *testing.T, h job.Health, key string, at float64) (job.Health, job.Admission) {
	t.Helper()
	a, c, ok := job.Admit(h, key, "", testPolicy(), hat(at))
	if ok {
		if !c.Decided() {
			t.Fatal("admission's change is not decided")
		}
		h = c.After()
	}
	return h, a
}

func TestAdmitThroughTheCycle(t *testing.T) {
	t.Parallel()
	h := tripped(t)

	h, a := admit(t, h, "x/1", 5)
	if a.Allowed || !a.RetryAt.Equal(hat(8)) || !strings.HasPrefix(a.Reason, "open: ") {
		t.Fatalf("during the cooldown: %+v, want refused until 8 s", a)
	}
	h, a = admit(t, h, "x/1", 8)
	if !a.Allowed || !a.Probe || h.State != job.ProviderHalfOpen {
		t.Fatalf("cooldown over: %+v in %s, want a probe through a half-open breaker", a, h.State)
	}
	h, a = admit(t, h, "y/1", 8.5)
	if a.Allowed || h.State != job.ProviderHalfOpen {
		t.Fatalf("second attempt while the probe runs: %+v, want refused", a)
	}
	// The probe answers: closed, counts reset, trips forgotten.
	h, _ = observe(t, h, step{9, job.HealthAnswered, "x/1", 0})
	if h.State != job.ProviderClosed || h.Trips != 0 || h.FailureCount() != 0 || h.Opened != 1 {
		t.Fatalf("after the probe answered: %+v, want closed with nothing counted, opened once", h)
	}
	if _, a = admit(t, h, "z/1", 9.5); !a.Allowed || a.Probe {
		t.Fatalf("closed again: %+v, want an ordinary admission", a)
	}
}

func TestReTripLengthensTheCooldownUpToItsCap(t *testing.T) {
	t.Parallel()
	h := tripped(t) // 5 s cooldown, until 8
	var cooldowns []time.Duration
	at := 8.0
	for i := range 4 {
		key := fmt.Sprintf("probe/%d", i)
		var a job.Admission
		h, a = admit(t, h, key, at)
		if !a.Probe {
			t.Fatalf("round %d: %+v at %v, want a probe (%+v)", i, a, at, h)
		}
		h, _ = observe(t, h, step{at + 1, job.HealthSlow, key, 0}) // the probe hangs: open again
		if h.State != job.ProviderOpen {
			t.Fatalf("round %d: a slow probe left it %s", i, h.State)
		}
		cooldowns = append(cooldowns, h.Cooldown)
		at = h.OpenUntil.Sub(h0).Seconds()
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second}
	if fmt.Sprint(cooldowns) != fmt.Sprint(want) {
		t.Fatalf("cooldowns %v, want %v", cooldowns, want)
	}
}

func TestHalfOpenIsBoundedInTime(t *testing.T) {
	t.Parallel()
	h := tripped(t)
	h, _ = admit(t, h, "probe/1", 8) // the probe hangs and never reports
	h, a := admit(t, h, "later/1", 12)
	if a.Allowed || h.State != job.ProviderOpen || h.Cooldown != 10*time.Second || !h.OpenUntil.Equal(hat(22)) {
		t.Fatalf("half-open past its 4 s bound: %+v, breaker %s cooldown %s until %v; want open again for 10 s", a, h.State, h.Cooldown, h.OpenUntil)
	}
	if !strings.Contains(h.Reason, "no probe answered within 4s") {
		t.Fatalf("reason %q", h.Reason)
	}
}

func TestARunningCooldownIsNeverShortened(t *testing.T) {
	t.Parallel()
	h := tripped(t)
	h, _ = admit(t, h, "p/1", 8) // half-open, probing
	// A record whose open period still runs (written by a longer trip that
	// raced this one): a re-trip keeps the later end.
	h.OpenUntil = hat(200)
	h, _ = observe(t, h, step{9, job.HealthServerError, "p/1", 0})
	if h.State != job.ProviderOpen || !h.OpenUntil.Equal(hat(200)) {
		t.Fatalf("re-trip: %s until %v, want open until 200 s", h.State, h.OpenUntil)
	}
	// A straggler failure while open moves the end neither way.
	h, _ = observe(t, h, step{10, job.HealthServerError, "old/1", 0})
	if !h.OpenUntil.Equal(hat(200)) {
		t.Fatalf("a straggler moved the end to %v", h.OpenUntil)
	}
}

func TestBulkheadCountsHeldAttempts(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.Breaker.Failures = 100 // only the cap matters here
	h := job.NewHealth("p")
	for i := range 4 {
		c, ok := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthSlow, Attempt: fmt.Sprintf("j%d/1", i)}, p, hat(float64(i)))
		if !ok {
			t.Fatal("slow call wrote nothing")
		}
		h = c.After()
	}
	a, _, _ := job.Admit(h, "new/1", "", p, hat(5))
	if a.Allowed || !strings.Contains(a.Reason, "at capacity: 4 attempts") || !a.RetryAt.Equal(hat(1)) {
		t.Fatalf("at the cap: %+v", a)
	}
	c, _ := job.DecideHealth(h, job.HealthEvent{Kind: job.HealthReleased, Attempt: "j0/1"}, p, hat(6))
	if a, _, _ := job.Admit(c.After(), "new/1", "", p, hat(6)); !a.Allowed {
		t.Fatalf("a slot freed: %+v", a)
	}
}

func TestForce(t *testing.T) {
	t.Parallel()
	h := tripped(t)
	if _, err := job.DecideForce(h, job.ProviderClosed, "op", " ", hat(4)); err == nil {
		t.Fatal("forcing without a reason was accepted")
	}
	c, err := job.DecideForce(h, job.ProviderClosed, "op", "the provider says it is back", hat(4))
	if err != nil {
		t.Fatal(err)
	}
	h = c.After()
	if a, _, _ := job.Admit(h, "x/1", "", testPolicy(), hat(4)); !a.Allowed || h.State != job.ProviderClosed {
		t.Fatalf("forced closed during a cooldown: %+v, state %s", a, h.State)
	}
	c, _ = job.DecideForce(h, job.ProviderOpen, "op", "maintenance", hat(5))
	h = c.After()
	if a, _, _ := job.Admit(h, "x/1", "", testPolicy(), hat(500)); a.Allowed || a.Reason != "forced open by op: maintenance" {
		t.Fatalf("forced open: %+v", a)
	}
	// Events keep being counted under an override; lifting it brings back
	// the breaker's own state.
	c, _ = job.DecideForce(h, "", "op", "", hat(6))
	if h = c.After(); h.Forced != nil || h.Effective() != job.ProviderClosed {
		t.Fatalf("lifted: %+v", h)
	}
	if c, err := job.DecideForce(h, "", "op", "", hat(7)); err != nil || c.Decided() {
		t.Fatalf("lifting no override: %+v, %v; want nothing to write", c, err)
	}
	if _, err := job.DecideForce(h, "half_open", "op", "why", hat(7)); err == nil {
		t.Fatal("forcing half_open was accepted")
	}
}

func TestHealthPolicyValidate(t *testing.T) {
	t.Parallel()
	if err := job.DefaultHealthPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*job.HealthPolicy){
		func(p *job.HealthPolicy) { p.Breaker.Failures = 0 },
		func(p *job.HealthPolicy) { p.Breaker.Probes = 0 },
		func(p *job.HealthPolicy) { p.Breaker.MaxCooldown = p.Breaker.Cooldown - 1 },
		func(p *job.HealthPolicy) { p.SlowCallAfter = 0 },
		func(p *job.HealthPolicy) { p.MaxConcurrent = 0 },
		func(p *job.HealthPolicy) { p.MaxConcurrent, p.CountAdmitted = job.MaxConcurrentBound+1, true },
	}
	// A bulkhead of slow calls only may be wider: its admissions write
	// nothing (the drills' BreakersNeverAct declares a million).
	wide := job.DefaultHealthPolicy()
	wide.MaxConcurrent = 1_000_000
	if err := wide.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, mutate := range bad {
		p := job.DefaultHealthPolicy()
		mutate(&p)
		if p.Validate() == nil {
			t.Errorf("bad policy %d accepted", i)
		}
	}
}

func TestDecideReport(t *testing.T) {
	t.Parallel()
	report := func(failures, answered int) job.Report {
		return job.Report{Failures: map[job.HealthEventKind]int{job.HealthServerError: failures}, Answered: answered}
	}
	tests := []struct {
		name   string
		h      func(t *testing.T) job.Health
		r      job.Report
		state  job.ProviderState
		count  int
		writes bool
	}{
		{"NothingGatheredWritesNothing", func(*testing.T) job.Health { return job.NewHealth("p") }, job.Report{}, job.ProviderClosed, 0, false},
		{"AFewFailuresAmongManyAnswers", func(*testing.T) job.Health { return job.NewHealth("p") }, report(4, 40), job.ProviderClosed, 4, true},
		{"EnoughFailuresAtTheRateOpen", func(*testing.T) job.Health { return job.NewHealth("p") }, report(3, 2), job.ProviderOpen, 3, true},
		{"StragglersWhileOpenAreCountedOnly", tripped, report(10, 0), job.ProviderOpen, 13, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.h(t)
			c, ok := job.DecideReport(h, tc.r, testPolicy(), hat(4))
			if ok != tc.writes {
				t.Fatalf("writes %v, want %v", ok, tc.writes)
			}
			if !ok {
				return
			}
			after := c.After()
			if after.Effective() != tc.state || after.FailureCount() != tc.count || after.Revision != h.Revision+1 {
				t.Fatalf("after %+v", after)
			}
			if tc.state == job.ProviderOpen && h.State == job.ProviderOpen && !after.OpenUntil.Equal(h.OpenUntil) {
				t.Fatalf("stragglers moved the cooldown: %v → %v", h.OpenUntil, after.OpenUntil)
			}
		})
	}
}

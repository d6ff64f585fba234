package job_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newJob(t *testing.T) job.Job {
	t.Helper()
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"a":1}`),
		Providers: []string{"p1", "p2", "p3"}, Primary: "p1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// after returns the job a decision leads to; a refused decision panics,
// which fails the test that expected it to pass.
func after(tr job.Transition, err error) job.Job {
	if err != nil {
		panic(err)
	}
	return tr.After()
}

func TestCanTransition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to job.AttemptState
		want     bool
	}{
		{job.AttemptStarting, job.AttemptRunning, true},
		{job.AttemptRunning, job.AttemptSucceeded, true},
		{job.AttemptRunning, job.AttemptUnknown, true},
		{job.AttemptUnknown, job.AttemptSucceeded, true},
		{job.AttemptUnknown, job.AttemptCancelled, true},
		// Only work its provider confirmed cancelled (DecideRemoteCancelled).
		{job.AttemptRunning, job.AttemptCancelled, true},
		{job.AttemptStarting, job.AttemptCancelled, false},
		{job.AttemptUnknown, job.AttemptRunning, false},
		{job.AttemptFailed, job.AttemptSucceeded, false},
		{job.AttemptSucceeded, job.AttemptDiscarded, false},
		{job.AttemptDiscarded, job.AttemptSucceeded, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.from)+"To"+string(tc.to), func(t *testing.T) {
			t.Parallel()
			if got := job.CanTransition(tc.from, tc.to); got != tc.want {
				t.Fatalf("CanTransition(%s, %s) = %v", tc.from, tc.to, got)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base, err := job.Fingerprint("demo", json.RawMessage(`{"a":[1,2,{"b":"x"}],"c":10}`), []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input string
		typ   string
		same  bool
	}{
		{"Reordered", `{"c":10,"a":[1,2,{"b":"x"}]}`, "demo", true},
		{"Whitespace", " { \"a\" : [ 1 , 2 , { \"b\" : \"x\" } ] ,\n\"c\":10 } ", "demo", true},
		{"NumberSpelling", `{"a":[1.0,2e0,{"b":"x"}],"c":1e1}`, "demo", true},
		{"OtherValue", `{"a":[1,2,{"b":"y"}],"c":10}`, "demo", false},
		{"ArrayOrderMatters", `{"a":[2,1,{"b":"x"}],"c":10}`, "demo", false},
		{"OtherType", `{"a":[1,2,{"b":"x"}],"c":10}`, "other", false},
		{"StringIsNotNumber", `{"a":[1,2,{"b":"x"}],"c":"10"}`, "demo", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := job.Fingerprint(tc.typ, json.RawMessage(tc.input), []string{"p"})
			if err != nil {
				t.Fatal(err)
			}
			if (got == base) != tc.same {
				t.Fatalf("same=%v, want %v", got == base, tc.same)
			}
		})
	}
	if _, err := job.Fingerprint("demo", json.RawMessage(`{"a":1,"a":2}`), nil); !errors.Is(err, job.ErrDuplicateKey) {
		t.Fatalf("duplicate keys: %v", err)
	}
}

// TestStreamIsNotPartOfTheRequest: "stream" is the job's, but how one
// watches a job, not what one asked for: the same key with another value
// is the same request (a replay gets the job as created).
func TestStreamIsNotPartOfTheRequest(t *testing.T) {
	t.Parallel()
	create := func(stream bool) job.Job {
		j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"a":1}`),
			Providers: []string{"p1"}, Primary: "p1", Stream: stream}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	plain, streamed := create(false), create(true)
	if plain.Stream || !streamed.Stream {
		t.Fatalf("stream kept as %v and %v, want false and true", plain.Stream, streamed.Stream)
	}
	if plain.Fingerprint != streamed.Fingerprint || job.SameRequest(plain, streamed) != nil {
		t.Fatal("a create asking to stream is another request than the same create without")
	}
}

// TestTierIsPartOfTheRequest: the tier a create names is the job's, and
// the same key asking another tier is another request (409), while "now"
// and naming none are one request, as they were before tiers existed.
func TestTierIsPartOfTheRequest(t *testing.T) {
	t.Parallel()
	create := func(tier job.Tier) (job.Job, error) {
		return job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"a":1}`),
			Providers: []string{"p1"}, Primary: "p1", Tier: tier}, t0)
	}
	none, err := create("")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tier    job.Tier
		same    bool
		stored  job.Tier
		refused bool
	}{
		{job.TierNow, true, "", false},
		{job.TierFlex2h, false, job.TierFlex2h, false},
		{job.TierFlex8h, false, job.TierFlex8h, false},
		{job.TierBatch24h, false, job.TierBatch24h, false},
		{"48h", false, "", true},
	}
	for _, tc := range tests {
		t.Run(string(tc.tier), func(t *testing.T) {
			t.Parallel()
			j, err := create(tc.tier)
			var inv *job.InvalidError
			if tc.refused {
				if !errors.As(err, &inv) || inv.Field != "tier" {
					t.Fatalf("tier %q: %v, want an invalid tier", tc.tier, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if j.Tier != tc.stored {
				t.Errorf("tier %q stored as %q, want %q", tc.tier, j.Tier, tc.stored)
			}
			if same := job.SameRequest(none, j) == nil; same != tc.same {
				t.Errorf("tier %q the same request as none: %v, want %v", tc.tier, same, tc.same)
			}
		})
	}
	if !job.TierFlex2h.Within(job.TierFlex8h) || job.TierFlex8h.Within(job.TierFlex2h) || !job.TierNow.Within(job.TierNow) ||
		!job.TierFlex8h.Within(job.TierBatch24h) || job.TierBatch24h.Within(job.TierFlex8h) {
		t.Error("Within does not order the tiers by how long they wait")
	}
}

func TestChooseTier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		requested, byDefault, limit job.Tier
		want                        job.Tier
		refused                     bool
	}{
		{"TypesDefault", "", job.TierFlex2h, job.TierFlex8h, job.TierFlex2h, false},
		{"NoneAnywhere", "", "", "", job.TierNow, false},
		{"Sooner", job.TierNow, job.TierFlex2h, job.TierFlex2h, job.TierNow, false},
		{"UpToTheLimit", job.TierFlex8h, job.TierNow, job.TierFlex8h, job.TierFlex8h, false},
		{"BeyondTheLimit", job.TierFlex8h, job.TierNow, job.TierFlex2h, "", true},
		{"ABatchsWindow", job.TierBatch24h, job.TierNow, job.TierBatch24h, job.TierBatch24h, false},
		{"ABatchBeyondTheLimit", job.TierBatch24h, job.TierNow, job.TierFlex8h, "", true},
		{"TypeAllowsOnlyNow", job.TierFlex2h, "", "", "", true},
		{"Unknown", "1d", job.TierNow, job.TierFlex8h, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, reason := job.ChooseTier(tc.requested, tc.byDefault, tc.limit)
			if got != tc.want || (reason != "") != tc.refused {
				t.Fatalf("ChooseTier(%q, %q, %q) = %q, %q; want %q, refused %v", tc.requested, tc.byDefault, tc.limit, got, reason, tc.want, tc.refused)
			}
		})
	}
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"Simple", "abc-123", true},
		{"Max", string(long[:255]), true},
		{"Empty", "", false},
		{"TooLong", string(long), false},
		{"Space", "a b", false},
		{"Control", "a\x01b", false},
		{"NonASCII", "clé", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.ValidKey(tc.key); got != tc.want {
				t.Fatalf("ValidKey(%q) = %v", tc.key, got)
			}
		})
	}
}

func TestNextStep(t *testing.T) {
	t.Parallel()
	certified := func(ok ...string) func(string) bool {
		return func(p string) bool {
			for _, o := range ok {
				if o == p {
					return true
				}
			}
			return false
		}
	}
	failed := func(t *testing.T, j job.Job, p string, class job.Class) job.Job {
		t.Helper()
		j = after(job.DecideStart(j, p, t0))
		n := j.AttemptCount
		j = after(job.DecideRunning(j, n, t0))
		return after(job.DecideAttemptFailed(j, n, job.Failure{Class: class, Message: p + " failed"}, "", t0))
	}
	tests := []struct {
		name      string
		build     func(t *testing.T) job.Job
		certified func(string) bool
		want      job.Action
		provider  string
	}{
		{"FreshJobRunsPrimaryWithoutCertification", newJob, certified(), job.ActionRun, "p1"},
		{"RetryableFailureFallsBackToCertified", func(t *testing.T) job.Job { return failed(t, newJob(t), "p1", job.ClassRetryable) },
			certified("p3"), job.ActionRun, "p3"},
		{"ContractViolationFallsBack", func(t *testing.T) job.Job { return failed(t, newJob(t), "p1", job.ClassContractViolation) },
			certified("p2", "p3"), job.ActionRun, "p2"},
		{"UncertifiedFallbacksFinalize", func(t *testing.T) job.Job { return failed(t, newJob(t), "p1", job.ClassRetryable) },
			certified(), job.ActionFinalize, ""},
		{"NonRetryableFinalizes", func(t *testing.T) job.Job { return failed(t, newJob(t), "p1", job.ClassNonRetryable) },
			certified("p2", "p3"), job.ActionFinalize, ""},
		{"UnknownWaits", func(t *testing.T) job.Job {
			j := after(job.DecideStart(newJob(t), "p1", t0))
			j = after(job.DecideRunning(j, 1, t0))
			return after(job.DecideUnknown(j, 1, "timeout", t0))
		}, certified("p2"), job.ActionWait, ""},
		{"UnclaimedStartingIsReissued", func(t *testing.T) job.Job { return after(job.DecideStart(newJob(t), "p1", t0)) },
			certified(), job.ActionRun, "p1"},
		{"RunningWaits", func(t *testing.T) job.Job { return after(job.DecideLaunch(newJob(t), "p1", t0)) },
			certified("p2"), job.ActionWait, ""},
		{"UnclaimedHedgeBesideARunningAttemptIsRun", func(t *testing.T) job.Job {
			return after(job.DecideHedge(after(job.DecideLaunch(newJob(t), "p1", t0)), "p2", t0))
		}, certified("p2"), job.ActionRun, "p2"},
		{"AllTriedFinalize", func(t *testing.T) job.Job {
			j := failed(t, newJob(t), "p1", job.ClassRetryable)
			j = failed(t, j, "p2", job.ClassRetryable)
			return failed(t, j, "p3", job.ClassRetryable)
		}, certified("p2", "p3"), job.ActionFinalize, ""},
		{"CancelledIsDone", func(t *testing.T) job.Job { return after(job.DecideCancel(newJob(t), t0)) }, certified(), job.ActionDone, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan := job.Next(tc.build(t), job.Policy{MaxAttempts: 5, CertifiedFunc: tc.certified, Wait: job.DefaultWait()}, t0)
			if plan.Action != tc.want || plan.Provider != tc.provider {
				t.Fatalf("plan = %+v, want %s %s", plan, tc.want, tc.provider)
			}
			if plan.Action == job.ActionFinalize && plan.Failure == nil {
				t.Fatal("finalize without a failure")
			}
		})
	}
}

func TestUncertifiedFailureNamesProviders(t *testing.T) {
	t.Parallel()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	j = after(job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "", t0))
	plan := job.Next(j, job.Policy{CertifiedFunc: func(string) bool { return false }}, t0)
	if plan.Failure == nil || plan.Failure.Class != job.ClassUncertified ||
		plan.Failure.Message != "no certified provider left; uncertified for this contract: p2, p3; last error: 503" {
		t.Fatalf("failure = %+v", plan.Failure)
	}
}

func TestWaitScheduleBoundsTransitions(t *testing.T) {
	t.Parallel()
	// Each check is Wait, Run and Hold: three state transitions.
	if got := job.DefaultWait().ChecksPerDay() * 3; got > 20 {
		t.Fatalf("default wait costs %d transitions in the first day, want ≤ 20", got)
	}
	w := job.WaitSchedule{Steps: []time.Duration{time.Second, time.Minute}}
	if w.Next(0) != time.Second || w.Next(2*time.Second) != time.Minute || w.Next(time.Hour) != time.Minute {
		t.Fatal("schedule steps wrong")
	}
}

func TestDecisionsAreIdempotent(t *testing.T) {
	t.Parallel()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	j = after(job.DecideRunning(j, 1, t0))
	tests := []struct {
		name   string
		decide func(job.Job) (job.Transition, error)
	}{
		{"RunningTwice", func(j job.Job) (job.Transition, error) { return job.DecideRunning(j, 1, t0) }},
		{"UnknownTwice", func(j job.Job) (job.Transition, error) {
			j = after(job.DecideUnknown(j, 1, "t", t0))
			return job.DecideUnknown(j, 1, "t", t0)
		}},
		{"CancelTwice", func(j job.Job) (job.Transition, error) {
			j = after(job.DecideCancel(j, t0))
			return job.DecideCancel(j, t0)
		}},
		{"CompleteTwice", func(j job.Job) (job.Transition, error) {
			j = after(job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0))
			return job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := tc.decide(j)
			if err != nil || !tr.Noop() {
				t.Fatalf("noop=%v err=%v", tr.Noop(), err)
			}
		})
	}
}

func TestResolveOnlyUnknown(t *testing.T) {
	t.Parallel()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	j = after(job.DecideRunning(j, 1, t0))
	if _, err := job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "x"}, t0); !errors.Is(err, job.ErrInvalidTransition) {
		t.Fatalf("resolving a running attempt: %v", err)
	}
	j = after(job.DecideUnknown(j, 1, "t", t0))
	tr, err := job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptSucceeded, Result: json.RawMessage(`{"r":1}`), Reason: "seen in provider console"}, t0)
	if err != nil || tr.Kind() != job.KindComplete || tr.After().Status != job.StatusSucceeded || tr.After().CompletedBy != 1 {
		t.Fatalf("resolve succeeded: kind=%s after=%+v err=%v", tr.Kind(), tr.After(), err)
	}
	if a, _ := tr.After().Attempt(1); a.Error != nil || a.Resolution == nil || a.Resolution.Outcome != job.AttemptSucceeded {
		t.Fatalf("a resolved success keeps its timeout's error %+v / resolution %+v", a.Error, a.Resolution)
	}
}

func TestOverdue(t *testing.T) {
	t.Parallel()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	j = after(job.DecideRunning(j, 1, t0))
	tests := []struct {
		name string
		at   time.Duration
		want int
	}{
		{"WithinDeadline", 30 * time.Second, 0},
		{"PastDeadline", 2 * time.Minute, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.Overdue(j, time.Minute, t0.Add(tc.at)); len(got) != tc.want {
				t.Fatalf("Overdue = %v, want %d attempts", got, tc.want)
			}
		})
	}
	unknown := after(job.DecideUnknown(j, 1, "t", t0))
	if got := job.Overdue(unknown, time.Minute, t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("an unknown attempt is not overdue: %v", got)
	}
}

func TestTimeoutBeforeClaimFails(t *testing.T) {
	t.Parallel()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	j = after(job.DecideUnknown(j, 1, "timeout", t0))
	a, _ := j.Attempt(1)
	if a.State != job.AttemptFailed || a.Error == nil || a.Error.Class != job.ClassRetryable || j.Status != job.StatusRunning {
		t.Fatalf("attempt %s (%+v), job %s: want failed retryable, job running", a.State, a.Error, j.Status)
	}
	if tr, err := job.DecideRunning(j, 1, t0); err != nil || !tr.Noop() {
		t.Fatalf("a late claim must not succeed: noop=%v err=%v", tr.Noop(), err)
	}
	if plan := job.Next(j, job.Policy{CertifiedFunc: func(string) bool { return true }}, t0); plan.Action != job.ActionRun || plan.Provider != "p2" {
		t.Fatalf("plan = %+v, want fallback to p2", plan)
	}
}

func TestAttemptKey(t *testing.T) {
	t.Parallel()
	if got := job.AttemptKey("j", 3); got != "j/3" {
		t.Errorf("AttemptKey = %q, want j/3", got)
	}
	if got := (job.Attempt{JobID: "job_x", Number: 2}).IdempotencyKey(); got != "job_x/2" {
		t.Errorf("IdempotencyKey = %q, want job_x/2", got)
	}
}

func TestParseAttemptKey(t *testing.T) {
	t.Parallel()
	id := job.NewID("o", "k")
	tests := []struct {
		key string
		id  string
		n   int
		ok  bool
	}{
		{job.AttemptKey(id, 1), id, 1, true},
		{job.AttemptKey(id, 12), id, 12, true},
		{id, "", 0, false},
		{id + "/0", "", 0, false},
		{id + "/x", "", 0, false},
		{"nope/1", "", 0, false},
		{"", "", 0, false},
	}
	for _, tc := range tests {
		gotID, n, ok := job.ParseAttemptKey(tc.key)
		if gotID != tc.id || n != tc.n || ok != tc.ok {
			t.Errorf("ParseAttemptKey(%q) = %q %d %v, want %q %d %v", tc.key, gotID, n, ok, tc.id, tc.n, tc.ok)
		}
	}
}

// TestProviderReportsAreBounded: what a provider reports about a call is
// stored as bounded as the rest of the item: a request ID of 1–256 visible
// ASCII characters (anything else is no ID anyone could look up, and a
// hostile provider's megabyte of header would outgrow the 400 KB item), an
// HTTP status 100–599 (else 0), a model name of at most 256 bytes.
func TestProviderReportsAreBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 257)
	tests := []struct {
		name      string
		requestID string
		status    int
		model     string
		wantID    string
		wantSt    int
		wantModel string
	}{
		{"Plain", "req_123-abc", 503, "gpt-4o", "req_123-abc", 503, "gpt-4o"},
		{"Longest", long[:256], 100, strings.Repeat("m", 256), long[:256], 100, strings.Repeat("m", 256)},
		{"TooLong", long, 599, strings.Repeat("m", 300) + "é", "", 599, strings.Repeat("m", 256)},
		{"ControlCharacters", "req\x1b[2K", 600, "model", "", 0, "model"},
		{"Space", "req 1", 99, "model", "", 0, "model"},
		{"NotASCII", "réq", -1, "modèle" + strings.Repeat("x", 251), "", 0, "modèle" + strings.Repeat("x", 249)},
		{"ModelCutAtARune", "r", 200, strings.Repeat("x", 255) + "é", "r", 200, strings.Repeat("x", 255)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := after(job.DecideRunning(after(job.DecideStart(newJob(t), "p1", t0)), 1, t0))
			call := job.Call{ProviderRequestID: tc.requestID, Usage: &job.Usage{Model: tc.model}}
			failed := after(job.DecideCallFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "m", ProviderStatus: tc.status}, call, t0))
			a, _ := failed.Attempt(1)
			if a.ProviderRequestID != tc.wantID || a.Error.ProviderStatus != tc.wantSt || a.Usage.Model != tc.wantModel {
				t.Fatalf("recorded request ID %q, status %d, model %q; want %q, %d, %q",
					a.ProviderRequestID, a.Error.ProviderStatus, a.Usage.Model, tc.wantID, tc.wantSt, tc.wantModel)
			}
			done := after(job.DecideCallCompleted(j, 1, json.RawMessage(`{}`), call, t0))
			if a, _ := done.Attempt(1); a.ProviderRequestID != tc.wantID || a.Usage.Model != tc.wantModel {
				t.Fatalf("completed with request ID %q, model %q", a.ProviderRequestID, a.Usage.Model)
			}
			ended := after(job.DecideFail(failed, job.Failure{Class: job.ClassNonRetryable, Message: "m", ProviderStatus: tc.status}, t0))
			if ended.Error.ProviderStatus != tc.wantSt {
				t.Fatalf("the job's failure keeps status %d, want %d", ended.Error.ProviderStatus, tc.wantSt)
			}
		})
	}
}

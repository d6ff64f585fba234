package lifecycle_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// receiver keeps the webhook provider contract to the letter with the
// shortest key memory it allows: a key is remembered for exactly
// retention after its first answer (on the test's clock), then forgotten.
// It offers the lookup (Idempotency-Lookup: only). outage answers every
// request 503, unmarked, as a proxy in front of it would; resend, when
// set, answers a re-send instead (unmarked), after running before.
type receiver struct {
	mu        sync.Mutex
	now       func() time.Time
	retention time.Duration
	keys      map[string]memory
	execs     map[string]int
	outage    bool
	resend    func(w http.ResponseWriter)
	before    func()
	posts     int
	asked     int
}

type memory struct {
	body []byte
	at   time.Time
}

func newReceiver(now func() time.Time, retention time.Duration) *receiver {
	return &receiver{now: now, retention: retention, keys: map[string]memory{}, execs: map[string]int{}}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	lookup := r.Header.Get(webhook.HeaderLookup) == webhook.LookupOnly
	rc.asked++
	if !lookup {
		rc.posts++
	}
	if rc.outage {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if m, ok := rc.keys[key]; ok && rc.now().Sub(m.at) >= rc.retention {
		delete(rc.keys, key) // forgotten, exactly when the contract allows
	}
	w.Header().Set("Content-Type", "application/json")
	if m, ok := rc.keys[key]; ok {
		w.Header().Set(provider.HeaderIdempotentReplayed, "true")
		_, _ = w.Write(m.body)
		return
	}
	if lookup {
		w.Header().Set(webhook.HeaderLookup, webhook.LookupUnknown)
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if rc.resend != nil && rc.execs[key] > 0 {
		if rc.before != nil {
			rc.before()
		}
		rc.resend(w)
		return
	}
	rc.execs[key]++
	body, _ := json.Marshal(map[string]any{"output": json.RawMessage(good(primary))})
	rc.keys[key] = memory{body: body, at: rc.now()}
	_, _ = w.Write(body)
}

func (rc *receiver) executions(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.execs[key]
}

// promptChanged is a job type whose prompt changed after a deploy.
type promptChanged struct{ lifecycle.Catalog }

type changedType struct{ lifecycle.JobType }

func (c changedType) Request(in json.RawMessage) (provider.Request, error) {
	req, err := c.JobType.Request(in)
	req.Prompt += " (changed by a deploy)"
	return req, err
}

func (c promptChanged) Lookup(name string) (lifecycle.JobType, bool) {
	jt, ok := c.Catalog.Lookup(name)
	return changedType{jt}, ok
}

// loopback is a rig whose primary is the real webhook adapter in front of
// rc; attempt 1 of a demo job was sent to it (executed, its answer lost)
// and is unknown.
func loopback(t *testing.T, rc *receiver, lookup bool, cat lifecycle.Catalog) (*rig, job.Job, string) {
	t.Helper()
	r := newRig(t)
	rc.now = r.clock.Now
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	a, err := webhook.New(webhook.Config{Name: primary, URL: srv.URL, Lookup: lookup, KeyRetention: rc.retention, Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := catalog()
	base := jobtype.Lookup[lifecycle.JobType]{Catalog: c}
	jt, _ := base.Lookup("demo")
	r.certify(t, "demo", fallback)
	j := r.demo(t)
	j, att, ok, err := r.eng.LaunchSentOn(context.Background(), j, primary, func(a job.Attempt) (string, string) {
		a.ProviderKey = job.ProviderKeyIn("test-deployment", a.JobID, a.Number)
		return a.ProviderKey, lifecycle.RequestDigestForTest(j, jt, a)
	}, nil)
	if err != nil || !ok {
		t.Fatalf("launch: %v %v", ok, err)
	}
	req, err := lifecycle.AttemptRequestForTest(j, jt, att)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Call(context.Background(), req); err != nil { // executed; its answer is lost
		t.Fatal(err)
	}
	if _, err := r.eng.MarkUnknown(context.Background(), j.ID, 1, "no answer within the run's timeout"); err != nil {
		t.Fatal(err)
	}
	if cat == nil {
		cat = base
	}
	r.loopbackProviders = settlers{primary: a, fallback: r.prov[fallback]}
	r.tasks = rebuild(t, r, r.loopbackProviders, cat)
	if !strings.HasPrefix(att.SentKey(), "test-deployment:") {
		t.Fatalf("provider key %q has no deployment namespace", att.SentKey())
	}
	return r, r.get(t, j.ID), att.SentKey()
}

// failingHealth fails every health read while failing is set.
type failingHealth struct {
	lifecycle.HealthStore
	mu      sync.Mutex
	failing bool
}

func (f *failingHealth) Health(ctx context.Context, p string) (job.Health, error) {
	f.mu.Lock()
	failing := f.failing
	f.mu.Unlock()
	if failing {
		return job.Health{}, context.DeadlineExceeded
	}
	return f.HealthStore.Health(ctx, p)
}

// TestForcedOpenProviderIsNeverAskedOrResentTo: security review M3.
func TestForcedOpenProviderIsNeverAskedOrResentTo(t *testing.T) {
	t.Parallel()
	for _, lookup := range []bool{false, true} {
		rc := newReceiver(nil, time.Hour)
		r, j, _ := loopback(t, rc, lookup, nil)
		hs := &failingHealth{HealthStore: r.st.Store}
		b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: hs, PolicyFunc: func(string) job.HealthPolicy { return healthPolicy() },
			NowFunc: r.clock.Now, Events: r.events, CacheFor: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := catalog()
		r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: c},
			Providers: r.loopbackProviders, Certifications: r.st, CallTimeout: callTimeout, PollInterval: pollInterval, OverdueGrace: overdue,
			NowFunc: r.clock.Now, AfterFunc: r.timers.after, Breakers: b, MaxProviderWait: 10 * time.Minute, Namespace: "test-deployment",
			Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Force(context.Background(), primary, job.ProviderOpen, "operator", "incident"); err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(time.Minute)
		_, _ = r.run(t, j.ID)
		// The providers table fails: the last override seen still holds.
		hs.mu.Lock()
		hs.failing = true
		hs.mu.Unlock()
		r.clock.Advance(15 * time.Minute)
		_, _ = r.run(t, j.ID)
		if !b.ForcedOpen(context.Background(), primary) {
			t.Fatal("a failing health read lifted the forced open")
		}
		if adm := b.Available(context.Background(), primary, "alice"); adm.Allowed {
			t.Fatalf("Available = %+v with the health unread: want the last override", adm)
		}
		rc.mu.Lock()
		posts, asked := rc.posts, rc.asked
		rc.mu.Unlock()
		if posts != 1 || asked != 1 {
			t.Fatalf("lookup %v: %d executing POSTs, %d requests in all: want only the first send", lookup, posts, asked)
		}
		if got := r.get(t, j.ID); got.Status != job.StatusUnknown || got.AttemptCount != 1 || logged(r.logs, "settle_skipped_forced_open") != 2 {
			t.Fatalf("job %s, %d attempts, skipped %d times\n%s", got.Status, got.AttemptCount, logged(r.logs, "settle_skipped_forced_open"), r.logs)
		}
	}
}

// TestAnAttemptSentBeforeTheNamespaceStillSettles: an attempt launched
// with no recorded provider key is asked about under its old key.
func TestAnAttemptSentBeforeTheNamespaceStillSettles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rc := newReceiver(r.clock.Now, time.Hour)
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	a, err := webhook.New(webhook.Config{Name: primary, URL: srv.URL, Lookup: true, KeyRetention: time.Hour, Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := catalog()
	jt, _ := jobtype.Lookup[lifecycle.JobType]{Catalog: c}.Lookup("demo")
	j := r.demo(t)
	j, att, ok, err := r.eng.LaunchOn(context.Background(), j, primary) // as the release before this one launched it
	if err != nil || !ok || att.ProviderKey != "" {
		t.Fatalf("launch: %v %v %+v", ok, err, att)
	}
	req, _ := lifecycle.AttemptRequestForTest(j, jt, att)
	if req.IdempotencyKey != job.AttemptKey(j.ID, 1) {
		t.Fatalf("key %q, want the old form", req.IdempotencyKey)
	}
	if _, err := a.Call(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.MarkUnknown(context.Background(), j.ID, 1, "lost"); err != nil {
		t.Fatal(err)
	}
	r.tasks = rebuild(t, r, settlers{primary: a, fallback: r.prov[fallback]}, nil)
	r.clock.Advance(time.Minute)
	if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("%+v %v\n%s", res, err, r.logs)
	}
	if rc.executions(job.AttemptKey(j.ID, 1)) != 1 || rc.posts != 1 {
		t.Fatal("executed again")
	}
}

func stillUnknown(t *testing.T, r *rig, id string) {
	t.Helper()
	got := r.get(t, id)
	if got.Status != job.StatusUnknown || got.AttemptCount != 1 || r.prov[fallback].calls.Load() != 0 {
		t.Fatalf("job %s, %d attempts, fallback called %d: want the attempt left unknown, no fallback\n%s",
			got.Status, got.AttemptCount, r.prov[fallback].calls.Load(), r.logs)
	}
}

// TestSettleNeverExecutesAKeyTwice: issue 27's loopback receiver.
func TestSettleNeverExecutesAKeyTwice(t *testing.T) {
	t.Parallel()
	retention := job.DefaultHealthPolicy().MaxProcessingTime // the contract's minimum

	t.Run("OutageUntilTheReceiverForgotLeavesItForAnOperator", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(nil, retention)
		r, j, key := loopback(t, rc, false, nil)
		rc.mu.Lock()
		rc.outage = true
		rc.mu.Unlock()
		for _, step := range []time.Duration{time.Minute, 15 * time.Minute, 2 * time.Hour, 8 * time.Hour} {
			r.clock.Advance(step)
			if step > time.Minute {
				rc.mu.Lock()
				rc.outage = false // the outage ends after it forgot the key
				rc.mu.Unlock()
			}
			_, err := r.run(t, j.ID)
			taskError(t, err, string(job.SignalWaitOpen))
		}
		stillUnknown(t, r, j.ID)
		if n := rc.executions(key); n != 1 {
			t.Fatalf("key executed %d times", n)
		}
		if rc.posts != 2 { // the first send and the one re-send inside the window, into the outage
			t.Fatalf("%d executing POSTs, want 2\n%s", rc.posts, r.logs)
		}
	})

	t.Run("OutageUntilTheReceiverForgotWithTheLookupNeverExecutes", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(nil, retention)
		r, j, key := loopback(t, rc, true, nil)
		rc.mu.Lock()
		rc.outage = true
		rc.mu.Unlock()
		r.clock.Advance(time.Minute)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		rc.mu.Lock()
		rc.outage = false
		rc.mu.Unlock()
		r.clock.Advance(15 * time.Minute) // forgotten: "unknown key" proves nothing now
		_, err = r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		stillUnknown(t, r, j.ID)
		if n := rc.executions(key); n != 1 || rc.posts != 1 {
			t.Fatalf("key executed %d times, %d executing POSTs", n, rc.posts)
		}
	})

	t.Run("PromptChangedNothingIsResent", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(nil, retention)
		c, _ := catalog()
		r, j, key := loopback(t, rc, false, promptChanged{jobtype.Lookup[lifecycle.JobType]{Catalog: c}})
		r.clock.Advance(time.Minute)
		_, err := r.run(t, j.ID)
		taskError(t, err, string(job.SignalWaitOpen))
		stillUnknown(t, r, j.ID)
		if rc.posts != 1 || rc.executions(key) != 1 {
			t.Fatalf("%d POSTs, %d executions: want nothing re-sent", rc.posts, rc.executions(key))
		}
	})

	for _, tc := range []struct {
		name   string
		status int
	}{{"Unmarked402", http.StatusPaymentRequired}, {"Unmarked400", http.StatusBadRequest}, {"Unmarked200", http.StatusOK}} {
		t.Run(tc.name+"OutsideTheWindowSettlesNothing", func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(nil, retention)
			r, j, _ := loopback(t, rc, false, nil)
			rc.mu.Lock()
			rc.before = func() { r.clock.Advance(retention) } // the answer comes back past the window
			rc.resend = func(w http.ResponseWriter) {
				w.WriteHeader(tc.status)
				if tc.status == http.StatusOK {
					body, _ := json.Marshal(map[string]any{"output": json.RawMessage(good(primary))})
					_, _ = w.Write(body)
					return
				}
				_, _ = w.Write([]byte(`{"error":"insufficient credits or bad request"}`))
			}
			// The re-send finds the key forgotten (a receiver in front that
			// lost its store), so it reaches rc.resend.
			rc.keys = map[string]memory{}
			rc.mu.Unlock()
			r.clock.Advance(time.Minute)
			_, err := r.run(t, j.ID)
			taskError(t, err, string(job.SignalWaitOpen))
			stillUnknown(t, r, j.ID)
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.posts != 2 {
				t.Fatalf("%d POSTs, want the first and one re-send", rc.posts)
			}
			if tc.status == http.StatusOK && !strings.Contains(r.logs.String(), "outside the key retention window") {
				t.Fatalf("the unmarked 200 was not read as executed outside the window:\n%s", r.logs)
			}
		})
	}

	t.Run("LookupSettlesFromTheLookupAlone", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(nil, retention)
		r, j, key := loopback(t, rc, true, nil)
		r.clock.Advance(time.Minute)
		if res, err := r.run(t, j.ID); err != nil || res.Status != job.StatusSucceeded {
			t.Fatalf("%+v %v\n%s", res, err, r.logs)
		}
		got := r.get(t, j.ID)
		if a := attemptOf(t, got, 1); got.CompletedBy != 1 || a.Resolution == nil || a.Resolution.By != job.Reconciler {
			t.Fatalf("job %+v", got)
		}
		if rc.executions(key) != 1 || rc.posts != 1 {
			t.Fatalf("%d executions, %d executing POSTs: want zero after the first", rc.executions(key), rc.posts)
		}
	})
}

func TestNamespaceIsValidatedAtInit(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c, _ := catalog()
	for ns, ok := range map[string]bool{"": true, "onejob-0123456789ab": true, "local.dev_1": true, "bad:colon": false, "has space": false,
		strings.Repeat("x", 65): false} {
		_, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: c}, Providers: r.prov,
			Certifications: r.st, CallTimeout: callTimeout, Namespace: ns})
		if (err == nil) != ok {
			t.Errorf("Namespace %q: err %v, want ok=%v", ns, err, ok)
		}
	}
}

package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The port's contract, one conditional write at a time.

var createTests = []test{
	{"StoresANewJob", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := newJob(t, request("a", "k", `{"prompt":"x"}`), at(0))
		got, replayed, err := st.Create(context.Background(), j)
		if err != nil || replayed {
			t.Fatalf("create: replayed=%v err=%v", replayed, err)
		}
		if got.ID != j.ID || got.Status != job.StatusPending || got.Version != 0 || got.Revision != 0 ||
			got.Fingerprint != j.Fingerprint || string(got.Input) != `{"prompt":"x"}` || !got.CreatedAt.Equal(at(0)) {
			t.Fatalf("created %+v from %+v", got, j)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
		if c := st.Count(t); c != (Counts{Jobs: 1}) {
			t.Fatalf("store holds %+v, want one job", c)
		}
	}},
	{"KeepsTheJobsTraceContext", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 42: a traced job keeps its create's trace context through
		// every read, write and replay; a replay carrying another context
		// changes nothing; a job without one stores none.
		st := fresh(t)
		tc := job.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "onejob=1,congo=t61rcWkgMzE"}
		j := newJob(t, request("a", "k", `{"prompt":"x"}`), at(0))
		j.Trace = tc
		j = create(t, st, j)
		check := func(what string, got job.Job) {
			t.Helper()
			if got.Trace != tc {
				t.Fatalf("%s: trace %+v, want %+v", what, got.Trace, tc)
			}
		}
		check("created", j)
		check("read", get(t, st, j.ID))
		j = running(t, st, j, "sim-primary", at(1))
		check("after a write", j)
		check("read after a write", get(t, st, j.ID))
		again := newJob(t, request("a", "k", `{"prompt":"x"}`), at(2))
		again.Trace = job.TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		if got, replayed, err := st.Create(context.Background(), again); err != nil || !replayed {
			t.Fatalf("replay: replayed=%v err=%v", replayed, err)
		} else {
			check("replayed", got)
		}
		plain := create(t, st, newJob(t, request("a", "k2", `{"prompt":"x"}`), at(3)))
		if !plain.Trace.IsZero() || !get(t, st, plain.ID).Trace.IsZero() {
			t.Fatalf("a job created without a trace context has %+v", get(t, st, plain.ID).Trace)
		}
	}},
	{"KeepsTheTypesPrimary", func(t *testing.T, fresh func(*testing.T) Store) {
		// The primary is the job type's, recorded at create: a request
		// naming only a fallback does not make it the primary, and every
		// read, write and listing keeps what was recorded.
		st := fresh(t)
		r := request("a", "k", `{"prompt":"x"}`)
		r.Providers = []string{"sim-fallback"}
		j := create(t, st, newJob(t, r, at(0)))
		if j.Primary != "sim-primary" {
			t.Fatalf("created with primary %q, want sim-primary", j.Primary)
		}
		check := func(what string, got job.Job) {
			t.Helper()
			if got.Primary != "sim-primary" || !slices.Equal(got.Providers, []string{"sim-fallback"}) {
				t.Fatalf("%s: primary %q, providers %v; want sim-primary, [sim-fallback]", what, got.Primary, got.Providers)
			}
		}
		check("read", get(t, st, j.ID))
		j = running(t, st, j, "sim-fallback", at(1))
		check("after a write", get(t, st, j.ID))
		if _, replayed, err := st.Create(context.Background(), newJob(t, r, at(2))); err != nil || !replayed {
			t.Fatalf("replay: replayed=%v err=%v", replayed, err)
		}
		check("after a replay", get(t, st, j.ID))
		open, err := st.ListOpen(context.Background(), lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 10})
		if err != nil || len(open.Jobs) != 1 {
			t.Fatalf("open jobs: %v err=%v", ids(open.Jobs), err)
		}
		check("listed open", open.Jobs[0])
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "a"})
		if err != nil || len(page.Jobs) != 1 {
			t.Fatalf("list: %v err=%v", ids(page.Jobs), err)
		}
		check("listed", page.Jobs[0])
	}},
	{"KeepsTheTier", func(t *testing.T, fresh func(*testing.T) Store) {
		// How long a job may wait is decided at create and kept by every
		// read, write, replay and listing; a job that waits now has none.
		st := fresh(t)
		r := request("a", "k", `{"prompt":"x"}`)
		r.Tier = job.TierFlex8h
		j := create(t, st, newJob(t, r, at(0)))
		plain := create(t, st, newJob(t, request("a", "k2", `{"prompt":"x"}`), at(0)))
		check := func(what string, got job.Job, want job.Tier) {
			t.Helper()
			if got.Tier != want {
				t.Fatalf("%s: tier %q, want %q", what, got.Tier, want)
			}
		}
		check("created", j, job.TierFlex8h)
		check("read", get(t, st, j.ID), job.TierFlex8h)
		check("read the job that waits now", get(t, st, plain.ID), "")
		j = running(t, st, j, "sim-primary", at(1))
		check("after a write", get(t, st, j.ID), job.TierFlex8h)
		if _, replayed, err := st.Create(context.Background(), newJob(t, r, at(2))); err != nil || !replayed {
			t.Fatalf("replay: replayed=%v err=%v", replayed, err)
		}
		check("after a replay", get(t, st, j.ID), job.TierFlex8h)
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "a"})
		if err != nil || len(page.Jobs) != 2 {
			t.Fatalf("list: %v err=%v", ids(page.Jobs), err)
		}
		for _, got := range page.Jobs {
			want := job.Tier("")
			if got.ID == j.ID {
				want = job.TierFlex8h
			}
			check("listed", got, want)
		}
	}},
	{"KeepsTheStream", func(t *testing.T, fresh func(*testing.T) Store) {
		// A create's "stream" is kept by every read, write and listing;
		// a replay that asks otherwise is the same request and gets the
		// job as it was created (stream is how one watches, not what one
		// asked for).
		st := fresh(t)
		r := request("a", "k", `{"prompt":"x"}`)
		r.Stream = true
		j := create(t, st, newJob(t, r, at(0)))
		plain := create(t, st, newJob(t, request("a", "k2", `{"prompt":"x"}`), at(0)))
		check := func(what string, got job.Job, want bool) {
			t.Helper()
			if got.Stream != want {
				t.Fatalf("%s: stream %v, want %v", what, got.Stream, want)
			}
		}
		check("created", j, true)
		check("read", get(t, st, j.ID), true)
		check("read the job not streamed", get(t, st, plain.ID), false)
		j = running(t, st, j, "sim-primary", at(1))
		check("after a write", get(t, st, j.ID), true)
		for _, again := range []struct {
			key    string
			stream bool
			want   bool
		}{{"k", false, true}, {"k2", true, false}} {
			r := request("a", again.key, `{"prompt":"x"}`)
			r.Stream = again.stream
			got, replayed, err := st.Create(context.Background(), newJob(t, r, at(2)))
			if err != nil || !replayed {
				t.Fatalf("replay of %s with stream %v: replayed=%v err=%v", again.key, again.stream, replayed, err)
			}
			check("replayed "+again.key, got, again.want)
		}
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "a"})
		if err != nil || len(page.Jobs) != 2 {
			t.Fatalf("list: %v err=%v", ids(page.Jobs), err)
		}
		for _, got := range page.Jobs {
			check("listed", got, got.ID == j.ID)
		}
	}},
	{"ReplaysTheSameRequest", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		first := createAt(t, st, "a", "k", at(0))
		again := newJob(t, request("a", "k", `{ "prompt" : "x" }`), at(60))
		got, replayed, err := st.Create(context.Background(), again)
		if err != nil || !replayed {
			t.Fatalf("replay: replayed=%v err=%v", replayed, err)
		}
		sameJob(t, "replay returns the stored job", got, first)
		unchanged(t, st, first, Counts{Jobs: 1})
	}},
	{"RefusesAReusedKey", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		first := createAt(t, st, "a", "k", at(0))
		got, replayed, err := st.Create(context.Background(), newJob(t, request("a", "k", `{"prompt":"other"}`), at(60)))
		if !isKeyReused(err, first.ID) || replayed {
			t.Fatalf("replayed=%v err=%v, want a KeyReusedError for %s", replayed, err, first.ID)
		}
		sameJob(t, "a reused key returns the stored job", got, first)
		unchanged(t, st, first, Counts{Jobs: 1})
	}},
	{"RefusesAnotherOwnerOnTheSameID", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		first := createAt(t, st, "a", "k", at(0))
		// Only a hash collision could do this; the store must not hand
		// a's job to b.
		other := newJob(t, request("b", "k2", `{"prompt":"x"}`), at(60))
		other.ID = first.ID
		got, replayed, err := st.Create(context.Background(), other)
		if err == nil || replayed || errors.Is(err, job.ErrIdempotencyKeyReused) {
			t.Fatalf("replayed=%v err=%v, want a refusal", replayed, err)
		}
		if got.ID != "" || got.Owner != "" {
			t.Fatalf("the refusal leaked the stored job: %+v", got)
		}
		unchanged(t, st, first, Counts{Jobs: 1})
	}},
	{"CopiesWhatItKeeps", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := newJob(t, request("a", "k", `{"prompt":"x"}`), at(0))
		created := create(t, st, j)
		want := get(t, st, j.ID)
		// Scribbling over what went in or came out changes nothing stored.
		for _, x := range []*job.Job{&j, &created, &want} {
			x.Input[2] = 'X'
			x.Providers[0] = "scribbled"
		}
		got := get(t, st, j.ID)
		if string(got.Input) != `{"prompt":"x"}` || got.Providers[0] != "sim-primary" {
			t.Fatalf("stored job changed through an alias: input %s providers %v", got.Input, got.Providers)
		}
		got = on(t, st).apply(job.DecideStart(got, "sim-primary", at(1)))
		got.Attempts[0].State = job.AttemptSucceeded
		if a := attempt(t, get(t, st, j.ID), 1); a.State != job.AttemptStarting {
			t.Fatalf("stored attempt changed through an alias: %s", a.State)
		}
	}},
}

var getTests = []test{
	{"NotFound", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		createAt(t, st, "a", "k", at(0))
		if _, err := st.Get(context.Background(), job.NewID("a", "other")); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("get of a missing job: %v, want job.ErrNotFound", err)
		}
	}},
}

var applyTests = []test{
	{"BookkeepingMovesTheRevision", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		got := on(t, st).apply(job.DecideStart(j, "sim-primary", at(1)))
		a := attempt(t, got, 1)
		if got.Revision != 1 || got.Version != 0 || got.AttemptCount != 1 || got.Status != job.StatusRunning ||
			a.Provider != "sim-primary" || a.State != job.AttemptStarting || a.ReadVersion != 0 || !got.UpdatedAt.Equal(at(1)) {
			t.Fatalf("after start: %+v", got)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
		got = on(t, st).apply(job.DecideRunning(got, 1, at(2)))
		if got.Revision != 2 || got.Version != 0 || attempt(t, got, 1).State != job.AttemptRunning {
			t.Fatalf("after claim: %+v", got)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
		if c := st.Count(t); c != (Counts{Jobs: 1, Ledger: 1}) {
			t.Fatalf("store holds %+v, want one job and one ledger attempt", c)
		}
	}},
	{"LaunchKeepsWhatTheAttemptSent", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 27: the provider key and the request digest are recorded in
		// the launch's own write and read back as written.
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		tr, err := job.DecideLaunch(j, "sim-primary", at(1))
		if err != nil {
			t.Fatal(err)
		}
		got := on(t, st).apply(tr.WithSent("onejob-0123456789ab:"+j.ID+"/1", "2:"+strings.Repeat("ab", 32)), nil)
		a := attempt(t, got, 1)
		if a.ProviderKey != "onejob-0123456789ab:"+j.ID+"/1" || a.RequestDigest != "2:"+strings.Repeat("ab", 32) {
			t.Fatalf("attempt after the launch: %+v", a)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
	}},
	{"RemoteWorkIsKeptAsRecorded", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 29: an asynchronous attempt's work at its provider, from
		// its submit through a poll, a cancel asked and the provider's
		// confirmation, read back as written, in the job and the ledger.
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-async", at(1))
		s := job.RemotePolicy{Poll: job.DefaultPollSchedule()}
		got := on(t, st).apply(job.DecideSubmitted(j, 1, job.Remote{ID: "resp_0123", Status: "queued", Tier: job.TierFlex8h, SubmittedAt: at(2)}, s, at(2)))
		sameJob(t, "after submit", get(t, st, j.ID), got)
		got = on(t, st).apply(job.DecideHeard(got, 1, "in_progress", s.Poll, at(3)))
		got = on(t, st).apply(job.DecideCancel(got, at(4)))
		got = on(t, st).apply(job.DecideCancelRemote(got, 1, s, at(5)))
		sameJob(t, "after the cancel was asked", get(t, st, j.ID), got)
		got = on(t, st).apply(job.DecideRemoteCancelled(got, 1, job.Call{ProviderRequestID: "resp_0123"}, at(6)))
		sameJob(t, "after the provider's cancel", get(t, st, j.ID), got)
		r := attempt(t, got, 1).Remote
		if r == nil || r.ID != "resp_0123" || r.Polls != 1 || r.Status != "cancelled" || r.Tier != job.TierFlex8h || !r.CancelAt.Equal(at(5)) ||
			!r.Deadline.Equal(at(5).Add(job.DefaultCancelGrace)) {
			t.Fatalf("remote = %+v", r)
		}
		ledger, err := st.ListAttempts(context.Background(), got)
		if err != nil || len(ledger) != 1 || ledger[0].Remote == nil {
			t.Fatalf("ledger = %+v, %v", ledger, err)
		}
		if g, w := mustJSON(t, *ledger[0].Remote), mustJSON(t, *r); g != w {
			t.Fatalf("ledger's remote = %s, want %s", g, w)
		}
	}},
	{"StaleBookkeepingLoses", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		on(t, st).apply(job.DecideStart(j, "sim-primary", at(1)))
		cur := on(t, st).lose(job.DecideStart(j, "sim-fallback", at(2)))
		if cur.AttemptCount != 1 || attempt(t, cur, 1).Provider != "sim-primary" {
			t.Fatalf("current job: %+v", cur)
		}
	}},
	{"OutcomeComparesTheVersionNotTheRevision", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		read := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		// A hedge starts after attempt 1 read the job: the revision moves,
		// the version does not, and attempt 1 still wins.
		hedged := on(t, st).apply(job.DecideHedge(read, "sim-fallback", at(2)))
		got := on(t, st).apply(job.DecideComplete(read, 1, json.RawMessage(`{"text":"won"}`), "req-1", at(3)))
		a1, a2 := attempt(t, got, 1), attempt(t, got, 2)
		if got.Status != job.StatusSucceeded || got.Version != 1 || got.Revision != hedged.Revision+1 ||
			got.CompletedBy != 1 || string(got.Result) != `{"text":"won"}` || got.AttemptCount != 2 {
			t.Fatalf("after the win: status=%s version=%d revision=%d (hedged at %d) completed_by=%d result=%s attempts=%d",
				got.Status, got.Version, got.Revision, hedged.Revision, got.CompletedBy, got.Result, got.AttemptCount)
		}
		if a1.State != job.AttemptSucceeded || a1.Outcome != "won" || a1.ProviderRequestID != "req-1" ||
			a2.State != job.AttemptStarting || !a2.Hedge {
			t.Fatalf("attempts after the win (the hedge must stay as stored): %+v / %+v", a1, a2)
		}
		sameJob(t, "stored job", get(t, st, read.ID), got)
	}},
	{"StaleOutcomeLoses", func(t *testing.T, fresh func(*testing.T) Store) {
		tests := []struct {
			name   string
			decide func(read job.Job) (job.Transition, error)
		}{
			{"Cancel", func(read job.Job) (job.Transition, error) { return job.DecideCancel(read, at(9)) }},
			{"CompleteOfAnotherAttempt", func(read job.Job) (job.Transition, error) {
				return job.DecideComplete(read, 2, json.RawMessage(`{"text":"late"}`), "", at(9))
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st := fresh(t)
				j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
				read := running(t, st, j, "sim-fallback", at(2))
				won := on(t, st).apply(job.DecideComplete(read, 1, json.RawMessage(`{"text":"first"}`), "", at(3)))
				cur := on(t, st).lose(tc.decide(read))
				if cur.Status != job.StatusSucceeded || cur.CompletedBy != 1 || cur.Version != won.Version {
					t.Fatalf("current job: %+v", cur)
				}
			})
		}
	}},
	{"OutcomeNeedsTheAttemptInAnAllowedState", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		read := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		// The attempt fails after the result was decided on: the version is
		// still the one read, but a failed attempt may not win.
		on(t, st).apply(job.DecideAttemptFailed(read, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "", at(2)))
		cur := on(t, st).lose(job.DecideComplete(read, 1, json.RawMessage(`{"text":"x"}`), "", at(3)))
		if cur.Version != 0 || cur.CompletedBy != 0 || cur.Status != job.StatusRunning || attempt(t, cur, 1).State != job.AttemptFailed {
			t.Fatalf("current job: %+v", cur)
		}
	}},
	{"OutcomesAreKept", func(t *testing.T, fresh func(*testing.T) Store) {
		nonRetryable := job.Failure{Class: job.ClassNonRetryable, Message: "400 bad request"}
		tests := []struct {
			name   string
			decide func(t *testing.T, st Store, j job.Job) (job.Transition, error)
			want   func(j job.Job) bool
		}{
			{"Complete", func(t *testing.T, st Store, j job.Job) (job.Transition, error) {
				return job.DecideComplete(j, 1, json.RawMessage(`{"text":"done"}`), "req-1", at(3))
			}, func(j job.Job) bool {
				return j.Status == job.StatusSucceeded && j.CompletedBy == 1 && string(j.Result) == `{"text":"done"}` && j.Error == nil
			}},
			{"Fail", func(t *testing.T, st Store, j job.Job) (job.Transition, error) {
				j = on(t, st).apply(job.DecideAttemptFailed(j, 1, nonRetryable, "req-1", at(2)))
				return job.DecideFail(j, nonRetryable, at(3))
			}, func(j job.Job) bool {
				return j.Status == job.StatusFailed && j.CompletedBy == 0 && j.Result == nil && j.Error != nil && *j.Error == nonRetryable
			}},
			{"Cancel", func(t *testing.T, st Store, j job.Job) (job.Transition, error) { return job.DecideCancel(j, at(3)) },
				func(j job.Job) bool {
					return j.Status == job.StatusCancelled && j.CompletedBy == 0 && j.Result == nil && j.Error == nil
				}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st := fresh(t)
				j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
				tr, err := tc.decide(t, st, j)
				before := get(t, st, j.ID)
				got := on(t, st).apply(tr, err)
				if !tc.want(got) || got.Version != 1 || got.Revision != before.Revision+1 || !got.UpdatedAt.Equal(at(3)) {
					t.Fatalf("after %s: %+v", tc.name, got)
				}
				sameJob(t, "stored job", get(t, st, j.ID), got)
				// An outcome leaves the open index unless an attempt is still
				// in flight (a cancel finds the call running: issue 26).
				open, err := st.ListOpen(context.Background(), lifecycle.OpenQuery{CreatedBefore: at(100), Limit: 100})
				if err != nil || (len(open.Jobs) != 0) != got.Unsettled() {
					t.Fatalf("a job with an outcome (in flight: %v) listed open: %v err=%v", got.Unsettled(), ids(open.Jobs), err)
				}
			})
		}
	}},
	{"Noop", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		tr := on(t, st).decided(job.DecideRunning(j, 1, at(2)))
		if !tr.Noop() {
			t.Fatal("a second claim was not a no-op")
		}
		counts := st.Count(t)
		res, err := st.Apply(context.Background(), tr)
		if err != nil || !res.OK {
			t.Fatalf("apply no-op: ok=%v err=%v", res.OK, err)
		}
		sameJob(t, "a no-op's job", res.Job, tr.After())
		unchanged(t, st, j, counts)
	}},
	{"RefusesAnUndecidedTransition", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		if _, err := st.Apply(context.Background(), job.Transition{}); !errors.Is(err, job.ErrUndecided) {
			t.Fatalf("apply of an undecided transition: %v, want job.ErrUndecided", err)
		}
		unchanged(t, st, j, Counts{Jobs: 1})
	}},
	{"MissingJob", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := newJob(t, request("a", "never-created", `{"prompt":"x"}`), at(0))
		tr := on(t, st).decided(job.DecideStart(j, "sim-primary", at(1)))
		if _, err := st.Apply(context.Background(), tr); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("apply to a missing job: %v, want job.ErrNotFound", err)
		}
		if c := st.Count(t); c != (Counts{}) {
			t.Fatalf("store holds %+v, want nothing", c)
		}
	}},
}

var listAttemptsTests = []test{
	{"OldestFirst", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		j = on(t, st).apply(job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "req-1", at(2)))
		j = running(t, st, j, "sim-fallback", at(3))
		got, err := st.ListAttempts(context.Background(), j)
		if err != nil || len(got) != 2 {
			t.Fatalf("attempts = %+v err=%v, want 2", got, err)
		}
		a1, a2 := got[0], got[1]
		if a1.Number != 1 || a1.JobID != j.ID || a1.Provider != "sim-primary" || a1.State != job.AttemptFailed ||
			a1.Error == nil || a1.Error.Class != job.ClassRetryable || a1.ProviderRequestID != "req-1" || !a1.FinishedAt.Equal(at(2)) {
			t.Fatalf("attempt 1 = %+v", a1)
		}
		if a2.Number != 2 || a2.Provider != "sim-fallback" || a2.State != job.AttemptRunning || !a2.FinishedAt.IsZero() {
			t.Fatalf("attempt 2 = %+v", a2)
		}
	}},
	{"NoAttempts", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		if got, err := st.ListAttempts(context.Background(), j); err != nil || len(got) != 0 {
			t.Fatalf("attempts of a new job = %+v err=%v", got, err)
		}
	}},
	{"CancellationRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := createAt(t, st, "a", "k", at(0))
		got := on(t, st).apply(job.DecideCancelBy(j, job.Cancellation{By: "ops-1", Reason: "duplicate order"}, at(3)))
		if c := got.Cancellation; c == nil || c.By != "ops-1" || c.Reason != "duplicate order" || !c.At.Equal(at(3)) {
			t.Fatalf("cancellation %+v", got.Cancellation)
		}
		sameJob(t, "stored job", get(t, st, j.ID), got)
	}},
	{"UsageAndFailureDetailRoundTrip", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		use := &job.Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1234, OutputTokens: 56, Latency: 1500 * time.Millisecond}
		j = on(t, st).apply(job.DecideCallFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "status 503: upstream", ProviderStatus: 503},
			job.Call{ProviderRequestID: "req-1", Usage: use}, at(2)))
		for name, a := range map[string]job.Attempt{"job item": attempt(t, get(t, st, j.ID), 1), "ledger": listed(t, st, j)[0]} {
			if a.Usage == nil || *a.Usage != *use || a.Error == nil || a.Error.ProviderStatus != 503 || a.ProviderRequestID != "req-1" {
				t.Fatalf("%s: attempt %+v usage %+v error %+v", name, a, a.Usage, a.Error)
			}
		}
	}},
	{"TheJobIsTheAuthority", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		j := running(t, st, createAt(t, st, "a", "k", at(0)), "sim-primary", at(1))
		// A job whose copy of the attempt is newer than the ledger's (the
		// ledger write lags the job item's) lists its own copy.
		ahead := on(t, st).decided(job.DecideUnknown(j, 1, "timeout", at(5))).After()
		got, err := st.ListAttempts(context.Background(), ahead)
		if err != nil || len(got) != 1 || got[0].State != job.AttemptUnknown || !got[0].UnknownSince.Equal(at(5)) {
			t.Fatalf("attempts = %+v err=%v, want the job's unknown attempt", got, err)
		}
	}},
}

// page lists all pages of q, checking each holds at most its limit.
func pages(t *testing.T, st Store, q lifecycle.ListQuery) []string {
	t.Helper()
	limit := q.Limit
	if limit == 0 {
		limit = lifecycle.DefaultPageSize
	}
	var got []string
	for range 50 {
		page, err := st.List(context.Background(), q)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		if len(page.Jobs) > limit {
			t.Fatalf("page of %d jobs, limit %d", len(page.Jobs), limit)
		}
		for _, j := range page.Jobs {
			if j.Owner != q.Owner || (q.Status != "" && j.Status != q.Status) {
				t.Fatalf("listed job %s of owner %s in %s for %+v", j.ID, j.Owner, j.Status, q)
			}
		}
		got = append(got, ids(page.Jobs)...)
		if q.Cursor = page.Next; q.Cursor == "" {
			return got
		}
	}
	t.Fatalf("list %+v: no last page after 50", q)
	return nil
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: listed\n %v\nwant\n %v", what, got, want)
	}
}

var listTests = []test{
	{"NewestFirst", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		var want []string
		for i := range 5 {
			want = append([]string{createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(i)).ID}, want...)
		}
		createAt(t, st, "someone-else", "k9", at(9))
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "lister", Limit: 10})
		if err != nil || page.Next != "" {
			t.Fatalf("list: next=%q err=%v", page.Next, err)
		}
		sameIDs(t, "one page", ids(page.Jobs), want)
	}},
	{"PagesWithACursor", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		var want []string
		for i := range 7 {
			want = append([]string{createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(i)).ID}, want...)
		}
		createAt(t, st, "someone-else", "k0", at(3))
		for _, limit := range []int{1, 3, 7} {
			sameIDs(t, fmt.Sprintf("pages of %d", limit), pages(t, st, lifecycle.ListQuery{Owner: "lister", Limit: limit}), want)
		}
	}},
	{"SameTimeByIDDescending", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		var want []string
		for i := range 4 {
			want = append(want, createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(0)).ID)
		}
		slices.Sort(want)
		slices.Reverse(want)
		sameIDs(t, "jobs of one instant", pages(t, st, lifecycle.ListQuery{Owner: "lister", Limit: 3}), want)
	}},
	{"DefaultPageSize", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		for i := range lifecycle.DefaultPageSize + 1 {
			createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(i))
		}
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "lister"})
		if err != nil || len(page.Jobs) != lifecycle.DefaultPageSize || page.Next == "" {
			t.Fatalf("first page: %d jobs next=%q err=%v, want %d and a cursor", len(page.Jobs), page.Next, err, lifecycle.DefaultPageSize)
		}
		rest, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "lister", Cursor: page.Next})
		if err != nil || len(rest.Jobs) != 1 || rest.Jobs[0].ID != job.NewID("lister", "k0") {
			t.Fatalf("second page: %v err=%v, want the oldest job", ids(rest.Jobs), err)
		}
	}},
	// A cursor is handed out only when another page follows: an exactly
	// full last page has none, so no client ever fetches an empty page.
	{"NoCursorAfterAnExactlyFullLastPage", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		for i := range 6 {
			createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(i))
		}
		for _, limit := range []int{2, 3, 6} {
			q := lifecycle.ListQuery{Owner: "lister", Limit: limit}
			for n := 1; ; n++ {
				page, err := st.List(context.Background(), q)
				if err != nil || len(page.Jobs) != limit {
					t.Fatalf("limit %d, page %d: %d jobs, err=%v; want %d", limit, n, len(page.Jobs), err, limit)
				}
				if n == 6/limit {
					if page.Next != "" {
						t.Fatalf("limit %d: the last page hands out a cursor", limit)
					}
					break
				}
				if page.Next == "" {
					t.Fatalf("limit %d, page %d: no cursor although jobs follow", limit, n)
				}
				q.Cursor = page.Next
			}
		}
		for _, status := range []job.Status{job.StatusPending} {
			page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "lister", Status: status, Limit: 6})
			if err != nil || len(page.Jobs) != 6 || page.Next != "" {
				t.Fatalf("filtered exactly full page: %d jobs next=%q err=%v", len(page.Jobs), page.Next, err)
			}
		}
	}},
	{"StatusFilter", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		var cancelled, pending []string
		for i := range 7 {
			j := createAt(t, st, "lister", fmt.Sprintf("k%d", i), at(i))
			if i%3 == 0 {
				on(t, st).apply(job.DecideCancel(j, at(10)))
				cancelled = append([]string{j.ID}, cancelled...)
			} else {
				pending = append([]string{j.ID}, pending...)
			}
		}
		for _, limit := range []int{1, 2, 20} {
			sameIDs(t, "cancelled", pages(t, st, lifecycle.ListQuery{Owner: "lister", Status: job.StatusCancelled, Limit: limit}), cancelled)
			sameIDs(t, "pending", pages(t, st, lifecycle.ListQuery{Owner: "lister", Status: job.StatusPending, Limit: limit}), pending)
		}
		sameIDs(t, "succeeded", pages(t, st, lifecycle.ListQuery{Owner: "lister", Status: job.StatusSucceeded}), []string{})
	}},
	{"UnknownOwner", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		createAt(t, st, "a", "k", at(0))
		page, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "nobody"})
		if err != nil || len(page.Jobs) != 0 || page.Next != "" {
			t.Fatalf("list of an unknown owner: %+v err=%v", page, err)
		}
	}},
	{"InvalidCursor", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		createAt(t, st, "a", "k", at(0))
		for _, c := range []string{"not-a-cursor", "%%%", base64.RawURLEncoding.EncodeToString([]byte(`{}`)),
			base64.RawURLEncoding.EncodeToString([]byte(`[1,2]`)), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("?", 10)))} {
			if _, err := st.List(context.Background(), lifecycle.ListQuery{Owner: "a", Cursor: c}); !errors.Is(err, lifecycle.ErrInvalidCursor) {
				t.Fatalf("cursor %q: %v, want lifecycle.ErrInvalidCursor", c, err)
			}
		}
	}},
}

var listOpenTests = []test{
	{"CutoffOrderAndLimit", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		pending := createAt(t, st, "a", "pending", at(0))
		started := on(t, st).apply(job.DecideStart(createAt(t, st, "b", "started", at(1)), "sim-primary", at(20)))
		unknown := running(t, st, createAt(t, st, "a", "unknown", at(2)), "sim-primary", at(20))
		unknown = on(t, st).apply(job.DecideUnknown(unknown, 1, "timeout", at(21)))
		succeeded := running(t, st, createAt(t, st, "a", "succeeded", at(3)), "sim-primary", at(20))
		on(t, st).apply(job.DecideComplete(succeeded, 1, json.RawMessage(`{}`), "", at(21)))
		on(t, st).apply(job.DecideCancel(createAt(t, st, "c", "cancelled", at(4)), at(20)))
		failed := running(t, st, createAt(t, st, "a", "failed", at(5)), "sim-primary", at(20))
		failed = on(t, st).apply(job.DecideAttemptFailed(failed, 1, job.Failure{Class: job.ClassNonRetryable, Message: "400"}, "", at(21)))
		on(t, st).apply(job.DecideFail(failed, *attempt(t, failed, 1).Error, at(22)))
		late := createAt(t, st, "a", "late", at(6))
		createAt(t, st, "a", "at-cutoff", at(10))

		open, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		sameIDs(t, "open before the cutoff", ids(open.Jobs), []string{pending.ID, started.ID, unknown.ID, late.ID})
		sameJob(t, "an open job as listed", open.Jobs[2], unknown)
		if open.Next != "" {
			t.Fatalf("a cursor after the last page: %q", open.Next)
		}
		first, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2})
		if err != nil || !slices.Equal(ids(first.Jobs), []string{pending.ID, started.ID}) || first.Next == "" {
			t.Fatalf("limit 2: %v next=%q err=%v", ids(first.Jobs), first.Next, err)
		}
		second, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2, Cursor: first.Next})
		if err != nil || !slices.Equal(ids(second.Jobs), []string{unknown.ID, late.ID}) || second.Next != "" {
			t.Fatalf("the second page: %v next=%q err=%v", ids(second.Jobs), second.Next, err)
		}
		if _, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2, Cursor: "!!"}); !errors.Is(err, lifecycle.ErrInvalidCursor) {
			t.Fatalf("a forged cursor: %v", err)
		}
		if open, err = st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(0), Limit: 100}); err != nil || len(open.Jobs) != 0 {
			t.Fatalf("cutoff at the oldest job's creation: %v err=%v, want none", ids(open.Jobs), err)
		}
	}},
	{"AFinishedJobStaysOpenWhileAnAttemptIsInFlight", func(t *testing.T, fresh func(*testing.T) Store) {
		// Issue 26: a job cancelled while its call is unknown, or won while
		// another attempt runs, stays in the open index until the write
		// that ends that attempt takes it out.
		st := fresh(t)
		ctx := context.Background()
		cancelled := running(t, st, createAt(t, st, "a", "cancelled-unknown", at(1)), "sim-primary", at(2))
		cancelled = on(t, st).apply(job.DecideUnknown(cancelled, 1, "timeout", at(3)))
		cancelled = on(t, st).apply(job.DecideCancel(cancelled, at(4)))
		won := running(t, st, createAt(t, st, "a", "won-hedged", at(2)), "sim-primary", at(2))
		won = on(t, st).apply(job.DecideHedge(won, "sim-fallback", at(3)))
		won = on(t, st).apply(job.DecideRunning(won, 2, at(3)))
		won = on(t, st).apply(job.DecideComplete(won, 2, json.RawMessage(`{}`), "", at(4)))
		listed := func() []string {
			t.Helper()
			open, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			return ids(open.Jobs)
		}
		sameIDs(t, "finished with attempts in flight", listed(), []string{cancelled.ID, won.ID})
		on(t, st).apply(job.DecideSettle(cancelled, 1, job.Verdict{Outcome: job.AttemptFailed, Evidence: "not found",
			Failure: &job.Failure{Class: job.ClassSettled, Message: "not found"}}, nil, job.Call{}, at(5)))
		on(t, st).apply(job.DecideComplete(won, 1, json.RawMessage(`{}`), "", at(6))) // the loser, discarded
		sameIDs(t, "once their last attempts ended", listed(), []string{})
	}},
}

// openCursor encodes a by_open position as ListOpen's cursors do.
func openCursor(position string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(position))
}

var forgedOpenCursorTests = []test{
	{"ForgedCursors", func(t *testing.T, fresh func(*testing.T) Store) {
		// A cursor is a position a listing handed out; anything else is
		// the caller's mistake (ErrInvalidCursor), never a store error. A
		// well-formed position past the cutoff (another server's clock)
		// is an empty last page.
		st := fresh(t)
		ctx := context.Background()
		j := createAt(t, st, "a", "open", at(0))
		first, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 1})
		if err != nil || len(first.Jobs) != 1 {
			t.Fatalf("the one open job: %v err=%v", ids(first.Jobs), err)
		}
		position := at(0).Format("20060102T150405.000000000Z") + "#" + j.ID
		for _, c := range []string{"fg", "!!", openCursor("~"), openCursor(" "), openCursor(strings.Repeat("z", 200)),
			openCursor(position[:26]), openCursor(position[:27]), openCursor(strings.Replace(position, "#", "~", 1)),
			openCursor("2026-03-01T12:00:00Z#" + j.ID), openCursor(position + "\x00"), openCursor(position[:26] + "#job_UPPER"),
			openCursor(position + " "), openCursor(position) + "="} {
			page, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2, Cursor: c})
			if !errors.Is(err, lifecycle.ErrInvalidCursor) {
				t.Fatalf("cursor %q: %v %v, want lifecycle.ErrInvalidCursor", c, ids(page.Jobs), err)
			}
		}
		for _, c := range []string{openCursor(position), openCursor(at(60).Format("20060102T150405.000000000Z") + "#" + j.ID),
			openCursor("99991231T235959.999999999Z#job_zzz")} {
			page, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2, Cursor: c})
			if err != nil || len(page.Jobs) != 0 || page.Next != "" {
				t.Fatalf("cursor %q at or past the last job: %v next=%q err=%v, want an empty last page", c, ids(page.Jobs), page.Next, err)
			}
		}
		before := openCursor(at(-60).Format("20060102T150405.000000000Z") + "#job_0")
		if page, err := st.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: at(10), Limit: 2, Cursor: before}); err != nil ||
			!slices.Equal(ids(page.Jobs), []string{j.ID}) {
			t.Fatalf("a position before every job: %v err=%v", ids(page.Jobs), err)
		}
	}},
}

var certificationTests = []test{
	{"OnlyTheCurrentContractVersionCounts", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		ctx := context.Background()
		put(t, st, job.Certification{JobType: "demo", ContractVersion: "v1", Provider: "p", Passed: true, CertifiedAt: at(0)})
		tests := []struct {
			jobType, version, provider string
			want                       bool
		}{
			{"demo", "v1", "p", true},
			{"demo", "v2", "p", false},
			{"other", "v1", "p", false},
			{"demo", "v1", "q", false},
		}
		for _, tc := range tests {
			if got, err := st.Certified(ctx, tc.jobType, tc.version, tc.provider); err != nil || got != tc.want {
				t.Fatalf("Certified(%s, %s, %s) = %v, %v; want %v", tc.jobType, tc.version, tc.provider, got, err, tc.want)
			}
		}
	}},
	{"TheLatestRunCounts", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		for i, passed := range []bool{false, true, false, true} {
			put(t, st, job.Certification{JobType: "demo", ContractVersion: "v1", Provider: "p", Passed: passed, CertifiedAt: at(i)})
			if got, err := st.Certified(context.Background(), "demo", "v1", "p"); err != nil || got != passed {
				t.Fatalf("run %d (passed=%v): Certified = %v, %v", i, passed, got, err)
			}
		}
		if got := list(t, st); len(got) != 1 || !got[0].CertifiedAt.Equal(at(3)) {
			t.Fatalf("certifications = %+v, want the latest run only", got)
		}
	}},
	{"ListsInOrder", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		if got := list(t, st); len(got) != 0 {
			t.Fatalf("certifications of an empty store: %+v", got)
		}
		local := time.FixedZone("UTC+2", 2*60*60)
		in := []job.Certification{
			{JobType: "ticket-triage", ContractVersion: "v1", Provider: "a", Model: "m1", Passed: true,
				Cases: json.RawMessage(`[{"case":"x","passed":true}]`), CertifiedAt: at(1).In(local)},
			{JobType: "demo", ContractVersion: "v2", Provider: "b", Passed: false, CertifiedAt: at(2)},
			{JobType: "demo", ContractVersion: "v1", Provider: "b", Passed: true, CertifiedAt: at(3)},
			{JobType: "demo", ContractVersion: "v1", Provider: "a", Passed: true, CertifiedAt: at(4)},
		}
		for _, c := range in {
			put(t, st, c)
		}
		got := list(t, st)
		var order []string
		for _, c := range got {
			order = append(order, c.JobType+"/"+c.ContractVersion+"/"+c.Provider)
		}
		sameIDs(t, "certifications", order, []string{"demo/v1/a", "demo/v1/b", "demo/v2/b", "ticket-triage/v1/a"})
		tt := got[3]
		if tt.Model != "m1" || !tt.Passed || string(tt.Cases) != `[{"case":"x","passed":true}]` || !tt.CertifiedAt.Equal(at(1)) {
			t.Fatalf("ticket-triage certification = %+v", tt)
		}
		if string(got[2].Cases) != "[]" || got[2].Passed || !got[2].CertifiedAt.Equal(at(2)) {
			t.Fatalf("a certification without cases lists them as []: %+v", got[2])
		}
	}},
}

func put(t *testing.T, st Store, c job.Certification) {
	t.Helper()
	if err := st.PutCertification(context.Background(), c); err != nil {
		t.Fatalf("put certification: %v", err)
	}
}

func list(t *testing.T, st Store) []job.Certification {
	t.Helper()
	got, err := st.ListCertifications(context.Background())
	if err != nil {
		t.Fatalf("list certifications: %v", err)
	}
	return got
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

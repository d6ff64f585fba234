package apigw_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
)

// virtualTime is the handler's clock and pacer at once: a pause moves the
// clock instead of sleeping, and runs what was scheduled up to then.
type virtualTime struct {
	mu     sync.Mutex
	now    time.Time
	start  time.Time
	pauses []time.Duration
	due    []scheduled
}

type scheduled struct {
	at time.Duration // since start
	f  func()
}

func newVirtualTime() *virtualTime {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return &virtualTime{now: t0, start: t0}
}

func (v *virtualTime) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

func (v *virtualTime) Pause(_ context.Context, d time.Duration) error {
	v.mu.Lock()
	v.now = v.now.Add(d)
	v.pauses = append(v.pauses, d)
	var run []func()
	keep := v.due[:0]
	for _, s := range v.due {
		if v.now.Sub(v.start) >= s.at {
			run = append(run, s.f)
		} else {
			keep = append(keep, s)
		}
	}
	v.due = keep
	v.mu.Unlock()
	for _, f := range run {
		f()
	}
	return nil
}

// at runs f once the virtual clock has passed start+d.
func (v *virtualTime) at(d time.Duration, f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.due = append(v.due, scheduled{at: d, f: f})
}

// elapsed is the virtual time since the test began, and the pauses taken.
func (v *virtualTime) elapsed() (time.Duration, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now.Sub(v.start), len(v.pauses)
}

func (v *virtualTime) option() envOption {
	return func(c *apigw.Config, _ *dynamo.Config) { c.Clock, c.Pacer = v.Now, v }
}

func (e *env) getJob(t *testing.T, tok, id string, headers map[string]string) result {
	t.Helper()
	return e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok, headers: headers})
}

// TestETagAndNotModified: the tag is stable while nothing changes, If-None-
// Match answers 304 with the same validators and no body, and a change gives
// a new tag. Open jobs carry a Retry-After from their type; finished ones
// none.
func TestETagAndNotModified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.token(t, "owner-etag")
	id := e.mustCreate(t, "owner-etag", "etag-1", demoBody)
	hedged := e.mustCreate(t, "owner-etag", "etag-2", `{"type":"demo-hedge","input":{"prompt":"hi"}}`)

	first := e.getJob(t, tok, id, nil)
	tag := first.header.Get("ETag")
	if first.status != http.StatusOK || !strings.HasPrefix(tag, `"`) || strings.HasPrefix(tag, "W/") {
		t.Fatalf("GET: %d, ETag %q", first.status, tag)
	}
	if again := e.getJob(t, tok, id, nil).header.Get("ETag"); again != tag {
		t.Fatalf("unchanged job: ETag %s then %s", tag, again)
	}
	if ra := first.header.Get("Retry-After"); ra != "2" {
		t.Fatalf("open demo job: Retry-After %q, want 2 (its timeout)", ra)
	}
	if ra := e.getJob(t, tok, hedged, nil).header.Get("Retry-After"); ra != "1" {
		t.Fatalf("open demo-hedge job: Retry-After %q, want 1 (its 500 ms hedge, rounded up)", ra)
	}

	for _, tc := range []struct {
		name, inm string
		want      int
	}{
		{"SameTag", tag, http.StatusNotModified},
		{"WeakFormOfTag", "W/" + tag, http.StatusNotModified},
		{"InAList", `"other", ` + tag, http.StatusNotModified},
		{"Star", "*", http.StatusNotModified},
		{"OtherTag", `"AAAAAAAAAAAAAAAAAAAA"`, http.StatusOK},
		{"Garbage", "not a tag", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.getJob(t, tok, id, map[string]string{"If-None-Match": tc.inm})
			if r.status != tc.want {
				t.Fatalf("If-None-Match %s: %d, want %d", tc.inm, r.status, tc.want)
			}
			if r.header.Get("ETag") != tag || r.header.Get("Retry-After") != "2" {
				t.Fatalf("validators ETag %q Retry-After %q", r.header.Get("ETag"), r.header.Get("Retry-After"))
			}
			if tc.want == http.StatusNotModified && (len(r.body) != 0 || r.header.Get("Preference-Applied") != "") {
				t.Fatalf("304 with body %q, Preference-Applied %q", r.body, r.header.Get("Preference-Applied"))
			}
		})
	}

	if _, err := e.eng.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	after := e.getJob(t, tok, id, map[string]string{"If-None-Match": tag})
	if after.status != http.StatusOK || after.header.Get("ETag") == tag || after.jobBody(t)["status"] != "cancelled" {
		t.Fatalf("after cancel: %d, ETag %q (was %s): %s", after.status, after.header.Get("ETag"), tag, after.body)
	}
	if ra := after.header.Get("Retry-After"); ra != "" {
		t.Fatalf("finished job with Retry-After %q", ra)
	}
	// Another owner learns nothing, not even through the condition.
	r := e.getJob(t, e.token(t, "someone-else"), id, map[string]string{"If-None-Match": "*", "Prefer": "wait=5"})
	wantProblem(t, r, http.StatusNotFound, apigw.CodeNotFound)
}

// TestPreferWait holds GETs on a virtual clock: a change is answered at the
// next re-read, an unchanged job with 304 when the wait is over, N is
// capped at 20 s, and what is not a wait preference is ignored. The reads
// are bounded: one, then one per 500 ms.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		prefer      string
		noCondition bool
		changeAt    time.Duration // 0: the job does not change
		wantStatus  int
		wantApplied string
		wantElapsed time.Duration
		wantPauses  int
	}{
		{name: "UnchangedFor5s", prefer: "wait=5", wantStatus: 304, wantApplied: "wait=5", wantElapsed: 5 * time.Second, wantPauses: 10},
		{name: "ChangeAfter1200ms", prefer: "wait=5", changeAt: 1200 * time.Millisecond, wantStatus: 200, wantApplied: "wait=5",
			wantElapsed: 1500 * time.Millisecond, wantPauses: 3},
		{name: "CappedAt20s", prefer: "wait=600", wantStatus: 304, wantApplied: "wait=20", wantElapsed: 20 * time.Second, wantPauses: 40},
		{name: "HugeNumberCapped", prefer: "wait=99999999999999999999", wantStatus: 304, wantApplied: "wait=20", wantElapsed: 20 * time.Second, wantPauses: 40},
		{name: "WithOtherPreferences", prefer: `respond-async, wait="3";x=y, wait=9`, wantStatus: 304, wantApplied: "wait=3", wantElapsed: 3 * time.Second, wantPauses: 6},
		{name: "CaseInsensitiveName", prefer: "WAIT = 1", wantStatus: 304, wantApplied: "wait=1", wantElapsed: time.Second, wantPauses: 2},
		{name: "Zero", prefer: "wait=0", wantStatus: 304, wantApplied: "wait=0"},
		{name: "NotANumber", prefer: "wait=soon", wantStatus: 304},
		{name: "Negative", prefer: "wait=-5", wantStatus: 304},
		{name: "NoWaitPreference", prefer: "return=minimal", wantStatus: 304},
		{name: "WithoutIfNoneMatch", prefer: "wait=5", noCondition: true, wantStatus: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vt := newVirtualTime()
			e := newEnv(t, vt.option())
			tok := e.token(t, "owner-wait")
			id := e.mustCreate(t, "owner-wait", "wait-1", demoBody)
			tag := e.getJob(t, tok, id, nil).header.Get("ETag")
			if tc.changeAt > 0 {
				vt.at(tc.changeAt, func() {
					if _, err := e.eng.Cancel(context.Background(), id); err != nil {
						t.Error(err)
					}
				})
			}
			headers := map[string]string{"Prefer": tc.prefer}
			if !tc.noCondition {
				headers["If-None-Match"] = tag
			}
			r := e.getJob(t, tok, id, headers)
			elapsed, pauses := vt.elapsed()
			if r.status != tc.wantStatus || r.header.Get("Preference-Applied") != tc.wantApplied {
				t.Fatalf("status %d Preference-Applied %q, want %d %q", r.status, r.header.Get("Preference-Applied"), tc.wantStatus, tc.wantApplied)
			}
			if elapsed != tc.wantElapsed || pauses != tc.wantPauses {
				t.Fatalf("answered after %v and %d re-reads, want %v and %d", elapsed, pauses, tc.wantElapsed, tc.wantPauses)
			}
			if tc.changeAt > 0 {
				if got := r.jobBody(t)["status"]; got != "cancelled" || r.header.Get("ETag") == tag {
					t.Fatalf("after the change: status %v ETag %s", got, r.header.Get("ETag"))
				}
				if late := elapsed - tc.changeAt; late > time.Second {
					t.Fatalf("answered %v after the change", late)
				}
			}
		})
	}
}

package job_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// down reports the named providers unavailable until their times.
func down(until map[string]time.Time) func(string) job.Admission {
	return func(p string) job.Admission {
		if u, ok := until[p]; ok {
			return job.Admission{Reason: "open", RetryAt: u}
		}
		return job.Admission{Allowed: true}
	}
}

func TestNextSkipsUnavailableProviders(t *testing.T) {
	t.Parallel()
	all := func(string) bool { return true }
	tests := []struct {
		name     string
		job      func(t *testing.T) job.Job
		until    map[string]time.Time
		cert     func(string) bool
		now      time.Time
		action   job.Action
		provider string
		wait     time.Duration
		class    job.Class
	}{
		{"OpenPrimaryStartsOnTheNextCertified", newJob, map[string]time.Time{"p1": t0.Add(time.Minute)}, all, t0,
			job.ActionRun, "p2", 0, ""},
		{"OpenPrimaryNeverStartsAnUncertifiedFallback", newJob, map[string]time.Time{"p1": t0.Add(time.Minute)},
			func(p string) bool { return p == "p3" }, t0, job.ActionRun, "p3", 0, ""},
		{"AllOpenWaitsForTheFirstToReturn", newJob,
			map[string]time.Time{"p1": t0.Add(time.Minute), "p2": t0.Add(20 * time.Second), "p3": t0.Add(time.Hour)}, all, t0,
			job.ActionWait, "", 20 * time.Second, ""},
		{"OpenWithoutAnEndWaitsASecond", newJob,
			map[string]time.Time{"p1": {}, "p2": {}, "p3": {}}, all, t0, job.ActionWait, "", time.Second, ""},
		{"WaitsNoLongerThanTheBound", func(t *testing.T) job.Job {
			return after(job.DecideWait(newJob(t), job.Waiting{Reason: job.WaitProviders, Since: t0, Until: t0.Add(time.Minute)}, t0))
		}, map[string]time.Time{"p1": t0.Add(time.Hour), "p2": t0.Add(time.Hour), "p3": t0.Add(time.Hour)}, all, t0.Add(29 * time.Minute),
			job.ActionWait, "", time.Minute, ""},
		{"FailsOnceTheBoundIsOver", func(t *testing.T) job.Job {
			return after(job.DecideWait(newJob(t), job.Waiting{Reason: job.WaitProviders, Since: t0, Until: t0.Add(time.Minute)}, t0))
		}, map[string]time.Time{"p1": t0.Add(time.Hour), "p2": t0.Add(time.Hour), "p3": t0.Add(time.Hour)}, all, t0.Add(30 * time.Minute),
			job.ActionFinalize, "", 0, job.ClassUnavailable},
		{"OpenPrimaryWithUncertifiedFallbacksWaitsForIt", newJob, map[string]time.Time{"p1": t0.Add(time.Minute)},
			func(string) bool { return false }, t0, job.ActionWait, "", time.Minute, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := job.Policy{MaxAttempts: 5, CertifiedFunc: tc.cert, AvailableFunc: down(tc.until)}
			plan := job.Next(tc.job(t), p, tc.now)
			if plan.Action != tc.action || plan.Provider != tc.provider || plan.Wait != tc.wait {
				t.Fatalf("plan %+v, want %s %q wait %s", plan, tc.action, tc.provider, tc.wait)
			}
			if tc.class != "" && (plan.Failure == nil || plan.Failure.Class != tc.class) {
				t.Fatalf("failure %+v, want class %s", plan.Failure, tc.class)
			}
			if plan.Action == job.ActionWait && (plan.Waiting == nil || plan.Waiting.Reason != job.WaitProviders || plan.Blocker != 0) {
				t.Fatalf("a wait for providers must say so: %+v", plan)
			}
		})
	}
}

func TestAWaitingJobHoldsUntilItsRecordedEnd(t *testing.T) {
	t.Parallel()
	// Without a live view of the breakers (the hold task), the job's own
	// record says how long to wait; a launch clears it.
	w := job.Waiting{Reason: job.WaitProviders, Since: t0, Until: t0.Add(45 * time.Second), Detail: "p1: open"}
	j := after(job.DecideWait(newJob(t), w, t0))
	if plan := job.Next(j, job.Policy{MaxAttempts: 5}, t0.Add(15*time.Second)); plan.Action != job.ActionWait || plan.Wait != 30*time.Second {
		t.Fatalf("plan %+v, want a 30 s wait", plan)
	}
	if plan := job.Next(j, job.Policy{MaxAttempts: 5}, t0.Add(45*time.Second)); plan.Action != job.ActionRun || plan.Provider != "p1" {
		t.Fatalf("plan %+v after the wait, want run p1", plan)
	}
	if tr, err := job.DecideWait(j, w, t0.Add(time.Second)); err != nil || !tr.Noop() {
		t.Fatalf("recording the same wait again: %+v %v, want a no-op", tr, err)
	}
	launched := after(job.DecideLaunch(j, "p1", t0.Add(46*time.Second)))
	if launched.Waiting != nil || launched.Status != job.StatusRunning {
		t.Fatalf("after a launch: %+v", launched)
	}
	if _, err := job.DecideWait(launched, w, t0); err == nil {
		t.Fatal("a job with an open attempt was made to wait for providers")
	}
}

func unknownAttempt(t *testing.T) job.Job {
	t.Helper()
	j := after(job.DecideLaunch(newJob(t), "p1", t0))
	return after(job.DecideUnknown(j, 1, "timed out", t0.Add(2*time.Second)))
}

func TestReadEvidence(t *testing.T) {
	t.Parallel()
	a, _ := unknownAttempt(t).Attempt(1)
	pol := job.SettlePolicy{MaxProcessingTime: 10 * time.Minute, DeadlineGrace: 5 * time.Minute}
	deadline := pol
	deadline.AtDeadline = true
	kept := pol // a webhook remembering keys 30 minutes
	kept.KeyRetention = 30 * time.Minute
	tests := []struct {
		name    string
		e       job.Evidence
		refusal job.Class
		p       job.SettlePolicy
		after   time.Duration
		outcome job.AttemptState
		class   job.Class
	}{
		{"AnsweredSucceeds", job.EvidenceAnswered, "", pol, time.Minute, job.AttemptSucceeded, ""},
		{"InProgressWaits", job.EvidenceInProgress, "", pol, time.Hour, "", ""},
		{"AbsentBeforeMaxProcessingProvesNothing", job.EvidenceAbsent, "", pol, 9 * time.Minute, "", ""},
		{"AbsentPastMaxProcessingFails", job.EvidenceAbsent, "", pol, 10 * time.Minute, job.AttemptFailed, job.ClassSettled},
		{"RefusedFailsWithItsClass", job.EvidenceRefused, job.ClassNonRetryable, pol, time.Second, job.AttemptFailed, job.ClassNonRetryable},
		{"RefusedAmbiguouslyIsNonRetryable", job.EvidenceRefused, job.ClassAmbiguous, pol, time.Second, job.AttemptFailed, job.ClassNonRetryable},
		{"NoWayToAskWaitsForAnOperator", job.EvidenceNone, "", pol, 48 * time.Hour, "", ""},
		{"NoWayToAskBeforeTheDeadlineWaits", job.EvidenceNone, "", deadline, 14 * time.Minute, "", ""},
		{"NoWayToAskPastTheDeadlineFailsWhereTheTypeOptsIn", job.EvidenceNone, "", deadline, 15 * time.Minute, job.AttemptFailed, job.ClassSettled},
		{"ExecutedNowInsideTheWindowSucceeds", job.EvidenceExecuted, "", kept, 27 * time.Minute, job.AttemptSucceeded, ""},
		{"ExecutedNowAtTheWindowsEdgeSettlesNothing", job.EvidenceExecuted, "", kept, 28 * time.Minute, "", ""},
		{"ExecutedNowWithoutARetentionSettlesNothing", job.EvidenceExecuted, "", pol, time.Minute, "", ""},
		{"LookupAbsentInsideTheRetentionFails", job.EvidenceAbsent, "", kept, 20 * time.Minute, job.AttemptFailed, job.ClassSettled},
		{"LookupAbsentPastTheRetentionProvesNothing", job.EvidenceAbsent, "", kept, 28 * time.Minute, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := job.ReadEvidence(a, tc.e, "what the provider said", tc.refusal, tc.p, a.StartedAt.Add(tc.after))
			if v.Outcome != tc.outcome {
				t.Fatalf("verdict %+v, want outcome %q", v, tc.outcome)
			}
			if tc.class != "" && (v.Failure == nil || v.Failure.Class != tc.class) {
				t.Fatalf("failure %+v, want class %s", v.Failure, tc.class)
			}
			if v.Evidence == "" {
				t.Fatal("a verdict records no evidence")
			}
		})
	}
}

func TestDecideSettle(t *testing.T) {
	t.Parallel()
	result := json.RawMessage(`{"text":"late"}`)
	at := t0.Add(time.Minute)
	t.Run("AnsweredCompletesByCompareAndSwap", func(t *testing.T) {
		t.Parallel()
		tr, err := job.DecideSettle(unknownAttempt(t), 1, job.Verdict{Outcome: job.AttemptSucceeded, Evidence: "re-sent: 200"}, result, job.Call{}, at)
		if err != nil || tr.Kind() != job.KindComplete {
			t.Fatalf("%+v %v", tr, err)
		}
		j := tr.After()
		a, _ := j.Attempt(1)
		if j.Status != job.StatusSucceeded || j.CompletedBy != 1 || a.Resolution == nil || a.Resolution.By != job.Reconciler ||
			a.Resolution.Reason != "re-sent: 200" || a.Outcome != "settled" || a.Error != nil {
			t.Fatalf("job %+v attempt %+v", j, a)
		}
	})
	t.Run("FailedEndsTheAttempt", func(t *testing.T) {
		t.Parallel()
		f := &job.Failure{Class: job.ClassSettled, Message: "no trace"}
		j := after(job.DecideSettle(unknownAttempt(t), 1, job.Verdict{Outcome: job.AttemptFailed, Failure: f, Evidence: "no trace"}, nil, job.Call{}, at))
		a, _ := j.Attempt(1)
		if a.State != job.AttemptFailed || a.Error.Class != job.ClassSettled || a.Resolution.By != job.Reconciler || j.Status != job.StatusRunning {
			t.Fatalf("job %s attempt %+v", j.Status, a)
		}
		if plan := job.Next(j, job.Policy{MaxAttempts: 5, CertifiedFunc: func(string) bool { return true }}, at); plan.Provider != "p2" {
			t.Fatalf("after the settlement: %+v, want the next provider", plan)
		}
	})
	t.Run("NothingProvenWritesNothing", func(t *testing.T) {
		t.Parallel()
		if tr, err := job.DecideSettle(unknownAttempt(t), 1, job.Verdict{Evidence: "409"}, nil, job.Call{}, at); err != nil || !tr.Noop() {
			t.Fatalf("%+v %v", tr, err)
		}
	})
	t.Run("ALiveAnswerFirstDiscardsTheVerdict", func(t *testing.T) {
		t.Parallel()
		j := after(job.DecideComplete(unknownAttempt(t), 1, json.RawMessage(`{"text":"live"}`), "", at))
		tr, err := job.DecideSettle(j, 1, job.Verdict{Outcome: job.AttemptSucceeded, Evidence: "re-sent: 200"}, result, job.Call{}, at)
		if err != nil || !tr.Noop() || string(tr.After().Result) != `{"text":"live"}` {
			t.Fatalf("%+v %v", tr, err)
		}
	})
	t.Run("AnAnswerAfterAnotherAttemptWonIsDiscarded", func(t *testing.T) {
		t.Parallel()
		// An operator cancelled the job while the attempt was unknown.
		j := after(job.DecideCancel(unknownAttempt(t), at))
		tr, err := job.DecideSettle(j, 1, job.Verdict{Outcome: job.AttemptSucceeded, Evidence: "re-sent: 200"}, result, job.Call{}, at)
		a, _ := tr.After().Attempt(1)
		if _, lost := tr.LostRace(); err != nil || !lost || a.State != job.AttemptDiscarded || tr.After().Status != job.StatusCancelled {
			t.Fatalf("%+v %v attempt %+v", tr, err, a)
		}
	})
	t.Run("AFailedVerdictNeedsItsFailure", func(t *testing.T) {
		t.Parallel()
		if _, err := job.DecideSettle(unknownAttempt(t), 1, job.Verdict{Outcome: job.AttemptFailed}, nil, job.Call{}, at); err == nil ||
			!strings.Contains(err.Error(), "needs its failure") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestMayResend(t *testing.T) {
	t.Parallel()
	a, _ := unknownAttempt(t).Attempt(1)
	tests := []struct {
		name      string
		retention time.Duration
		after     time.Duration
		want      bool
	}{
		{"FirstReSendInsideTheContractsMinimum", 10 * time.Minute, time.Minute + 31*time.Second, true},
		{"SecondReSendPastTheContractsMinimum", 10 * time.Minute, 16*time.Minute + 31*time.Second, false},
		{"TheMarginIsTakenOff", 10 * time.Minute, 10*time.Minute - job.ResendMargin, false},
		{"JustInsideTheMargin", 10 * time.Minute, 10*time.Minute - job.ResendMargin - time.Second, true},
		{"ALongRetentionKeepsReSending", 24 * time.Hour, 2*time.Hour + 16*time.Minute, true},
		{"NeverPastALongRetention", 24 * time.Hour, 24 * time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.MayResend(a, tc.retention, a.StartedAt.Add(tc.after)); got != tc.want {
				t.Fatalf("MayResend(%s, +%s) = %v, want %v", tc.retention, tc.after, got, tc.want)
			}
		})
	}
}

func TestSameSentRequest(t *testing.T) {
	t.Parallel()
	a, _ := unknownAttempt(t).Attempt(1)
	if job.SameSentRequest(a, "2:abc") {
		t.Fatal("an attempt that recorded no digest is never re-sent")
	}
	a.RequestDigest = "2:abc"
	if !job.SameSentRequest(a, "2:abc") || job.SameSentRequest(a, "2:abd") || job.SameSentRequest(a, "") {
		t.Fatal("only the same digest is the same request")
	}
}

func TestLaunchRecordsTheRequestDigestInItsOwnWrite(t *testing.T) {
	t.Parallel()
	j := unknownAttempt(t)
	j.Attempts[0].State = job.AttemptFailed
	j.Attempts[0].Error = &job.Failure{Class: job.ClassRetryable, Message: "x"}
	t0 := j.Attempts[0].StartedAt
	tr, err := job.DecideLaunch(j, j.Attempts[0].Provider, t0.Add(time.Minute))
	if err != nil {
		t.Skipf("the fixture cannot launch again: %v", err)
	}
	tr = tr.WithSent("dev:"+j.ID+"/2", "2:feed")
	a, ok := tr.After().Attempt(tr.AttemptNumber())
	if !ok || a.RequestDigest != "2:feed" || a.SentKey() != "dev:"+j.ID+"/2" || a.State != job.AttemptRunning {
		t.Fatalf("attempt %+v", a)
	}
}

package dynamo_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// TestTheOutboxNeverDecidesWhetherAJobFits: a result near DynamoDB's item
// limit fits, or does not, alike for a job whose owner has no endpoint, one
// whose completion records its event, and one whose outbox is already
// full (review L4: the notice used to tip only notifying owners' results
// over 400 KB, which then read as a contract violation).
func TestTheOutboxNeverDecidesWhetherAJobFits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	completed := func(t *testing.T, notify, full bool, resultBytes int) job.Job {
		t.Helper()
		j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{"prompt":"x"}`),
			Providers: []string{"p1"}, Primary: "p1"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		j.Notify = notify
		for _, decide := range []func(job.Job) (job.Transition, error){
			func(j job.Job) (job.Transition, error) { return job.DecideStart(j, "p1", t0) },
			func(j job.Job) (job.Transition, error) { return job.DecideRunning(j, 1, t0) },
		} {
			tr, err := decide(j)
			if err != nil {
				t.Fatal(err)
			}
			j = tr.After()
		}
		if full {
			for i := range job.MaxOutbox - 1 {
				rec := &job.Recorded{Status: job.StatusUnknown, Attempts: i + 2}
				for k := range job.MaxRecordedOpen {
					rec.Open = append(rec.Open, job.AttemptMark{Number: i + 2 + k, State: job.AttemptUnknown, Class: job.ClassContractViolation})
				}
				j.Outbox = append(j.Outbox, job.Notice{ID: job.MessageID(j.ID, job.EventAttemptUnknown, i+2),
					Type: job.EventAttemptUnknown, At: t0, Attempt: i + 2, Recorded: rec})
			}
		}
		result := json.RawMessage(`{"text":"` + strings.Repeat("r", resultBytes) + `"}`)
		tr, err := job.DecideComplete(j, 1, result, "", t0)
		if err != nil {
			t.Fatal(err)
		}
		return tr.After()
	}
	fits := func(t *testing.T, j job.Job) bool {
		t.Helper()
		err := dynamo.CheckJobSize(j)
		var tooLarge *lifecycle.TooLargeError
		if err != nil && !errors.As(err, &tooLarge) {
			t.Fatalf("CheckJobSize: %v", err)
		}
		return err == nil
	}
	// The limit for a job without endpoints, found by bisection; then
	// every 7 bytes within 200 of it: a notice is about 150 bytes, so a
	// result its notice alone would tip over is among them.
	lo, hi := dynamo.MaxItemBytes-8<<10, dynamo.MaxItemBytes
	if !fits(t, completed(t, false, false, lo)) || fits(t, completed(t, false, false, hi)) {
		t.Fatalf("the limit is not between %d and %d result bytes", lo, hi)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(t, completed(t, false, false, mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	var sawFit, sawRefusal bool
	for n := lo - 200; n <= lo+200; n += 7 {
		plain := completed(t, false, false, n)
		told := completed(t, true, false, n)
		full := completed(t, true, true, n)
		if len(told.Outbox) != 1 || len(full.Outbox) != job.MaxOutbox || len(plain.Outbox) != 0 {
			t.Fatalf("outboxes %d, %d, %d", len(plain.Outbox), len(told.Outbox), len(full.Outbox))
		}
		p, o, f := fits(t, plain), fits(t, told), fits(t, full)
		if p != o || p != f {
			t.Fatalf("a %d-byte result fits: %v without endpoints, %v with its event, %v with a full outbox", n, p, o, f)
		}
		// What passes the check fits DynamoDB with every event recorded.
		if f && dynamo.JobItemSize(full) > dynamo.MaxItemBytes {
			t.Fatalf("a %d-byte result passed, but with a full outbox the item is %d bytes", n, dynamo.JobItemSize(full))
		}
		sawFit, sawRefusal = sawFit || p, sawRefusal || !p
	}
	if !sawFit || !sawRefusal {
		t.Fatalf("the sweep missed the limit (fit %v, refused %v)", sawFit, sawRefusal)
	}
}

package stack_test

import (
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/stepfn"
)

// TestAThrottledStartIsHandedToTheSweeper (issue 43 item 8): a create
// whose every StartExecution try is throttled hands its job to the sweeper
// function (an asynchronous invoke, as deployed), which tries again at
// once, through two more throttled calls, and starts it: on a stack whose
// sweep never runs, the job starts, once, and succeeds. It was left
// pending for the sweep (deployed: 30 to 90 s later).
func TestAThrottledStartIsHandedToTheSweeper(t *testing.T) {
	t.Parallel()
	s := ownStack(t, "throttled-start", stack.Config{}) // SweepInterval 0: no sweep
	ctx := t.Context()
	const throttled = stepfn.APIStartAttempts + 2
	if err := s.SFN.SetThrottle(ctx, sfnlocal.Throttle{First: throttled}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s, "throttled-start")
	j := c.submit("demo", "throttled-1", nil)
	c.await(j.ID, time.Minute, "succeeded", func(j apiclient.Job) bool { return j.Status == "succeeded" })
	if n, err := s.SFN.ThrottledStarts(ctx); err != nil || n != throttled {
		t.Fatalf("throttled starts = %d (%v), want the API's %d and the sweeper's 2", n, err, stepfn.APIStartAttempts)
	}
	logs := logsOf(s)
	for line, want := range map[string]int{
		`"msg":"execution_start_handed_off","job_id":"` + j.ID + `"`:        1,
		`"msg":"handoff_start_done","job_id":"` + j.ID + `","started":true`: 1,
		`"msg":"execution_started","job_id":"` + j.ID + `"`:                 1,
		`"msg":"execution_start_failed"`:                                    0,
	} {
		if got := strings.Count(logs, line); got != want {
			t.Errorf("%s logged %d times, want %d", line, got, want)
		}
	}
}

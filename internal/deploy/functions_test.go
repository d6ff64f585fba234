package deploy_test

import (
	"testing"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
)

// The sweeper's repairs of owners' counters assume what each function's
// timeout bounds (job.DecideCounts): a settling write's uncount comes
// within job.SettleGrace, and a create's or a held request's count is
// written or over within job.RecountQuiet: the api function's (a create,
// a held GET) and the stream function's (an open stream).
func TestFunctionTimeoutsBoundTheCounters(t *testing.T) {
	t.Parallel()
	for _, f := range deploy.Functions() {
		if f.Timeout > job.SettleGrace {
			t.Errorf("%s: timeout %s exceeds job.SettleGrace %s", f.Name, f.Timeout, job.SettleGrace)
		}
		if (f.Name == deploy.FnAPI || f.Name == deploy.FnStream) && f.Timeout >= job.RecountQuiet {
			t.Errorf("%s: timeout %s, not within job.RecountQuiet %s", f.Name, f.Timeout, job.RecountQuiet)
		}
	}
}

package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/job"
)

func TestUseLedgerCopy(t *testing.T) {
	t.Parallel()
	at := func(s job.AttemptState, ts time.Time) job.Attempt {
		return job.Attempt{JobID: "j", Number: 1, State: s, UpdatedAt: ts}
	}
	for _, c := range []struct {
		name         string
		ledger, item job.Attempt
		want         bool
	}{
		{"AsNewSameState", at(job.AttemptRunning, t1), at(job.AttemptRunning, t1), true},
		{"NewerSameState", at(job.AttemptRunning, t2), at(job.AttemptRunning, t1), true},
		{"OlderSameState", at(job.AttemptRunning, t0), at(job.AttemptRunning, t1), false},
		// The ledger lags: a crash between the job write and its mirror.
		{"OlderOtherState", at(job.AttemptStarting, t0), at(job.AttemptRunning, t1), false},
		{"AsNewOtherState", at(job.AttemptStarting, t1), at(job.AttemptRunning, t1), false},
		// The ledger is ahead of the job read: the job still decides.
		{"NewerOtherState", at(job.AttemptSucceeded, t2), at(job.AttemptRunning, t1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := useLedgerCopy(c.ledger, c.item); got != c.want {
				t.Errorf("useLedgerCopy(ledger %s@%s, item %s@%s) = %v, want %v", c.ledger.State,
					c.ledger.UpdatedAt.Format(time.TimeOnly), c.item.State, c.item.UpdatedAt.Format(time.TimeOnly), got, c.want)
			}
		})
	}
}

func TestListAttemptsMergesByUseLedgerCopy(t *testing.T) {
	t.Parallel()
	a := func(n int, s job.AttemptState, ts time.Time, req string) job.Attempt {
		return job.Attempt{JobID: "j", Number: n, Provider: "p", State: s, StartedAt: t0, UpdatedAt: ts, ProviderRequestID: req}
	}
	j := job.Job{ID: "j", Attempts: []job.Attempt{
		a(1, job.AttemptFailed, t1, "item"),   // the ledger agrees: its copy is returned
		a(2, job.AttemptRunning, t2, "item"),  // the ledger lags: the item's copy
		a(3, job.AttemptStarting, t3, "item"), // not in the ledger: the item's copy
	}}
	ledger := []job.Attempt{a(1, job.AttemptFailed, t1, "ledger"), a(2, job.AttemptStarting, t1, "ledger")}
	r := &recorder{onQuery: func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		out := &dynamodb.QueryOutput{}
		for _, l := range ledger {
			out.Items = append(out.Items, ledgerItem(l, 1, 0))
		}
		return out, nil
	}}
	got, err := r.store().ListAttempts(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ledger", "item", "item"}
	if len(got) != len(want) {
		t.Fatalf("got %d attempts, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.Number != i+1 || g.ProviderRequestID != want[i] {
			t.Errorf("attempt %d: number %d from the %s, want the %s's copy", i+1, g.Number, g.ProviderRequestID, want[i])
		}
	}
	if in := r.calls[0].(*dynamodb.QueryInput); in.ConsistentRead == nil || !*in.ConsistentRead {
		t.Error("the ledger is not read consistently")
	}
}

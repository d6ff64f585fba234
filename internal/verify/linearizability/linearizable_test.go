package linearizability_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/faultproxy"
	"github.com/onejob/onejob/internal/verify/linearizability"
)

// TestLinearizableUnderFaults records concurrent creates, replays,
// conflicting creates, gets and completes through the fault proxy and
// checks the history against the job contract. ONEJOB_LIN_OPS (default 300),
// ONEJOB_LIN_SEED and ONEJOB_LIN_RATE (percent, default 10) scale it; `make
// lincheck-long` runs 20000 operations. On a violation the porcupine
// picture is written to a temp file named in the failure.
//
// A create retried by the SDK after its write applied must still report
// created (the store recognises its own write token), so the model holds
// every create to the contract.
func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	ops := testenv.EnvInt(t, "ONEJOB_LIN_OPS", 300)
	seed := uint64(testenv.EnvInt(t, "ONEJOB_LIN_SEED", 11))
	rate := float64(testenv.EnvInt(t, "ONEJOB_LIN_RATE", 10)) / 100
	_, names := harness.Tables(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ops)*50*time.Millisecond+time.Minute)
	defer cancel()
	proxy, err := faultproxy.Start(ctx, faultproxy.Config{Target: harness.Endpoint(t), Rate: rate, Seed: seed,
		Latency: 25 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	obs := &faultproxy.Observer{}
	eng := func(maxAttempts int) *lifecycle.Engine {
		db := dynalite.NewClient(proxy.URL(), faultproxy.ClientOptions(maxAttempts, obs))
		return newEngine(t, db, names)
	}
	began := time.Now()
	history, stats, err := linearizability.Run(ctx, linearizability.Config{
		Patient: eng(10), Impatient: eng(1), Ops: ops, Keys: 10, Seed: seed,
	})
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	ran := time.Since(began)
	opts := linearizability.Options{}
	began = time.Now()
	res, info := linearizability.Check(history, opts, 10*time.Minute)
	checked := time.Since(began)
	sdk := obs.Stats()
	t.Logf("ops=%d keys=%d ambiguous=%d sdk_retried_creates=%d outcomes=%v", stats.Ops, stats.Keys, stats.Ambiguous,
		stats.RetriedCreates, stats.Outcomes)
	t.Logf("proxy: %s", proxy.Stats())
	t.Logf("sdk: operations=%d attempts=%d retries=%d ambiguous_attempts=%d throttled=%d",
		sdk.Operations, sdk.Attempts, sdk.Retries, sdk.Ambiguous, sdk.Throttled)
	t.Logf("porcupine: %s in %s (workload %s)", res, checked.Round(time.Millisecond), ran.Round(time.Millisecond))
	if res != porcupine.Ok {
		path, err := linearizability.Visualize("", opts, info)
		t.Fatalf("history is %s against the job contract; picture: %s (%v)\n%s", res, path, err,
			strings.Join(linearizability.Explain(history, opts, 3), "\n"))
	}
	if stats.Ambiguous == 0 {
		t.Errorf("no call failed with an unknown outcome: the run did not exercise ambiguity")
	}
}

func newEngine(t *testing.T, db *dynamodb.Client, names dynamo.TableNames) *lifecycle.Engine {
	t.Helper()
	st, err := dynamo.New(dynamo.Config{Client: db, Tables: names})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

package rie

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// warmEvents is the event each deployed function is soaked with; a new
// function without one fails the test.
var warmEvents = map[string]string{
	"api":     "api-create-job.json",
	"run":     "run.json",
	"hold":    "hold.json",
	"sweeper": "sweeper.json",
	"notify":  "notify.json",
	"events":  "events-provider-event.json",
	// With a token of the test's issuer (warmStream): the keys fetched
	// once, the job read and the hold counted on every invocation.
	"stream": "stream-no-token.json",
}

// Every deployed function builds its SDK clients once per sandbox and
// reuses their connections: ten invocations of a warm sandbox open a few
// connections in all, not one or more per invocation, as a client built in
// the handler would.
func TestWarmFunctionsReuseConnections(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	l, err := Start(ctx, Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	const times = 10
	for _, spec := range deploy.Functions() {
		t.Run(spec.Name, func(t *testing.T) {
			file, ok := warmEvents[spec.Name]
			if !ok {
				t.Fatalf("no event for %s in warmEvents", spec.Name)
			}
			event, err := os.ReadFile(filepath.Join(root, "events", file))
			if err != nil {
				t.Fatal(err)
			}
			var env map[string]string
			if spec.Name == deploy.FnStream {
				is := newTestIssuer(t)
				event, env = streamEvent(t, root, is.token(t, SeedOwner, "k1", time.Now().Add(time.Hour)), 0), is.env
				defer func() {
					// The issuer's keys are fetched once per sandbox.
					if n := is.fetches.Load(); n != 1 {
						t.Errorf("%d key-set fetches for %d warm invocations, want 1", n, times)
					}
				}()
			}
			res, err := l.InvokeWarmEnv(ctx, spec.Name, event, times, env)
			if err != nil {
				t.Fatal(err)
			}
			if res.Response.Status != 200 {
				t.Fatalf("RIE %d: %s\n%s", res.Response.Status, res.Response.Body, res.Logs)
			}
			// A client built per invocation opens at least one connection
			// per invocation; a pooled one opens a few in all, more only
			// when a call starts before the last one's connection is back
			// in the pool (net/http returns it asynchronously), which a
			// busy machine makes likelier.
			if res.Connections >= times {
				t.Fatalf("%d warm invocations opened %d connections to AWS endpoints, want fewer than one per invocation (one client per sandbox)",
					times, res.Connections)
			}
		})
	}
}

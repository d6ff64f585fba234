package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestBatchConformance runs the batch suite against the Message Batches
// API's strict simulator (each request's params held to the Messages API's
// rules).
func TestBatchConformance(t *testing.T) {
	t.Parallel()
	providertest.RunBatches(t, providertest.BatchHarness{
		Start: func(t *testing.T, opts sim.BatchOptions) (providertest.BatchSim, http.Handler) {
			s, err := sim.NewMessageBatches(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s, s.Handler()
		},
		New: func(t *testing.T, env providertest.Env, model string) provider.Batcher {
			a, err := anthropic.New(anthropic.Config{Name: "anthropic-batch", BaseURL: env.BaseURL, Model: model, APIKey: env.APIKey,
				Logger: env.Logger, Now: env.Now})
			if err != nil {
				t.Fatal(err)
			}
			return a
		},
	})
}

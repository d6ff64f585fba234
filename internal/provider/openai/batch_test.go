package openai_test

import (
	"net/http"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestBatchConformance runs the batch suite against the Batch API's
// strict simulator (Files and Batches, each line held to Chat Completions'
// rules).
func TestBatchConformance(t *testing.T) {
	t.Parallel()
	providertest.RunBatches(t, providertest.BatchHarness{
		Start: func(t *testing.T, opts sim.BatchOptions) (providertest.BatchSim, http.Handler) {
			s, err := sim.NewOpenAIBatch(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s, s.Handler()
		},
		New: func(t *testing.T, env providertest.Env, model string) provider.Batcher {
			a, err := openai.New(openai.Config{Name: "openai-batch", BaseURL: env.BaseURL + "/v1", Model: model, APIKey: env.APIKey,
				Logger: env.Logger, Now: env.Now})
			if err != nil {
				t.Fatal(err)
			}
			return a
		},
	})
}

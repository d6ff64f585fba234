package stack

import (
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
)

// startBatchSim serves the batch demo providers (sim-batch-openai,
// sim-batch-anthropic, and sim-flex beside them), moving their batches
// along every 50 ms, and returns their URL and the secret source that also
// knows their API key.
func (s *Stack) startBatchSim(cfg Config, secrets provider.SecretSource) (string, provider.SecretSource, error) {
	var err error
	s.BatchSim, err = sim.StartDemoBatch(sim.DemoBatchOptions{Speed: cfg.BatchSpeed, ProcessingTime: cfg.BatchWork})
	if err != nil {
		return "", nil, err
	}
	s.closers = append(s.closers, func() error { s.BatchSim.Close(); return nil })
	done := make(chan struct{})
	s.closers = append(s.closers, func() error { close(done); return nil })
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.BatchSim.Step()
			}
		}
	}()
	return s.BatchSim.URL(), withSecret{next: secrets, ref: sim.DemoBatchKeyRef, value: provider.Secret(sim.DemoBatchKey)}, nil
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// baseline is the per-job figures of the layout before the current one
// (bench/baseline.json), which the per-job and cost tables compare against.
type baseline struct {
	Layout   string                      `json:"layout"`
	Measured string                      `json:"measured"`
	PerJob   map[string]baselineScenario `json:"per_job"`
}

type baselineScenario struct {
	StateTransitions  float64 `json:"state_transitions"`
	DynamoRequests    float64 `json:"dynamodb_requests"`
	LambdaInvocations float64 `json:"lambda_invocations"`
	CostPerMillion    float64 `json:"cost_per_million_usd"`
}

func loadBaseline(root string) (*baseline, error) {
	b, err := os.ReadFile(filepath.Join(root, "bench", "baseline.json"))
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	var out baseline
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return &out, nil
}

// change prints now against was: "was → now (×ratio)", or "-" without a
// baseline.
func change(was, now float64) string {
	if was == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g → %.4g (×%.2f)", was, now, now/was)
}

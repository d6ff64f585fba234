package apiclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Job is the part of a job's representation (GET /v1/jobs/{id}) that the
// tests, the bench and the drills check.
type Job struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Version     int64           `json:"version"`
	CompletedBy int             `json:"completed_by"`
	Result      json.RawMessage `json:"result"`
	Attempts    []Attempt       `json:"attempts"`
	Error       json.RawMessage `json:"error"`
	// StreamURL is where the job's stream is read.
	StreamURL string `json:"stream_url"`
	// Waiting says why a job with no attempt open waits (its reason).
	Waiting *struct {
		Reason string `json:"reason"`
	} `json:"waiting"`
}

// Attempt is one entry of Job.Attempts.
type Attempt struct {
	Number   int             `json:"number"`
	Provider string          `json:"provider"`
	State    string          `json:"state"`
	Hedge    bool            `json:"hedge"`
	Error    json.RawMessage `json:"error"`
	// UnknownSince is when it became unknown (GET /v1/jobs/{id}/attempts);
	// FinishedAt when it ended; zero: never, not yet.
	UnknownSince time.Time `json:"unknown_since"`
	FinishedAt   time.Time `json:"finished_at"`
	// Resolution says who settled an unknown attempt out of band (in
	// GET /v1/jobs/{id}/attempts): "reconciler", or an operator.
	Resolution *struct {
		Outcome string `json:"outcome"`
		By      string `json:"by"`
	} `json:"resolution"`
}

// Terminal reports a job that reached its outcome.
func (j Job) Terminal() bool {
	return j.Status == "succeeded" || j.Status == "failed" || j.Status == "cancelled"
}

// Settled means terminal with no attempt still open.
func (j Job) Settled() bool {
	if !j.Terminal() {
		return false
	}
	for _, a := range j.Attempts {
		if a.State == "starting" || a.State == "running" || a.State == "unknown" {
			return false
		}
	}
	return true
}

// States lists the attempts as number:provider:state, comma-separated.
func (j Job) States() string {
	parts := make([]string, 0, len(j.Attempts))
	for _, a := range j.Attempts {
		parts = append(parts, fmt.Sprintf("%d:%s:%s", a.Number, a.Provider, a.State))
	}
	return strings.Join(parts, ",")
}

// ResultProvider is which simulated provider produced the result (the
// simulators put their name in it).
func (j Job) ResultProvider() string {
	var r struct {
		Provider string `json:"provider"`
	}
	_ = json.Unmarshal(j.Result, &r)
	return r.Provider
}

package apigw

import (
	"encoding/json"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The wire representations: snake_case, RFC 3339 times in UTC, optional
// members omitted rather than null. openapi.yaml describes them.

type failureView struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

type attemptSummaryView struct {
	Number     int          `json:"number"`
	Provider   string       `json:"provider"`
	State      string       `json:"state"`
	StartedAt  string       `json:"started_at"`
	FinishedAt string       `json:"finished_at,omitempty"`
	Error      *failureView `json:"error,omitempty"`
}

type attemptView struct {
	attemptSummaryView
	Hedge             bool   `json:"hedge"`
	ProviderRequestID string `json:"provider_request_id,omitempty"`
	Outcome           string `json:"outcome,omitempty"`
	UnknownSince      string `json:"unknown_since,omitempty"`
}

type jobBody struct {
	ID          string               `json:"id"`
	Type        string               `json:"type"`
	Status      string               `json:"status"`
	Input       json.RawMessage      `json:"input"`
	Providers   []string             `json:"providers"`
	CreatedAt   string               `json:"created_at"`
	UpdatedAt   string               `json:"updated_at"`
	Version     int64                `json:"version"`
	Attempts    []attemptSummaryView `json:"attempts"`
	Result      json.RawMessage      `json:"result,omitempty"`
	CompletedBy int                  `json:"completed_by,omitempty"`
	Error       *failureView         `json:"error,omitempty"`
}

type attemptsBody struct {
	JobID    string        `json:"job_id"`
	Attempts []attemptView `json:"attempts"`
}

type listBody struct {
	Jobs       []jobBody `json:"jobs"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

func timeView(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func failView(f *job.Failure) *failureView {
	if f == nil {
		return nil
	}
	return &failureView{Class: string(f.Class), Message: f.Message}
}

func summaryView(a job.Attempt) attemptSummaryView {
	return attemptSummaryView{
		Number:     a.Number,
		Provider:   a.Provider,
		State:      string(a.State),
		StartedAt:  timeView(a.StartedAt),
		FinishedAt: timeView(a.FinishedAt),
		Error:      failView(a.Error),
	}
}

func jobView(j job.Job) jobBody {
	input := j.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	v := jobBody{
		ID:          j.ID,
		Type:        j.Type,
		Status:      string(j.Status),
		Input:       input,
		Providers:   append([]string{}, j.Providers...),
		CreatedAt:   timeView(j.CreatedAt),
		UpdatedAt:   timeView(j.UpdatedAt),
		Version:     j.Version,
		Attempts:    make([]attemptSummaryView, 0, len(j.Attempts)),
		CompletedBy: j.CompletedBy,
		Error:       failView(j.Error),
	}
	if len(j.Result) > 0 {
		v.Result = j.Result
	}
	for _, a := range j.Attempts {
		v.Attempts = append(v.Attempts, summaryView(a))
	}
	return v
}

func attemptsView(jobID string, attempts []job.Attempt) attemptsBody {
	v := attemptsBody{JobID: jobID, Attempts: make([]attemptView, 0, len(attempts))}
	for _, a := range attempts {
		v.Attempts = append(v.Attempts, attemptView{
			attemptSummaryView: summaryView(a),
			Hedge:              a.Hedge,
			ProviderRequestID:  a.ProviderRequestID,
			Outcome:            a.Outcome,
			UnknownSince:       timeView(a.UnknownSince),
		})
	}
	return v
}

func listView(p lifecycle.Page) listBody {
	v := listBody{Jobs: make([]jobBody, 0, len(p.Jobs)), NextCursor: p.Next}
	for _, j := range p.Jobs {
		v.Jobs = append(v.Jobs, jobView(j))
	}
	return v
}

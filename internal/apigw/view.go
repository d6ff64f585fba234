package apigw

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The wire representations: snake_case, RFC 3339 times in UTC, optional
// members omitted rather than null. openapi.yaml describes them.

// A view is an owner's or an operator's (viewer.admin): an owner sees each
// failure's stable class and a short message for it; the provider's own
// text, status and request ID — which can name accounts, keys or internal
// endpoints — only an operator sees.
type viewer struct {
	admin bool
	// streamBase is where the deployment serves jobs' streams (StreamURL);
	// empty: views carry no stream_url.
	streamBase string
}

type failureView struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	// Operators only.
	ProviderMessage string `json:"provider_message,omitempty"`
	ProviderStatus  int    `json:"provider_status,omitempty"`
}

type usageView struct {
	Model        string `json:"model,omitempty"`
	InputTokens  int    `json:"input_tokens"`
	OutputTokens int    `json:"output_tokens"`
	LatencyMS    int64  `json:"latency_ms"`
}

// jobUsageView sums a job's attempts, the discarded and losing ones too:
// each was paid for.
type jobUsageView struct {
	InputTokens  int   `json:"input_tokens"`
	OutputTokens int   `json:"output_tokens"`
	LatencyMS    int64 `json:"latency_ms"`
	Attempts     int   `json:"attempts"`
}

type resolutionView struct {
	Outcome string `json:"outcome"`
	At      string `json:"at"`
	// By is "reconciler" for an automatic settlement (shown to owners
	// too); an operator's subject only to operators.
	By string `json:"by,omitempty"`
	// Reason is the operator's, or the provider's evidence: operators only.
	Reason string `json:"reason,omitempty"`
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
	Hedge        bool            `json:"hedge"`
	Outcome      string          `json:"outcome,omitempty"`
	UnknownSince string          `json:"unknown_since,omitempty"`
	Usage        *usageView      `json:"usage,omitempty"`
	Spend        *spendView      `json:"spend,omitempty"`
	Resolution   *resolutionView `json:"resolution,omitempty"`
	// Operators only.
	ProviderRequestID string      `json:"provider_request_id,omitempty"`
	Remote            *remoteView `json:"remote,omitempty"`
}

// remoteView is an asynchronous attempt's work at its provider (job.Remote),
// for operators.
type remoteView struct {
	ID                string `json:"id"`
	Status            string `json:"status,omitempty"`
	Tier              string `json:"tier"`
	SubmittedAt       string `json:"submitted_at"`
	HeardAt           string `json:"heard_at"`
	NextPollAt        string `json:"next_poll_at"`
	Polls             int    `json:"polls"`
	Found             bool   `json:"found"`
	CancelRequestedAt string `json:"cancel_requested_at,omitempty"`
	Deadline          string `json:"deadline,omitempty"`
	// Batch and Line name a batch line's batch (onejob's) and its line's
	// custom_id; ID is then the provider's batch, once its end came.
	Batch string `json:"batch,omitempty"`
	Line  string `json:"line,omitempty"`
}

// spendView is what a budgeted attempt set aside and, once it ended, what
// it cost and how that was known (job.SpendOf).
type spendView struct {
	ReservedUSD  string `json:"reserved_usd"`
	PriceVersion string `json:"price_version"`
	CostUSD      string `json:"cost_usd,omitempty"`
	Source       string `json:"source,omitempty"`
}

type jobBody struct {
	ID           string               `json:"id"`
	Owner        string               `json:"owner,omitempty"` // operators only
	Type         string               `json:"type"`
	Status       string               `json:"status"`
	Input        json.RawMessage      `json:"input,omitempty"` // never in listings
	Providers    []string             `json:"providers"`
	CreatedAt    string               `json:"created_at"`
	UpdatedAt    string               `json:"updated_at"`
	Version      int64                `json:"version"`
	Attempts     []attemptSummaryView `json:"attempts"`
	Tier         string               `json:"tier,omitempty"` // absent: now
	Usage        *jobUsageView        `json:"usage,omitempty"`
	Result       json.RawMessage      `json:"result,omitempty"`
	CompletedBy  int                  `json:"completed_by,omitempty"`
	Error        *failureView         `json:"error,omitempty"`
	Cancellation *cancellationView    `json:"cancellation,omitempty"`
	Waiting      *waitingView         `json:"waiting,omitempty"`
	Stream       bool                 `json:"stream,omitempty"`
	StreamURL    string               `json:"stream_url,omitempty"`
}

type cancellationView struct {
	At string `json:"at"`
	// By is the canceller's subject: to its owner, only when they
	// cancelled it themselves; to operators, always.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
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

// classMessage is what an owner reads for a failure class.
func classMessage(c job.Class) string {
	switch c {
	case job.ClassRetryable:
		return "the provider failed to answer"
	case job.ClassNonRetryable:
		return "the request was refused"
	case job.ClassAmbiguous:
		return "the provider did not answer in time; its outcome is unknown"
	case job.ClassContractViolation:
		return "the provider's answer did not meet the job type's contract"
	case job.ClassUncertified:
		return "no provider certified for this job type was left to try"
	case job.ClassResolved:
		return "settled by an operator"
	case job.ClassUnavailable:
		return "no provider took the job in time: their circuit breakers stayed open"
	case job.ClassRateLimited:
		return "the provider was at its rate limit and did not act on the request"
	case job.ClassSettled:
		return "settled automatically: the provider has no trace of the request, or its deadline passed"
	}
	return "the attempt failed"
}

func (v viewer) failure(f *job.Failure) *failureView {
	if f == nil {
		return nil
	}
	out := &failureView{Class: string(f.Class), Message: classMessage(f.Class)}
	if v.admin {
		out.ProviderMessage, out.ProviderStatus = f.Message, f.ProviderStatus
	}
	return out
}

func (v viewer) summary(a job.Attempt) attemptSummaryView {
	return attemptSummaryView{
		Number:     a.Number,
		Provider:   a.Provider,
		State:      string(a.State),
		StartedAt:  timeView(a.StartedAt),
		FinishedAt: timeView(a.FinishedAt),
		Error:      v.failure(a.Error),
	}
}

func (v viewer) job(j job.Job) jobBody {
	input := j.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	out := jobBody{
		ID:          j.ID,
		Type:        j.Type,
		Status:      string(j.Status),
		Input:       input,
		Providers:   append([]string{}, j.Providers...),
		CreatedAt:   timeView(j.CreatedAt),
		UpdatedAt:   timeView(j.UpdatedAt),
		Version:     j.Version,
		Tier:        string(j.Tier),
		Attempts:    make([]attemptSummaryView, 0, len(j.Attempts)),
		CompletedBy: j.CompletedBy,
		Error:       v.failure(j.Error),
		Waiting:     v.waitingOf(j),
		Stream:      j.Stream,
	}
	if v.streamBase != "" {
		out.StreamURL = StreamURL(v.streamBase, j.ID)
	}
	if v.admin {
		out.Owner = j.Owner
	}
	if c := j.Cancellation; c != nil {
		out.Cancellation = &cancellationView{At: timeView(c.At)}
		if v.admin || c.By == j.Owner {
			out.Cancellation.By, out.Cancellation.Reason = c.By, c.Reason
		}
	}
	if len(j.Result) > 0 {
		out.Result = j.Result
	}
	var use jobUsageView
	for _, a := range j.Attempts {
		out.Attempts = append(out.Attempts, v.summary(a))
		if a.Usage != nil {
			use.InputTokens += a.Usage.InputTokens
			use.OutputTokens += a.Usage.OutputTokens
			use.LatencyMS += a.Usage.Latency.Milliseconds()
			use.Attempts++
		}
	}
	if use.Attempts > 0 {
		out.Usage = &use
	}
	return out
}

func (v viewer) attempts(jobID string, attempts []job.Attempt) attemptsBody {
	out := attemptsBody{JobID: jobID, Attempts: make([]attemptView, 0, len(attempts))}
	for _, a := range attempts {
		av := attemptView{
			attemptSummaryView: v.summary(a),
			Hedge:              a.Hedge,
			Outcome:            a.Outcome,
			UnknownSince:       timeView(a.UnknownSince),
		}
		if u := a.Usage; u != nil {
			av.Usage = &usageView{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, LatencyMS: u.Latency.Milliseconds()}
		}
		if s := a.Spend; s != nil {
			av.Spend = &spendView{ReservedUSD: s.Reserved.USD(), PriceVersion: s.Price.Version}
			if !a.State.Open() {
				cost, source := job.SpendOf(a)
				av.Spend.CostUSD, av.Spend.Source = cost.USD(), string(source)
			}
		}
		if r := a.Resolution; r != nil {
			av.Resolution = &resolutionView{Outcome: string(r.Outcome), At: timeView(r.At)}
			if v.admin || r.By == job.Reconciler {
				av.Resolution.By = r.By
			}
			if v.admin {
				av.Resolution.Reason = r.Reason
			}
		}
		if v.admin {
			av.ProviderRequestID = a.ProviderRequestID
			if r := a.Remote; r != nil {
				av.Remote = &remoteView{ID: r.ID, Status: r.Status, Tier: string(r.Tier), SubmittedAt: timeView(r.SubmittedAt),
					HeardAt: timeView(r.HeardAt), NextPollAt: timeView(r.NextPollAt), Polls: r.Polls, Found: r.Found,
					CancelRequestedAt: timeView(r.CancelAt), Deadline: timeView(r.Deadline),
					Batch: r.Batch, Line: r.Line}
			}
		} else if a.Resolution != nil {
			// "resolved: <reason>" is the operator's text.
			av.Outcome = "resolved"
		}
		out.Attempts = append(out.Attempts, av)
	}
	return out
}

// list is a page of jobs without their inputs: an input may be 256 KiB, so
// a page of them could outgrow what a Lambda may answer; a job's own GET
// carries it.
func (v viewer) list(p lifecycle.Page) listBody {
	out := listBody{Jobs: make([]jobBody, 0, len(p.Jobs)), NextCursor: p.Next}
	for _, j := range p.Jobs {
		b := v.job(j)
		b.Input = nil
		out.Jobs = append(out.Jobs, b)
	}
	return out
}

// StreamURL is where job id's stream is read, under a deployment's stream
// base (Config.StreamBase): every job has one, streamed or not.
func StreamURL(base, id string) string { return base + "/v1/jobs/" + id + "/stream" }

// streamBase checks a stream base URL and returns it without a trailing
// slash: an absolute https URL (a function URL), or http on loopback (a
// local stack), with no user, query or fragment; "" is none.
func streamBase(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	bad := func(why string) error { return fmt.Errorf("apigw: stream base %q %s", s, why) }
	switch {
	case err != nil || u.Host == "":
		return "", bad("is not an absolute URL")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", bad("may not carry a user, a query or a fragment")
	case u.Scheme == "https":
	case u.Scheme == "http" && loopbackName(u.Hostname()):
	default:
		return "", bad("must be https (or http on 127.0.0.1, localhost or ::1)")
	}
	return strings.TrimRight(s, "/"), nil
}

// loopbackName reports whether a URL's host names this machine.
func loopbackName(host string) bool {
	switch strings.ToLower(host) {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

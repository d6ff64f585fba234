package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The API's representations as the CLI reads them (internal/apigw/view.go
// and openapi.yaml are the source). Members the CLI does not know are
// ignored and absent ones are omitted from the output, so an older or newer
// API reads fine; --json prints the API's own bytes instead.

type failureView struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	// Operators see what the provider said.
	ProviderMessage string          `json:"provider_message"`
	ProviderStatus  json.RawMessage `json:"provider_status"`
}

type usageView struct {
	Model        string      `json:"model"`
	InputTokens  json.Number `json:"input_tokens"`
	OutputTokens json.Number `json:"output_tokens"`
	LatencyMS    json.Number `json:"latency_ms"`
	Attempts     json.Number `json:"attempts"`
}

type resolutionView struct {
	By      string `json:"by"`
	At      string `json:"at"`
	Reason  string `json:"reason"`
	Outcome string `json:"outcome"`
}

type attemptSummaryView struct {
	Number     int          `json:"number"`
	Provider   string       `json:"provider"`
	State      string       `json:"state"`
	StartedAt  string       `json:"started_at"`
	FinishedAt string       `json:"finished_at"`
	Error      *failureView `json:"error"`
}

type attemptView struct {
	attemptSummaryView
	Hedge             bool            `json:"hedge"`
	ProviderRequestID string          `json:"provider_request_id"`
	Outcome           string          `json:"outcome"`
	UnknownSince      string          `json:"unknown_since"`
	Usage             *usageView      `json:"usage"`
	Resolution        *resolutionView `json:"resolution"`
	Remote            *remoteView     `json:"remote"`
}

// remoteView is an asynchronous attempt's work at its provider (operators).
type remoteView struct {
	ID                string `json:"id"`
	Status            string `json:"status"`
	Tier              string `json:"tier"`
	HeardAt           string `json:"heard_at"`
	NextPollAt        string `json:"next_poll_at"`
	Polls             int    `json:"polls"`
	Found             bool   `json:"found"`
	CancelRequestedAt string `json:"cancel_requested_at"`
}

// remoteText says where an asynchronous attempt's work stands: its id and
// status at the provider, when onejob last heard of it and when it asks
// next.
func remoteText(r *remoteView, open bool) string {
	if r == nil {
		return ""
	}
	parts := []string{r.ID}
	if r.Status != "" {
		parts = append(parts, r.Status)
	}
	parts = append(parts, "tier "+r.Tier, "heard "+r.HeardAt)
	switch {
	case r.CancelRequestedAt != "":
		parts = append(parts, "cancel asked "+r.CancelRequestedAt)
	case open:
		parts = append(parts, "asks next "+r.NextPollAt)
	}
	parts = append(parts, strconv.Itoa(r.Polls)+" polls")
	if r.Found {
		parts = append(parts, "found after a lost submit")
	}
	return strings.Join(parts, ", ")
}

type jobView struct {
	ID          string               `json:"id"`
	Owner       string               `json:"owner"`
	Type        string               `json:"type"`
	Status      string               `json:"status"`
	Providers   []string             `json:"providers"`
	CreatedAt   string               `json:"created_at"`
	UpdatedAt   string               `json:"updated_at"`
	Attempts    []attemptSummaryView `json:"attempts"`
	Tier        string               `json:"tier"`
	Result      json.RawMessage      `json:"result"`
	CompletedBy int                  `json:"completed_by"`
	Error       *failureView         `json:"error"`
	Usage       *usageView           `json:"usage"`
	// StreamURL is where the job's stream is read (watch --stream).
	StreamURL string `json:"stream_url"`
}

type attemptsBody struct {
	JobID    string        `json:"job_id"`
	Attempts []attemptView `json:"attempts"`
}

type listBody struct {
	Jobs       []jobView `json:"jobs"`
	NextCursor string    `json:"next_cursor"`
}

// terminalStatus reports whether a job status is an end (openapi.yaml's
// JobStatus: pending, running and unknown are open).
func terminalStatus(s string) bool {
	return s == "succeeded" || s == "failed" || s == "cancelled"
}

// timeline is a job's attempts in order, e.g.
// "#1 sim-primary failed(retryable) → #2 sim-fallback running".
func timeline(attempts []attemptSummaryView) string {
	if len(attempts) == 0 {
		return "no attempts yet"
	}
	parts := make([]string, 0, len(attempts))
	for _, a := range attempts {
		s := fmt.Sprintf("#%d %s %s", a.Number, a.Provider, a.State)
		// A succeeded attempt may still carry the error that made it
		// unknown on its way; its success is what counts.
		if a.Error != nil && a.Error.Class != "" && a.State != "succeeded" {
			s += "(" + a.Error.Class + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " → ")
}

// statusLine is the job's status and its attempt timeline: what `watch`
// prints on every change.
func statusLine(j jobView) string { return j.Status + "  " + timeline(j.Attempts) }

// usageText is a usage summary, or "" when the API sent none.
func usageText(u *usageView) string {
	if u == nil {
		return ""
	}
	var parts []string
	if u.Model != "" {
		parts = append(parts, "model "+u.Model)
	}
	if u.InputTokens != "" || u.OutputTokens != "" {
		parts = append(parts, fmt.Sprintf("%s in / %s out tokens", orDash(string(u.InputTokens)), orDash(string(u.OutputTokens))))
	}
	if u.LatencyMS != "" {
		parts = append(parts, string(u.LatencyMS)+" ms")
	}
	if u.Attempts != "" {
		parts = append(parts, plural(string(u.Attempts), "attempt"))
	}
	return strings.Join(parts, ", ")
}

func plural(n, word string) string {
	if n == "1" {
		return n + " " + word
	}
	return n + " " + word + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// failureText is "class: message".
func failureText(f *failureView) string {
	if f == nil {
		return ""
	}
	return oneLine(strings.TrimPrefix(f.Class+": "+f.Message, ": "))
}

// providerText is what the provider said about a failure (operators only).
func providerText(f *failureView) string {
	if f == nil {
		return ""
	}
	var parts []string
	if st := strings.Trim(string(f.ProviderStatus), `"`); st != "" && st != "null" {
		parts = append(parts, "status "+oneLine(st))
	}
	if f.ProviderMessage != "" {
		parts = append(parts, `"`+oneLine(f.ProviderMessage)+`"`)
	}
	return strings.Join(parts, ", ")
}

// resolutionText is how an operator settled an attempt.
func resolutionText(r *resolutionView) string {
	if r == nil {
		return ""
	}
	s := orDash(r.Outcome)
	if r.By != "" {
		s += " by " + r.By
	}
	if r.At != "" {
		s += " at " + r.At
	}
	if r.Reason != "" {
		s += ": " + oneLine(r.Reason)
	}
	return s
}

// writeJob prints one job as a heading and its members, one per line.
func writeJob(out io.Writer, j jobView) error {
	fmt.Fprintf(out, "%s  %s  %s\n", j.ID, j.Type, j.Status)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "  %s\t%s\n", k, v)
		}
	}
	row("owner", j.Owner)
	row("attempts", timeline(j.Attempts))
	row("providers", strings.Join(j.Providers, ", "))
	row("tier", j.Tier)
	row("created", j.CreatedAt)
	row("updated", j.UpdatedAt)
	if len(j.Result) > 0 {
		row("result", compactJSON(j.Result))
	}
	if j.CompletedBy > 0 {
		row("completed by", fmt.Sprintf("attempt %d", j.CompletedBy))
	}
	row("error", failureText(j.Error))
	row("usage", usageText(j.Usage))
	return w.Flush()
}

// writeAttempts prints each attempt on a line (number, provider, state and
// notes, aligned), and what more is known of it (its error, usage,
// resolution, the provider's words) on indented lines below.
func writeAttempts(out io.Writer, indent string, attempts []attemptView) error {
	if len(attempts) == 0 {
		_, err := fmt.Fprintln(out, indent+"no attempts yet")
		return err
	}
	var numW, provW, stateW int
	for _, a := range attempts {
		numW = max(numW, len(strconv.Itoa(a.Number))+1)
		provW = max(provW, len(a.Provider))
		stateW = max(stateW, len(a.State))
	}
	var b strings.Builder
	for _, a := range attempts {
		var notes []string
		if a.Hedge {
			notes = append(notes, "hedge")
		}
		if a.Outcome != "" {
			notes = append(notes, oneLine(a.Outcome))
		}
		if d := took(a.StartedAt, a.FinishedAt); d != "" {
			notes = append(notes, "took "+d)
		}
		line := fmt.Sprintf("%s%-*s  %-*s  %-*s  %s", indent, numW, "#"+strconv.Itoa(a.Number), provW, a.Provider,
			stateW, a.State, strings.Join(notes, ", "))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		detail := func(k, v string) {
			if v != "" {
				fmt.Fprintf(&b, "%s%*s  %-10s  %s\n", indent, numW, "", k, v)
			}
		}
		detail("error", failureText(a.Error))
		detail("provider", providerText(a.Error))
		detail("request", a.ProviderRequestID)
		detail("remote", remoteText(a.Remote, a.FinishedAt == ""))
		detail("started", a.StartedAt)
		detail("unknown", a.UnknownSince)
		detail("usage", usageText(a.Usage))
		detail("resolution", resolutionText(a.Resolution))
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// took is how long an attempt ran, when both ends are known.
func took(start, end string) string {
	s, err1 := time.Parse(time.RFC3339Nano, start)
	e, err2 := time.Parse(time.RFC3339Nano, end)
	if err1 != nil || err2 != nil || e.Before(s) {
		return ""
	}
	return e.Sub(s).Round(time.Millisecond).String()
}

// writeJobList prints jobs as a table, with an OWNER column when the API
// named owners (the admin listing).
func writeJobList(out io.Writer, jobs []jobView) error {
	owners := false
	for _, j := range jobs {
		owners = owners || j.Owner != ""
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if owners {
		fmt.Fprintln(w, "ID\tSTATUS\tTYPE\tOWNER\tCREATED\tATTEMPTS")
	} else {
		fmt.Fprintln(w, "ID\tSTATUS\tTYPE\tCREATED\tATTEMPTS")
	}
	for _, j := range jobs {
		if owners {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Status, j.Type, orDash(j.Owner), j.CreatedAt, timeline(j.Attempts))
		} else {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", j.ID, j.Status, j.Type, j.CreatedAt, timeline(j.Attempts))
		}
	}
	return w.Flush()
}

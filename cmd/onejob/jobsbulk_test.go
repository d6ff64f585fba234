package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestResolveBulkFollowsCursors: against a server speaking the API's
// bulk resolution, the CLI sends the window as RFC 3339 in UTC, follows
// next_cursor until none comes back and sums the answers, says what was
// resolved before an error, and stops on a cursor it has seen.
func TestResolveBulkFollowsCursors(t *testing.T) {
	t.Parallel()
	// page answers one request, naming one attempt (of job id).
	page := func(id string, matched, resolved, conflicts, scanned int, next string) string {
		b, err := json.Marshal(bulkResultView{Matched: matched, Resolved: resolved, Conflicts: conflicts, Scanned: scanned, NextCursor: next,
			Attempts: []bulkAttemptView{{JobID: id, Owner: "o", Attempt: 1, UnknownSince: "2026-12-02T01:00:00Z", Result: "resolved"}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name    string
		args    []string
		answers []string // one per request; "503" answers a problem
		code    int
		stdout  string
		stderr  string
		sent    []map[string]any
	}{
		{
			name:    "SumsPages",
			args:    []string{"--since", "2026-12-01T00:00:00+01:00", "--until", "2026-12-02T00:00:00Z"},
			answers: []string{page("job_a", 2, 2, 0, 1000, "c1"), page("job_b", 1, 0, 1, 5, "")},
			stdout: "resolved 2 of 3 unknown attempts of p as failed, 1 conflict (unknown since 2026-11-30T23:00:00Z until 2026-12-02T00:00:00Z; " +
				"1005 open jobs read)\n" +
				"JOB    ATTEMPT  OWNER  UNKNOWN SINCE         RESULT\n" +
				"job_a  1        o      2026-12-02T01:00:00Z  resolved\n" +
				"job_b  1        o      2026-12-02T01:00:00Z  resolved\n" +
				"(1 more attempt not listed: the API names at most 200 per request)\n",
			sent: []map[string]any{
				{"provider": "p", "unknown_since_from": "2026-11-30T23:00:00Z", "unknown_since_to": "2026-12-02T00:00:00Z", "outcome": "failed", "reason": "r", "dry_run": false},
				{"provider": "p", "unknown_since_from": "2026-11-30T23:00:00Z", "unknown_since_to": "2026-12-02T00:00:00Z", "outcome": "failed", "reason": "r", "dry_run": false, "cursor": "c1"},
			},
		},
		{
			name:    "ErrorAfterSome",
			answers: []string{page("job_a", 2, 2, 0, 1000, "c1"), "503"},
			code:    1,
			stderr:  "resolved 2 attempt(s) before this error; the same command resolves the rest\nerror 503 ",
		},
		{
			name:    "RepeatedCursor",
			answers: []string{page("job_a", 0, 0, 0, 1000, "c1"), page("job_b", 0, 0, 0, 1000, "c1")},
			code:    1,
			stderr:  `error: the API returned cursor "c1" twice; stopping`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var sent []map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				var m map[string]any
				_ = json.Unmarshal(body, &m)
				mu.Lock()
				sent = append(sent, m)
				n := len(sent)
				mu.Unlock()
				if r.URL.Path != "/v1/admin/attempts/resolve" || r.Method != http.MethodPost || n > len(tt.answers) {
					http.Error(w, "unexpected", http.StatusTeapot)
					return
				}
				if a := tt.answers[n-1]; a == "503" {
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"type":"https://onejob.dev/problems/unavailable","title":"Unavailable","status":503,"detail":"try again"}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tt.answers[n-1]))
			}))
			t.Cleanup(srv.Close)
			c := cli{env: map[string]string{envAPIURL: srv.URL, envToken: "t"}}
			r := c.run(t, append([]string{"resolve", "--provider", "p", "--outcome", "failed", "--reason", "r"}, tt.args...)...)
			if r.code != tt.code || (tt.stdout != "" && r.stdout != tt.stdout) || !strings.HasPrefix(r.stderr, tt.stderr) {
				t.Fatalf("exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
			}
			if tt.sent != nil {
				got, _ := json.Marshal(sent)
				want, _ := json.Marshal(tt.sent)
				if string(got) != string(want) {
					t.Fatalf("sent %s\nwant %s", got, want)
				}
			}
		})
	}
}

// TestWindowTime: a window's end is an RFC 3339 time (in UTC on the wire)
// or a duration before now; anything else is refused.
func TestWindowTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name, in, want string
		fails          bool
	}{
		{name: "Open", in: "", want: ""},
		{name: "UTC", in: "2026-12-02T01:30:00Z", want: "2026-12-02T01:30:00Z"},
		{name: "Offset", in: "2026-12-02T02:30:00.5+01:00", want: "2026-12-02T01:30:00.5Z"},
		{name: "Ago", in: "90m", want: "2026-12-02T01:30:00Z"},
		{name: "Negative", in: "-5m", fails: true},
		{name: "Words", in: "yesterday", fails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := windowTime("since", tt.in, now)
			if (err != nil) != tt.fails || got != tt.want {
				t.Fatalf("windowTime(%q) = %q, %v", tt.in, got, err)
			}
		})
	}
}

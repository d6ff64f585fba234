package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWriteAttempts: usage, resolutions and what a provider said (members
// an operator sees) are shown when the API sends them and left out when it
// does not.
func TestWriteAttempts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string
	}{
		{"Bare",
			`{"job_id":"job_x","attempts":[{"number":1,"provider":"sim-primary","state":"running","started_at":"2026-01-02T03:04:05Z","hedge":false}]}`,
			"#1  sim-primary  running\n" +
				"    started     2026-01-02T03:04:05Z\n"},
		{"UsageAndResolution",
			`{"job_id":"job_x","attempts":[` +
				`{"number":1,"provider":"sim-primary","state":"failed","started_at":"2026-01-02T03:04:05Z","finished_at":"2026-01-02T03:04:09.5Z","hedge":false,` +
				`"error":{"class":"resolved","message":"checked","provider_message":"upstream\ntimed out","provider_status":504},` +
				`"outcome":"resolved: checked","unknown_since":"2026-01-02T03:04:07Z",` +
				`"usage":{"model":"m-1","input_tokens":12,"output_tokens":0,"latency_ms":2001},` +
				`"resolution":{"by":"operator","at":"2026-01-02T03:04:09.5Z","reason":"checked","outcome":"failed"}},` +
				`{"number":2,"provider":"sim-fallback","state":"succeeded","started_at":"2026-01-02T03:04:10Z","finished_at":"2026-01-02T03:04:10.25Z","hedge":true,` +
				`"provider_request_id":"req_10","outcome":"won","usage":{"model":"m-2","input_tokens":12,"output_tokens":30,"latency_ms":250}}]}`,
			"#1  sim-primary   failed     resolved: checked, took 4.5s\n" +
				"    error       resolved: checked\n" +
				"    provider    status 504, \"upstream timed out\"\n" +
				"    started     2026-01-02T03:04:05Z\n" +
				"    unknown     2026-01-02T03:04:07Z\n" +
				"    usage       model m-1, 12 in / 0 out tokens, 2001 ms\n" +
				"    resolution  failed by operator at 2026-01-02T03:04:09.5Z: checked\n" +
				"#2  sim-fallback  succeeded  hedge, won, took 250ms\n" +
				"    request     req_10\n" +
				"    started     2026-01-02T03:04:10Z\n" +
				"    usage       model m-2, 12 in / 30 out tokens, 250 ms\n"},
		{"WaitingAtItsProvider",
			`{"job_id":"job_x","attempts":[{"number":1,"provider":"sim-async","state":"running","started_at":"2026-01-02T03:04:05Z","hedge":false,` +
				`"remote":{"id":"resp_1","status":"in_progress","tier":"now","submitted_at":"2026-01-02T03:04:05Z","heard_at":"2026-01-02T03:05:05Z",` +
				`"next_poll_at":"2026-01-02T03:06:05Z","polls":2,"found":true}}]}`,
			"#1  sim-async  running\n" +
				"    remote      resp_1, in_progress, tier now, heard 2026-01-02T03:05:05Z, asks next 2026-01-02T03:06:05Z, 2 polls, found after a lost submit\n" +
				"    started     2026-01-02T03:04:05Z\n"},
		{"EndedAtItsProvider",
			`{"job_id":"job_x","attempts":[{"number":1,"provider":"sim-async","state":"succeeded","started_at":"2026-01-02T03:04:05Z","finished_at":"2026-01-02T03:06:05Z","hedge":false,` +
				`"remote":{"id":"resp_1","status":"completed","tier":"now","submitted_at":"2026-01-02T03:04:05Z","heard_at":"2026-01-02T03:06:05Z",` +
				`"next_poll_at":"2026-01-02T03:08:05Z","polls":3,"found":false}}]}`,
			"#1  sim-async  succeeded  took 2m0s\n" +
				"    remote      resp_1, completed, tier now, heard 2026-01-02T03:06:05Z, 3 polls\n" +
				"    started     2026-01-02T03:04:05Z\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var a attemptsBody
			if err := json.Unmarshal([]byte(tt.body), &a); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := writeAttempts(&b, "", a.Attempts); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Fatalf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestJobUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"Absent", `{}`, ""},
		{"Sums", `{"usage":{"input_tokens":24,"output_tokens":30,"latency_ms":2251,"attempts":2}}`, "24 in / 30 out tokens, 2251 ms, 2 attempts"},
		{"One", `{"usage":{"input_tokens":1,"output_tokens":2,"latency_ms":3,"attempts":1}}`, "1 in / 2 out tokens, 3 ms, 1 attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var j jobView
			if err := json.Unmarshal([]byte(tt.body), &j); err != nil {
				t.Fatal(err)
			}
			if got := usageText(j.Usage); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

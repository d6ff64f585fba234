package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// hostile is text an owner, a provider or a forged answer could put in any
// field: terminal escapes (a title change, an erased line, an OSC 8 link),
// BEL, NUL, DEL, a C1 CSI, bidi overrides and isolates, a line break.
const hostile = "x\x1b]0;PWNED\x07\x1b[2K\x1b]8;;http://evil.example\x1b\\y\x00\x7f\u009b31m\u202eevil\u2066z\u2028\nnext"

// TestJobsEscapesWhatItPrints: every field the CLI prints from the API is
// shown with its control characters escaped, whatever the command, so an
// owner's name, a model, a reason or a request ID cannot rewrite an
// operator's terminal or reorder what it shows.
func TestJobsEscapesWhatItPrints(t *testing.T) {
	t.Parallel()
	h := func() string {
		b, err := json.Marshal(hostile)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}()
	failure := `{"class":` + h + `,"message":` + h + `,"provider_message":` + h + `,"provider_status":` + h + `}`
	usage := `{"model":` + h + `,"input_tokens":1,"output_tokens":2,"latency_ms":3}`
	summary := `{"number":1,"provider":` + h + `,"state":` + h + `,"started_at":` + h + `,"finished_at":` + h + `,"error":` + failure + `}`
	jobDoc := `{"id":"job_abc","owner":` + h + `,"type":` + h + `,"status":"succeeded","providers":[` + h + `],` +
		`"created_at":` + h + `,"updated_at":` + h + `,"version":1,"attempts":[` + summary + `],` +
		// The result holds a bidi override and an invalid byte raw: JSON
		// allows the one and a forged answer can carry the other.
		"\"result\":{\"text\":\"a\u202eb\xffc\\u001b[2K\"},\"completed_by\":1,\"error\":" + failure + `,"usage":` + usage + `}`
	attempt := strings.TrimSuffix(summary, "}") + `,"hedge":false,"provider_request_id":` + h + `,"outcome":` + h +
		`,"unknown_since":` + h + `,"usage":` + usage + `,"resolution":{"outcome":` + h + `,"by":` + h + `,"at":` + h + `,"reason":` + h + `}}`
	problemDoc := `{"type":` + h + `,"title":` + h + `,"status":409,"detail":` + h + `,"request_id":` + h + `,"job_id":` + h +
		`,"attempt_state":` + h + `,"errors":[{"pointer":` + h + `,"detail":` + h + `},{"parameter":` + h + `,"detail":` + h + `}]}`
	providersDoc := `{"providers":[{"name":` + h + `,"state":` + h + `,"breaker_state":` + h + `,"since":` + h + `,"reason":` + h +
		`,"open_until":` + h + `,"cooldown_seconds":30,"trips":1,"window_start":` + h + `,"failures":{` + h + `:2},"held":1,"probes":0,"opened":1,` +
		`"forced":{"state":` + h + `,"by":` + h + `,"reason":` + h + `,"at":` + h + `}}]}`
	bulkDoc := `{"dry_run":true,"matched":1,"resolved":0,"conflicts":0,"scanned":1,"attempts":[{"job_id":` + h + `,"owner":` + h +
		`,"attempt":1,"unknown_since":` + h + `,"result":` + h + `}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/admin/providers":
			_, _ = w.Write([]byte(providersDoc))
		case r.URL.Path == "/v1/admin/attempts/resolve":
			_, _ = w.Write([]byte(bulkDoc))
		case r.Method == http.MethodPost:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(problemDoc))
		case r.URL.Path == "/v1/jobs/job_abc":
			_, _ = w.Write([]byte(jobDoc))
		case r.URL.Path == "/v1/jobs/job_abc/attempts":
			_, _ = w.Write([]byte(`{"job_id":` + h + `,"attempts":[` + attempt + `]}`))
		case r.URL.Path == "/v1/jobs" || r.URL.Path == "/v1/admin/jobs":
			_, _ = w.Write([]byte(`{"jobs":[` + jobDoc + `],"next_cursor":` + h + `}`))
		default:
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(hostile))
		}
	}))
	t.Cleanup(srv.Close)
	c := cli{env: map[string]string{envAPIURL: srv.URL, envToken: "t"}}
	tests := []struct {
		name string
		run  func(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int
		args []string
	}{
		{"Providers", runProviders, nil},
		{"ProvidersForceProblem", runProviders, []string{"force", "p", "--state", "open", "--reason", "r"}},
		{"ResolveBulk", runJobs, []string{"resolve", "--provider", "p", "--outcome", "failed", "--reason", "r", "--dry-run"}},
		{"Get", runJobs, []string{"get", "job_abc"}},
		{"GetJSON", runJobs, []string{"get", "job_abc", "--json"}},
		{"Attempts", runJobs, []string{"attempts", "job_abc"}},
		{"List", runJobs, []string{"list"}},
		{"ListAllOwners", runJobs, []string{"list", "--all-owners"}},
		{"Watch", runJobs, []string{"watch", "job_abc"}},
		{"Cancel", runJobs, []string{"cancel", "job_abc"}},
		{"SubmitProblem", runJobs, []string{"submit", "--type", "demo", "--input", "{}", "--key", "k"}},
		{"NotAnAPI", runJobs, []string{"get", "job_elsewhere"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			tc.run(context.Background(), tc.args, c.getenv, &stdout, &stderr)
			r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
			for stream, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
				if !utf8.ValidString(out) {
					t.Fatalf("%s is not UTF-8: %q", stream, out)
				}
				for _, ch := range out {
					if ch != '\n' && ch != '\t' && (unicode.IsControl(ch) || unicode.Is(unicode.Bidi_Control, ch) || ch == '\u2028' || ch == '\u2029') {
						t.Fatalf("%s carries %U raw:\n%q", stream, ch, out)
					}
				}
			}
			if all := r.stdout + r.stderr; !strings.Contains(all, `\x1b`) && !strings.Contains(all, `\u001b`) {
				t.Fatalf("the hostile text is not shown escaped:\nstdout %q\nstderr %q", r.stdout, r.stderr)
			}
		})
	}
}

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// The jobs commands against a real local onejob (dynalite, the real state
// machine, the demo providers, the HTTP API behind the local authorizer),
// run in process with their own environment and output.

func TestJobsWatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		args   []string
		// during acts while the watch runs (given its first line).
		during func(t *testing.T, c cli, w *watch, id string)
		want   []string // status lines, in this order
		// orLast: other last lines as good as want's (a state the
		// machine's pace decides).
		orLast []string
		code   int
		// summary lines the end of the output must hold.
		summary []string
	}{
		{
			name: "FailsOverToTheFallback",
			// Each attempt takes 1 s, so the watch sees each of them run.
			script: `{"sim-primary":{"outcome":"error","latency_ms":1000},"sim-fallback":{"latency_ms":1000}}`,
			want: []string{
				"running  #1 sim-primary running",
				"running  #1 sim-primary failed(retryable) → #2 sim-fallback running",
				"succeeded  #1 sim-primary failed(retryable) → #2 sim-fallback succeeded",
			},
			summary: []string{"  #1  sim-primary   failed", "  #2  sim-fallback  succeeded  won", `  result  {"provider":"sim-fallback"`},
		},
		{
			name:    "BothProvidersFail",
			script:  `{"sim-primary":{"outcome":"error"},"sim-fallback":{"outcome":"error"}}`,
			want:    []string{"failed  #1 sim-primary failed(retryable) → #2 sim-fallback failed(retryable)"},
			code:    exitWatchFailed,
			summary: []string{"  error   retryable: "},
		},
		{
			name:   "CancelledWhileRunning",
			script: `{"sim-primary":{"latency_ms":1500}}`,
			during: func(t *testing.T, c cli, w *watch, id string) {
				w.waitLine(t, "running  #1 sim-primary running")
				// The call is still under way when the job is cancelled:
				// its attempt is running, or, once the call outlived its
				// 2-s timeout (a busy machine), unknown; that unknown
				// attempt's late answer then discards it (the job ended
				// without it), which may be all the watch sees.
				if r := c.must(t, "cancel", id); r.stdout != id+"  cancelled  #1 sim-primary running\n" &&
					r.stdout != id+"  cancelled  #1 sim-primary unknown(ambiguous)\n" {
					t.Errorf("cancel printed %q", r.stdout)
				}
			},
			want:   []string{"running  #1 sim-primary running", "cancelled  #1 sim-primary running"},
			orLast: []string{"cancelled  #1 sim-primary unknown(ambiguous)", "cancelled  #1 sim-primary discarded(ambiguous)"},
			code:   exitWatchCancelled,
		},
		{
			name:   "Interrupted",
			script: `{"sim-primary":{"latency_ms":1500}}`,
			during: func(t *testing.T, c cli, w *watch, id string) {
				w.waitLine(t, "running  #1 sim-primary running")
				w.stop()
			},
			want: []string{"running  #1 sim-primary running"},
			code: exitWatchStopped,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := owner(t, "watch")
			id := c.submit(t, tt.script)
			w := c.startWatch(t, id, tt.args...)
			if tt.during != nil {
				tt.during(t, c, w, id)
			}
			if code := w.exit(t); code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, w.stdout, w.stderr)
			}
			got := statusLines(w.stdout.String())
			want := tt.want
			if len(got) > 0 && slices.Contains(tt.orLast, got[len(got)-1]) {
				want = append(slices.Clone(want[:len(want)-1]), got[len(got)-1])
			}
			if !inOrder(got, want) {
				t.Fatalf("status lines:\n%s\nwant, in order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for i := 1; i < len(got); i++ {
				if got[i] == got[i-1] {
					t.Errorf("line %q printed twice in a row: a line is a change", got[i])
				}
			}
			if last := got[len(got)-1]; last != want[len(want)-1] {
				t.Errorf("last status line %q, want %q", last, want[len(want)-1])
			}
			for _, s := range tt.summary {
				if !strings.Contains(w.stdout.String(), "\n"+s) {
					t.Errorf("output lacks %q:\n%s", s, w.stdout)
				}
			}
			if tt.code == exitWatchStopped && !strings.Contains(w.stderr.String(), "watch interrupted; last seen: "+tt.want[len(tt.want)-1]) {
				t.Errorf("stderr %q", w.stderr)
			}
		})
	}
}

// TestJobsWatchJSON prints each new representation as the API sent it.
func TestJobsWatchJSON(t *testing.T) {
	t.Parallel()
	c := owner(t, "watchjson")
	id := c.submit(t, `{"sim-primary":{"outcome":"error","latency_ms":500}}`)
	r := c.run(t, "watch", id, "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var statuses []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var j jobView
		if err := json.Unmarshal([]byte(line), &j); err != nil || j.ID != id {
			t.Fatalf("line %q is not job %s: %v", line, id, err)
		}
		statuses = append(statuses, j.Status)
	}
	// At least the running job and the succeeded one, each line a new one.
	if len(statuses) < 2 || statuses[len(statuses)-1] != "succeeded" {
		t.Fatalf("statuses %v", statuses)
	}
}

func TestJobsSubmit(t *testing.T) {
	t.Parallel()
	keyLine := regexp.MustCompile(`^key ([0-9a-f]{32})$`)
	created := regexp.MustCompile(`^created (job_[0-9a-z]+)  demo  pending  no attempts yet$`)
	input := `{"prompt":"submit test"}`

	t.Run("NewKeyIsPrintedAndReplays", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "submit")
		out := strings.Split(strings.TrimSpace(c.must(t, "submit", "--type", "demo", "--input", input).stdout), "\n")
		if len(out) != 2 || !keyLine.MatchString(out[0]) || !created.MatchString(out[1]) {
			t.Fatalf("submit printed %q", out)
		}
		key, id := keyLine.FindStringSubmatch(out[0])[1], created.FindStringSubmatch(out[1])[1]
		again := strings.Split(strings.TrimSpace(c.must(t, "submit", "--type", "demo", "--input", input, "--key", key).stdout), "\n")
		if len(again) != 2 || again[0] != "key "+key || !strings.HasPrefix(again[1], "replayed "+id+"  demo  ") {
			t.Fatalf("resubmit with the key printed %q, want a replay of %s", again, id)
		}
		// Another fresh key is another intent.
		other := c.must(t, "submit", "--type", "demo", "--input", input).stdout
		if strings.Contains(other, id) || strings.Contains(other, key) {
			t.Fatalf("a second submit without --key replayed: %q", other)
		}
	})

	t.Run("EditedInputIsOneLine409", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "edit")
		first := c.must(t, "submit", "--type", "demo", "--input", input, "--key", "checkout-1").stdout
		id := created.FindStringSubmatch(strings.Split(strings.TrimSpace(first), "\n")[1])[1]
		r := c.run(t, "submit", "--type", "demo", "--input", `{"prompt":"edited"}`, "--key", "checkout-1")
		want := "error 409 idempotency-key-reused: this Idempotency-Key already names a job created from a different request (job " + id + ")\n"
		if r.code != 1 || r.stderr != want || r.stdout != "key checkout-1\n" {
			t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant stderr %q", r.code, r.stdout, r.stderr, want)
		}
	})

	t.Run("TierReachesTheAPI", func(t *testing.T) {
		t.Parallel()
		// demo lets its jobs wait only now: 8h is refused by the API,
		// whose problem names the member.
		c := owner(t, "tier")
		r := c.run(t, "submit", "--type", "demo", "--input", input, "--key", "tier-1", "--tier", "8h")
		if r.code != 1 || !strings.Contains(r.stderr, "validation-failed") || !strings.Contains(r.stderr, "/tier") {
			t.Fatalf("submit --tier 8h: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
		}
		ok := c.must(t, "submit", "--type", "demo", "--input", input, "--key", "tier-2", "--tier", "now").stdout
		if !strings.Contains(ok, "created job_") {
			t.Fatalf("submit --tier now printed %q", ok)
		}
	})

	t.Run("JSONAndInputFromFile", func(t *testing.T) {
		t.Parallel()
		c := owner(t, "json")
		file := filepath.Join(t.TempDir(), "input.json")
		if err := os.WriteFile(file, []byte("{\n  \"prompt\": \"from a file\"\n}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := c.must(t, "submit", "--json", "--type", "demo", "--input", "@"+file, "--providers", "sim-primary", "--key", "file-1")
		var j struct {
			ID        string            `json:"id"`
			Input     map[string]string `json:"input"`
			Providers []string          `json:"providers"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || strings.Count(r.stdout, "\n") != 1 {
			t.Fatalf("--json printed %q: %v", r.stdout, err)
		}
		if j.Input["prompt"] != "from a file" || len(j.Providers) != 1 || j.Providers[0] != "sim-primary" || r.stderr != "key file-1\n" {
			t.Fatalf("job %+v, stderr %q", j, r.stderr)
		}
	})
}

func TestJobsReadListCancel(t *testing.T) {
	t.Parallel()
	c := owner(t, "reader")
	id := c.submit(t, "")
	if r := c.finish(t, id); r.code != 0 {
		t.Fatalf("watch: %d %s", r.code, r.stdout)
	}

	t.Run("Get", func(t *testing.T) {
		t.Parallel()
		out := c.must(t, "get", id).stdout
		for _, want := range []string{id + "  demo  succeeded\n", "  attempts      #1 sim-primary succeeded\n",
			"  providers     sim-primary, sim-fallback\n", `  result        {"provider":"sim-primary"`, "  completed by  attempt 1\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("get lacks %q:\n%s", want, out)
			}
		}
		var j jobView
		if r := c.must(t, "get", "--json", id); json.Unmarshal([]byte(r.stdout), &j) != nil || j.ID != id || j.Status != "succeeded" {
			t.Errorf("get --json: %q", r.stdout)
		}
	})

	t.Run("Attempts", func(t *testing.T) {
		t.Parallel()
		out := c.must(t, "attempts", id).stdout
		if !strings.HasPrefix(out, id+"  1 attempt\n#1  sim-primary  succeeded  won, took ") || !strings.Contains(out, "\n    started     20") {
			t.Errorf("attempts:\n%s", out)
		}
		var a attemptsBody
		if r := c.must(t, "attempts", id, "--json"); json.Unmarshal([]byte(r.stdout), &a) != nil || a.JobID != id || len(a.Attempts) != 1 {
			t.Errorf("attempts --json: %q", r.stdout)
		}
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			want bool
		}{
			{"All", nil, true},
			{"Succeeded", []string{"--status", "succeeded"}, true},
			{"Running", []string{"--status", "running"}, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				out := c.must(t, append([]string{"list"}, tt.args...)...).stdout
				if got := strings.Contains(out, "\n"+id+"  succeeded  demo  "); got != tt.want {
					t.Errorf("listed %s: %v, want %v:\n%s", id, got, tt.want, out)
				}
			})
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name   string
			script string
			twice  bool
			code   int
			stdout string
			stderr string
		}{
			{name: "Running", script: `{"sim-primary":{"latency_ms":1500}}`, stdout: "  cancelled  "},
			{name: "Twice", script: `{"sim-primary":{"latency_ms":1500}}`, twice: true, stdout: "  cancelled  "},
			{name: "Succeeded", code: 1, stderr: "error 409 conflict: the job already succeeded\n"},
		}
		t.Run("WithAReason", func(t *testing.T) {
			t.Parallel()
			target := c.submit(t, `{"sim-primary":{"latency_ms":1500}}`)
			c.must(t, "cancel", target, "--reason", "ordered twice")
			if got := c.must(t, "get", target, "--json").stdout; !strings.Contains(got, `"reason":"ordered twice"`) {
				t.Fatalf("the job does not keep the reason: %s", got)
			}
		})
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				target := id
				if tt.script != "" {
					target = c.submit(t, tt.script)
				}
				r := c.run(t, "cancel", target)
				if tt.twice {
					r = c.run(t, "cancel", target)
				}
				if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || (tt.stderr != "" && r.stderr != tt.stderr) {
					t.Fatalf("cancel: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
				}
				if tt.code == 0 && c.must(t, "get", target, "--json").stdout == "" {
					t.Fatal("no job after cancel")
				}
			})
		}
	})
}

// TestJobsListPages follows next_cursor with --all, page by page.
func TestJobsListPages(t *testing.T) {
	t.Parallel()
	c := owner(t, "pages")
	want := map[string]bool{}
	for range 3 {
		want[c.submit(t, "")] = true
	}
	r := c.must(t, "list", "--limit", "1", "--all", "--json")
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var page listBody
		if err := json.Unmarshal([]byte(line), &page); err != nil || len(page.Jobs) > 1 {
			t.Fatalf("page %q: %v", line, err)
		}
		for _, j := range page.Jobs {
			got[j.ID] = true
		}
	}
	if len(got) != 3 || !got[firstKey(want)] {
		t.Fatalf("--all listed %v, want %v", got, want)
	}
	one := c.must(t, "list", "--limit", "1")
	if n := strings.Count(one.stdout, "\njob_"); n != 1 || !strings.HasPrefix(one.stderr, "more: --cursor ") {
		t.Fatalf("one page: %d jobs\n%s\nstderr %q", n, one.stdout, one.stderr)
	}
	cursor := strings.Fields(one.stderr)[2]
	if next := c.must(t, "list", "--limit", "1", "--cursor", cursor); strings.Count(next.stdout, "\njob_") != 1 || next.stdout == one.stdout {
		t.Fatalf("next page:\n%s", next.stdout)
	}
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// TestJobsResolve settles an attempt left unknown by a provider that never
// answers, as an operator would.
func TestJobsResolve(t *testing.T) {
	t.Parallel()
	c := owner(t, "resolve")
	admin := owner(t, "operator", "jobs:admin")
	id := c.submit(t, `{"sim-primary":{"outcome":"timeout"}}`)
	w := c.startWatch(t, id)
	w.waitLine(t, "unknown  #1 sim-primary unknown(ambiguous)")

	refusals := []struct {
		name   string
		as     cli
		args   []string
		stderr string
	}{
		{"NotAnOperator", c, []string{"1", "--outcome", "failed", "--reason", "r"}, "error 403 forbidden: resolving an attempt "},
		{"NoSuchAttempt", admin, []string{"2", "--outcome", "failed", "--reason", "r"}, "error 404 not-found: no such job or attempt"},
		{"SucceededWithoutResult", admin, []string{"1", "--outcome", "succeeded", "--reason", "r"},
			"error 422 validation-failed: the request is not valid; see errors: /result is required when the outcome is succeeded"},
		{"NotAnAttemptNumber", admin, []string{"one", "--outcome", "failed", "--reason", "r"},
			`error: resolve: the attempt number "one" is not a positive integer`},
		{"NoReason", admin, []string{"1", "--outcome", "failed"}, "error: resolve needs --outcome and --reason"},
	}
	for _, tt := range refusals {
		r := tt.as.run(t, append([]string{"resolve", id}, tt.args...)...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, tt.stderr) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%s: exit %d\nstdout %q\nstderr %q\nwant   %q", tt.name, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}

	r := admin.must(t, "resolve", id, "1", "--outcome", "failed", "--reason", "the provider has no record of it")
	if r.stdout != "resolved attempt 1 as failed\n"+id+"  running  #1 sim-primary failed(resolved)\n" {
		t.Fatalf("resolve printed %q", r.stdout)
	}
	w.waitLine(t, "succeeded  #1 sim-primary failed(resolved) → #2 sim-fallback succeeded")
	if code := w.exit(t); code != 0 {
		t.Fatalf("watch exit %d", code)
	}
	if out := c.must(t, "attempts", id).stdout; !strings.Contains(out, "\n#1  sim-primary   failed     resolved") {
		t.Errorf("attempts after resolve:\n%s", out)
	}
	if r := admin.run(t, "resolve", id, "1", "--outcome", "cancelled", "--reason", "changed my mind"); r.code != 1 ||
		!strings.HasPrefix(r.stderr, "error 409 ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("resolving a settled attempt: exit %d %q", r.code, r.stderr)
	}
}

// TestJobsErrors: every failure is one line on stderr and a non-zero exit.
func TestJobsErrors(t *testing.T) {
	t.Parallel()
	c := owner(t, "errors")
	stranger := owner(t, "stranger")
	theirs := stranger.submit(t, "")
	// An address that answers nothing: it closes every connection it
	// takes, and stays held for the test (a port freed for it could be
	// taken by another package's server meanwhile, which then answered).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	nowhere := "http://" + ln.Addr().String()
	tests := []struct {
		name   string
		as     cli
		args   []string
		code   int
		stderr string // a prefix of the one line
	}{
		{"UnknownJobType", c, []string{"submit", "--type", "nope", "--input", "{}"}, 1, "error 422 unknown-job-type: no job type of that name: /type unknown job type"},
		{"InvalidInput", c, []string{"submit", "--type", "demo", "--input", `{"prompt":""}`}, 1, "error 422 validation-failed: the request is not valid; see errors: /input/prompt "},
		{"InputNotJSON", c, []string{"submit", "--type", "demo", "--input", "{nope"}, 1, "error: --input is not JSON: "},
		{"NoInputFile", c, []string{"submit", "--type", "demo", "--input", "@/nonexistent.json"}, 1, "error: --input: open /nonexistent.json: "},
		{"AnotherOwnersJob", c, []string{"get", theirs}, 1, "error 404 not-found: no such job or attempt"},
		{"WatchAnotherOwnersJob", c, []string{"watch", theirs}, exitWatchStopped, "error 404 not-found: no such job or attempt"},
		{"BadLimit", c, []string{"list", "--limit", "500"}, 1, "error 422 validation-failed: the request is not valid; see errors: limit must be an integer from 1 to 100"},
		{"BadStatus", c, []string{"list", "--status", "done"}, 1, "error 422 validation-failed: the request is not valid; see errors: status must be one of "},
		{"BadToken", c.with(envToken, "not-a-jwt"), []string{"get", theirs}, 1, "error 401 unauthenticated: "},
		{"NoToken", c.with(envToken, ""), []string{"get", theirs}, 1, "error: no token: pass --token or set ONEJOB_TOKEN"},
		{"TokenFlag", c.with(envToken, ""), []string{"get", theirs, "--token", "not-a-jwt"}, 1, "error 401 unauthenticated: "},
		{"Unreachable", c.with(envAPIURL, nowhere), []string{"get", theirs}, 1, "error: no answer from GET " + nowhere + "/v1/jobs/" + theirs + ": "},
		{"APIFlag", c, []string{"--api", nowhere, "get", theirs}, 1, "error: flags go after the subcommand: onejob jobs <subcommand> --api …"},
		{"APIFlagAfter", c, []string{"get", theirs, "--api", nowhere}, 1, "error: no answer from GET " + nowhere},
		{"SubmitUnreachable", c.with(envAPIURL, nowhere), []string{"submit", "--type", "demo", "--input", "{}", "--key", "k-1"}, 1, "error: no answer from POST "},
		{"NotAURL", c.with(envAPIURL, "127.0.0.1:8080"), []string{"get", theirs}, 1, `error: --api "127.0.0.1:8080" is not an http(s) URL`},
		{"MissingID", c, []string{"get"}, 1, "error: get wants ID, got 0 argument(s)"},
		{"ExtraArgument", c, []string{"cancel", theirs, "again"}, 1, "error: cancel wants ID, got 2 argument(s)"},
		{"UnknownSubcommand", c, []string{"frobnicate"}, 1, `error: unknown jobs subcommand "frobnicate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.as.run(t, tt.args...)
			if r.code != tt.code || !strings.HasPrefix(r.stderr, tt.stderr) || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("exit %d (want %d)\nstderr %q\nwant   %q…", r.code, tt.code, r.stderr, tt.stderr)
			}
			if strings.Contains(r.stdout, "job_") {
				t.Errorf("stdout %q", r.stdout)
			}
		})
	}

	t.Run("SubmitUnreachableNamesTheKey", func(t *testing.T) {
		t.Parallel()
		r := c.with(envAPIURL, nowhere).run(t, "submit", "--type", "demo", "--input", "{}", "--key", "k-1")
		if !strings.HasSuffix(r.stderr, "(the job may exist: submit again with --key k-1)\n") || r.stdout != "key k-1\n" {
			t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
		}
	})
	t.Run("JSONProblem", func(t *testing.T) {
		t.Parallel()
		r := c.run(t, "get", theirs, "--json")
		var p problem
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.Status != 404 || r.code != 1 ||
			r.stderr != "error 404 not-found: no such job or attempt\n" {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("FlagUsage", func(t *testing.T) {
		t.Parallel()
		r := c.run(t, "get", "--frobnicate")
		if r.code != 1 || !strings.HasPrefix(r.stderr, "flag provided but not defined: -frobnicate\nusage: onejob jobs get ID\n") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
		if r := c.run(t, "get", "-h"); r.code != 0 || !strings.Contains(r.stderr, "-token string") {
			t.Fatalf("-h: exit %d stderr %q", r.code, r.stderr)
		}
	})
}

// TestJobsWatchRidesOutFaults: once the API has answered, a watch asks
// again after a 503 or a broken answer (one line each on stderr) and
// still follows the job to its end.
func TestJobsWatchRidesOutFaults(t *testing.T) {
	t.Parallel()
	c := owner(t, "faults")
	target, err := url.Parse(c.env[envAPIURL])
	if err != nil {
		t.Fatal(err)
	}
	var faults atomic.Int32 // the next requests to fail: 2 = a 503, 1 = an answer that is not HTTP
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch faults.Add(-1) {
		case 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"https://onejob.dev/problems/unavailable","title":"Service unavailable","status":503,"detail":"try again","request_id":"proxy-1"}`))
		case 0:
			// Not HTTP: the transport cannot quietly send the GET again
			// as it may for a connection closed before any byte.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_, _ = conn.Write([]byte("garbage\r\n\r\n"))
				_ = conn.Close()
			}
		default:
			faults.Store(0)
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	id := c.submit(t, `{"sim-primary":{"latency_ms":1500}}`)
	w := c.with(envAPIURL, srv.URL).startWatch(t, id)
	w.waitLine(t, "running  #1 sim-primary running")
	faults.Store(2)
	if code := w.exit(t); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, w.stdout, w.stderr)
	}
	errs := strings.Split(w.stderr.String(), "\n")
	if len(errs) != 2 || !strings.HasPrefix(errs[0], "error 503 unavailable: try again (request_id proxy-1); asking again in 1s (1/5)") ||
		!strings.HasPrefix(errs[1], "error: no answer from GET "+srv.URL+"/v1/jobs/"+id+": ") || !strings.HasSuffix(errs[1], "; asking again in 2s (2/5)") {
		t.Fatalf("stderr:\n%s", w.stderr)
	}
	if got := statusLines(w.stdout.String()); got[len(got)-1] != "succeeded  #1 sim-primary succeeded" {
		t.Fatalf("stdout:\n%s", w.stdout)
	}
}

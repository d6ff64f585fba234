package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProviders: an operator reads every provider's health and forces one
// open, closed and back to its breaker, each with a reason kept with it.
// The provider forced is one no demo job uses (ticket-triage's fallback),
// so the jobs of the tests beside this one run where their scripts say.
func TestProviders(t *testing.T) {
	t.Parallel()
	admin := owner(t, "operator", "jobs:admin")
	user := owner(t, "user")
	const forced = "anthropic-fallback"
	t.Cleanup(func() { admin.providers(t, "force", forced, "--state", "clear", "--reason", "test over") })

	t.Run("Refused", func(t *testing.T) {
		tests := []struct {
			name   string
			as     cli
			args   []string
			stderr string
		}{
			{"ListNotAnOperator", user, nil, "error 403 forbidden: "},
			{"ForceNotAnOperator", user, []string{"force", forced, "--state", "open", "--reason", "r"}, "error 403 forbidden: "},
			{"ForceNoReason", admin, []string{"force", forced, "--state", "open"}, "error: force needs --state open, closed or clear, and --reason"},
			{"ForceBadState", admin, []string{"force", forced, "--state", "half_open", "--reason", "r"}, "error: force needs --state"},
			{"ForceUnknownProvider", admin, []string{"force", "no-such-provider", "--state", "open", "--reason", "r"}, "error 404 not-found: "},
			{"ForceNoName", admin, []string{"force", "--state", "open", "--reason", "r"}, "error: force wants NAME, got 0 argument(s)"},
			{"UnknownSubcommand", admin, []string{"drain"}, `error: unknown providers subcommand "drain"`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := tt.as.providers(t, tt.args...)
				if r.code != 1 || !strings.HasPrefix(r.stderr, tt.stderr) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
					t.Fatalf("exit %d stdout %q stderr %q, want %q…", r.code, r.stdout, r.stderr, tt.stderr)
				}
			})
		}
	})

	t.Run("List", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
		}{{"Default", nil}, {"Named", []string{"list"}}, {"FlagsOnly", []string{"--api", admin.env[envAPIURL]}}}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := admin.providers(t, tt.args...)
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				// Every provider a job type names, with its state and counts.
				for _, name := range []string{"anthropic-fallback", "openai-primary", "sim-fallback", "sim-primary"} {
					if !regexp.MustCompile(`(?m)^` + name + ` +(closed|open|half_open) +since `).MatchString(r.stdout) {
						t.Errorf("no line for %s:\n%s", name, r.stdout)
					}
				}
				if !strings.Contains(r.stdout, "  counts      ") || !strings.Contains(r.stdout, "  failures    ") {
					t.Errorf("no counts:\n%s", r.stdout)
				}
			})
		}
	})

	t.Run("Force", func(t *testing.T) {
		// A provider forced open: attempts see it open, with who and why.
		r := admin.mustProviders(t, "force", forced, "--state", "open", "--reason", "status page: degraded")
		if !strings.HasPrefix(r.stdout, "forced "+forced+" open\n"+forced+"  open  since ") {
			t.Fatalf("force open printed:\n%s", r.stdout)
		}
		forcedLine := regexp.MustCompile(`\n +forced +open by operator-[0-9a-f]{8} at 20\d\d-[^ ]+Z: status page: degraded\n`)
		if !forcedLine.MatchString(r.stdout) {
			t.Fatalf("no forced line:\n%s", r.stdout)
		}
		list := admin.mustProviders(t).stdout
		block := providerBlock(t, list, forced)
		// The list pads names to its longest (the batch simulators' are
		// longer than this one's).
		if !regexp.MustCompile(`^`+regexp.QuoteMeta(forced)+` +open `).MatchString(block) || !forcedLine.MatchString("\n"+block) {
			t.Fatalf("the list shows %s as:\n%s", forced, block)
		}
		// --json: the API's document as is.
		var doc providersBody
		if err := json.Unmarshal([]byte(admin.mustProviders(t, "--json").stdout), &doc); err != nil {
			t.Fatal(err)
		}
		for _, p := range doc.Providers {
			if p.Name == forced && (p.State != "open" || p.Forced == nil || p.Forced.Reason != "status page: degraded") {
				t.Fatalf("--json: %+v", p)
			}
		}

		// Forced closed, then back to its breaker (closed: nothing failed).
		if r := admin.mustProviders(t, "force", forced, "--state", "closed", "--reason", "the provider says it recovered"); !strings.Contains(r.stdout,
			"forced "+forced+" closed\n") || !strings.Contains(r.stdout, ": the provider says it recovered\n") {
			t.Fatalf("force closed printed:\n%s", r.stdout)
		}
		r = admin.mustProviders(t, "force", forced, "--state", "clear", "--reason", "incident over")
		if !strings.HasPrefix(r.stdout, "cleared the override of "+forced+": its breaker decides\n"+forced+"  closed  since 20") ||
			strings.Contains(r.stdout, "forced  ") {
			t.Fatalf("clear printed:\n%s", r.stdout)
		}
		if block := providerBlock(t, admin.mustProviders(t).stdout, forced); strings.Contains(block, " forced      ") ||
			!strings.Contains(block, "reason      forced closed by operator-") {
			t.Fatalf("after clearing, the list shows:\n%s", block)
		}
	})
}

// providers runs `onejob providers args…` to its end.
func (c cli) providers(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errs strings.Builder
	code := runProviders(context.Background(), args, c.getenv, &out, &errs)
	return cliResult{code: code, stdout: out.String(), stderr: errs.String()}
}

// mustProviders runs `onejob providers args…`, which has to succeed.
func (c cli) mustProviders(t *testing.T, args ...string) cliResult {
	t.Helper()
	r := c.providers(t, args...)
	if r.code != 0 {
		t.Fatalf("onejob providers %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// providerBlock is one provider's lines of `onejob providers`: its own and
// the indented ones below it.
func providerBlock(t *testing.T, out, name string) string {
	t.Helper()
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(out, "\n") {
		switch {
		case strings.HasPrefix(line, name+" "):
			in = true
		case !strings.HasPrefix(line, " "):
			in = false
		}
		if in {
			b.WriteString(line)
		}
	}
	if b.Len() == 0 {
		t.Fatalf("no %s in:\n%s", name, out)
	}
	return b.String()
}

// TestJobsResolveBulk: an incident's tool. Two jobs whose first provider
// hangs go unknown; a dry run counts them without changing anything; the
// resolution settles both (each job then runs on its next provider); the
// same command again finds nothing. Their provider is sim-fallback, which
// no other test here makes unknown, so the window is this test's alone.
func TestJobsResolveBulk(t *testing.T) {
	t.Parallel()
	c := owner(t, "bulk")
	admin := owner(t, "operator", "jobs:admin")
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	input := `{"prompt":"bulk","simulate":{"sim-fallback":{"outcome":"timeout"}}}`
	var ids []string
	var watches []*watch
	for range 2 {
		r := c.must(t, "submit", "--type", "demo", "--input", input, "--providers", "sim-fallback,sim-primary", "--json")
		var j jobView
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.ID == "" {
			t.Fatalf("submit printed %q (%v)", r.stdout, err)
		}
		ids = append(ids, j.ID)
		watches = append(watches, c.startWatch(t, j.ID))
	}
	for _, w := range watches {
		w.waitLine(t, "unknown  #1 sim-fallback unknown(ambiguous)")
	}
	bulk := []string{"resolve", "--provider", "sim-fallback", "--since", since, "--outcome", "failed", "--reason", "sim-fallback hung: its calls never ran"}

	t.Run("Refused", func(t *testing.T) {
		tests := []struct {
			name   string
			as     cli
			args   []string
			stderr string
		}{
			{"NoReason", admin, []string{"resolve", "--provider", "sim-fallback", "--outcome", "failed", "--dry-run"},
				"error: resolve --provider needs --outcome (failed or cancelled) and --reason"},
			{"Succeeded", admin, []string{"resolve", "--provider", "sim-fallback", "--outcome", "succeeded", "--reason", "r", "--dry-run"},
				"error 422 validation-failed: the request is not valid; see errors: /outcome must be failed or cancelled"},
			{"AttemptNamed", admin, []string{"resolve", ids[0], "1", "--provider", "sim-fallback", "--outcome", "failed", "--reason", "r"},
				"error: resolve wants no arguments, got 2 argument(s)"},
			{"WindowWithoutProvider", admin, []string{"resolve", ids[0], "1", "--since", "1h", "--outcome", "failed", "--reason", "r"},
				"error: resolve: --since, --until and --dry-run select attempts by provider: give --provider too"},
			{"NotATime", admin, []string{"resolve", "--provider", "sim-fallback", "--since", "yesterday", "--outcome", "failed", "--reason", "r"},
				`error: --since "yesterday" is neither an RFC 3339 time`},
			{"EmptyWindow", admin, []string{"resolve", "--provider", "sim-fallback", "--since", "1m", "--until", "2m", "--outcome", "failed", "--reason", "r", "--dry-run"},
				"error 422 validation-failed: the request is not valid; see errors: /unknown_since_to must be after unknown_since_from"},
			{"NotAnOperator", c, append(append([]string{}, bulk...), "--dry-run"), "error 403 forbidden: "},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := tt.as.run(t, tt.args...)
				if r.code != 1 || !strings.HasPrefix(r.stderr, tt.stderr) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
					t.Fatalf("exit %d stdout %q stderr %q, want %q…", r.code, r.stdout, r.stderr, tt.stderr)
				}
			})
		}
	})

	// The dry run counts first, lists each attempt, and changes nothing.
	r := admin.must(t, append(append([]string{}, bulk...), "--dry-run")...)
	head, rest, _ := strings.Cut(r.stdout, "\n")
	if !regexp.MustCompile(`^dry run: 2 unknown attempts of sim-fallback would be resolved failed \(unknown since ` +
		regexp.QuoteMeta(since) + ` until -; \d+ open jobs read\); nothing changed$`).MatchString(head) {
		t.Fatalf("dry run's first line: %q", head)
	}
	for _, id := range ids {
		if !regexp.MustCompile(`\n` + id + ` +1 +bulk-[0-9a-f]{8} +20\S+Z +would_resolve\n`).MatchString("\n" + rest) {
			t.Fatalf("dry run does not list %s:\n%s", id, r.stdout)
		}
		if st := c.must(t, "get", id).stdout; !strings.HasPrefix(st, id+"  demo  unknown\n") {
			t.Fatalf("a dry run changed %s:\n%s", id, st)
		}
	}

	// The resolution: both settled failed, both jobs then run on sim-primary.
	r = admin.must(t, bulk...)
	if !strings.HasPrefix(r.stdout, "resolved 2 of 2 unknown attempts of sim-fallback as failed, 0 conflicts (") ||
		strings.Count(r.stdout, " resolved\n") != 2 {
		t.Fatalf("resolve printed:\n%s", r.stdout)
	}
	for i, w := range watches {
		w.waitLine(t, "succeeded  #1 sim-fallback failed(resolved) → #2 sim-primary succeeded")
		out := admin.must(t, "attempts", ids[i]).stdout
		if !strings.Contains(out, "\n    resolution  failed by operator-") || !strings.Contains(out, ": sim-fallback hung: its calls never ran\n") {
			t.Errorf("the resolution is not kept with the attempt:\n%s", out)
		}
	}
	// Again: nothing is unknown any more, nothing is resolved twice.
	if r := admin.must(t, bulk...); !strings.HasPrefix(r.stdout, "resolved 0 of 0 unknown attempts of sim-fallback as failed, 0 conflicts (") {
		t.Fatalf("the same command again printed:\n%s", r.stdout)
	}
}

// TestWriteProviders: a provider's lines as an operator reads them: its
// state and since when, then an override with who, when and why and the
// breaker's own state beneath it, why it changed, until when it stays open,
// its window's failures in a stable order, its counts.
func TestWriteProviders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{
			name: "OpenByItsBreaker",
			doc: `{"name":"sim-primary","state":"open","breaker_state":"open","since":"2026-12-02T01:00:00Z","reason":"5 failures within 1m0s",` +
				`"open_until":"2026-12-02T01:01:00Z","cooldown_seconds":60,"trips":2,"window_start":"2026-12-02T00:59:30Z",` +
				`"failures":{"slow":2,"unknown":3,"novel":1},"held":4,"probes":0,"opened":3}`,
			want: "sim-primary  open  since 2026-12-02T01:00:00Z\n" +
				"             reason      5 failures within 1m0s\n" +
				"             open until  2026-12-02T01:01:00Z (cooldown 60s, trip 2)\n" +
				"             failures    3 unknown, 2 slow, 1 novel since 2026-12-02T00:59:30Z\n" +
				"             counts      4 held, 0 probes, opened 3 times\n",
		},
		{
			name: "ForcedOpenOverAClosedBreaker",
			doc: `{"name":"p","state":"open","breaker_state":"closed","failures":{},"held":0,"probes":1,"opened":1,` +
				`"forced":{"state":"open","by":"op-1","reason":"status page","at":"2026-12-02T01:02:00Z"}}`,
			want: "p  open  since -\n" +
				"   forced      open by op-1 at 2026-12-02T01:02:00Z: status page\n" +
				"   breaker     closed\n" +
				"   failures    none\n" +
				"   counts      0 held, 1 probe, opened 1 time\n",
		},
		{
			// Issue 40: cancelled jobs' calls past the provider's
			// max_processing_time count no more, and show as overdue.
			name: "OverdueHolds",
			doc:  `{"name":"p","state":"closed","breaker_state":"closed","failures":{},"held":1,"overdue":3,"probes":0,"opened":0}`,
			want: "p  closed  since -\n" +
				"   failures    none\n" +
				"   counts      1 held, 3 overdue, 0 probes, opened 0 times\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p providerView
			if err := decodeAPI([]byte(tt.doc), &p); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := writeProviders(&b, []providerView{p}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestJobsOperators: what an operator (a token with jobs:admin) does with
// the CLI: every owner's open jobs, anyone's job and attempts with what the
// provider said, and resolutions the API checks (the contract, conflicts).
func TestJobsOperators(t *testing.T) {
	t.Parallel()
	c := owner(t, "owned")
	admin := owner(t, "operator", "jobs:admin")
	blocked := c.submit(t, `{"sim-primary":{"outcome":"timeout"}}`)
	w := c.startWatch(t, blocked)
	w.waitLine(t, "unknown  #1 sim-primary unknown(ambiguous)")

	// Reading first, then the resolution that unblocks the job.
	t.Run("Read", func(t *testing.T) {
		t.Run("ListAllOwners", func(t *testing.T) {
			t.Parallel()
			tests := []struct {
				name   string
				as     cli
				args   []string
				listed bool
				stderr string
			}{
				{name: "Unknown", as: admin, args: []string{"--status", "unknown"}, listed: true},
				{name: "Open", as: admin, listed: true},
				{name: "Pending", as: admin, args: []string{"--status", "pending"}},
				{name: "Finished", as: admin, args: []string{"--status", "succeeded"},
					stderr: "error 422 validation-failed: the request is not valid; see errors: status must be one of pending, running, unknown"},
				{name: "NotAnOperator", as: c, stderr: "error 403 forbidden: "},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					r := tt.as.run(t, append([]string{"list", "--all-owners", "--all", "--limit", "100"}, tt.args...)...)
					if tt.stderr != "" {
						if r.code != 1 || !strings.HasPrefix(r.stderr, tt.stderr) || strings.Count(r.stderr, "\n") != 1 {
							t.Fatalf("exit %d stderr %q, want %q…", r.code, r.stderr, tt.stderr)
						}
						return
					}
					if r.code != 0 {
						t.Fatalf("exit %d: %s", r.code, r.stderr)
					}
					row := regexp.MustCompile(`\n` + blocked + ` +unknown +demo +owned-`)
					if got := row.MatchString(r.stdout) && strings.HasPrefix(r.stdout, "ID  "); got != tt.listed {
						t.Fatalf("listed %s: %v, want %v:\n%s", blocked, got, tt.listed, r.stdout)
					}
					if tt.listed && !strings.Contains(strings.SplitN(r.stdout, "\n", 2)[0], "OWNER") {
						t.Fatalf("no OWNER column:\n%s", r.stdout)
					}
				})
			}
			// --json: each page as the API sent it, each job naming its owner.
			r := admin.must(t, "list", "--all-owners", "--status", "unknown", "--all", "--json")
			found := false
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				var page listBody
				if err := json.Unmarshal([]byte(line), &page); err != nil {
					t.Fatalf("page %q: %v", line, err)
				}
				for _, j := range page.Jobs {
					found = found || (j.ID == blocked && strings.HasPrefix(j.Owner, "owned-"))
				}
			}
			if !found {
				t.Fatalf("--json pages lack %s:\n%s", blocked, r.stdout)
			}
		})

		t.Run("AnyOwnersJob", func(t *testing.T) {
			t.Parallel()
			id := c.submit(t, `{"sim-primary":{"outcome":"error"}}`)
			if r := c.finish(t, id); r.code != 0 {
				t.Fatalf("watch: %d\n%s", r.code, r.stdout)
			}
			if out := admin.must(t, "get", id).stdout; !strings.Contains(out, "\n  owner         owned-") || !strings.Contains(out, "\n  usage         ") {
				t.Errorf("an operator's get:\n%s", out)
			}
			out := admin.must(t, "attempts", id).stdout
			for _, want := range []string{"\n#1  sim-primary   failed     took ", "\n    error       retryable: ", "\n    provider    status 503, \"",
				"\n    request     sim-", "\n#2  sim-fallback  succeeded  won, took ", "\n    usage       model "} {
				if !strings.Contains(out, want) {
					t.Errorf("an operator's attempts lack %q:\n%s", want, out)
				}
			}
			// The owner sees the class, never the provider's words.
			if out := c.must(t, "attempts", id).stdout; strings.Contains(out, "provider    ") || strings.Contains(out, "request     ") {
				t.Errorf("the owner's attempts show what only operators see:\n%s", out)
			}
		})

	})

	t.Run("Resolve", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.json")
		good := filepath.Join(t.TempDir(), "good.json")
		for file, body := range map[string]string{bad: `{"provider":"operator","text":"done"}`, good: `{"provider":"operator","text":"operator: done"}`} {
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// A result that breaks the type's contract is refused, nothing written.
		r := admin.run(t, "resolve", blocked, "1", "--outcome", "succeeded", "--reason", "the provider answered", "--result", "@"+bad)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "error 422 result-violates-contract: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("bad result: exit %d %q", r.code, r.stderr)
		}
		r = admin.must(t, "resolve", blocked, "1", "--outcome", "succeeded", "--reason", "the provider answered", "--result", "@"+good)
		if r.stdout != "resolved attempt 1 as succeeded\n"+blocked+"  succeeded  #1 sim-primary succeeded\n" {
			t.Fatalf("resolve printed %q", r.stdout)
		}
		w.waitLine(t, "succeeded  #1 sim-primary succeeded")
		if code := w.exit(t); code != 0 {
			t.Fatalf("watch exit %d\n%s", code, w.stdout)
		}
		if !strings.Contains(w.stdout.String(), `  result  {"provider":"operator","text":"operator: done"}`) {
			t.Errorf("watch output:\n%s", w.stdout)
		}
		// Another resolution of the settled attempt is a conflict naming its state.
		r = admin.run(t, "resolve", blocked, "1", "--outcome", "failed", "--reason", "second thoughts")
		if r.code != 1 || !strings.HasPrefix(r.stderr, "error 409 resolution-conflict: ") || !strings.HasSuffix(r.stderr, " (attempt is succeeded)\n") {
			t.Fatalf("second resolution: exit %d %q", r.code, r.stderr)
		}
		out := admin.must(t, "attempts", blocked).stdout
		if !strings.Contains(out, "\n    resolution  succeeded by operator-") || !strings.Contains(out, ": the provider answered\n") {
			t.Errorf("an operator's attempts:\n%s", out)
		}
		if out := c.must(t, "attempts", blocked).stdout; !strings.Contains(out, "\n    resolution  succeeded at ") || strings.Contains(out, "the provider answered") {
			t.Errorf("the owner's attempts:\n%s", out)
		}
	})
}

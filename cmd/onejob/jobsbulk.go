package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"
)

// An incident's tool: `onejob jobs resolve --provider P [--since T]
// [--until T] --outcome failed|cancelled --reason TEXT [--dry-run]`
// resolves every unknown attempt of P that became unknown within the window
// (POST /v1/admin/attempts/resolve). Each attempt is still its own
// conditional write on the server, idempotent and audited; the CLI only
// follows next_cursor until the API has read every open job, and sums.

// bulkFlags are the flags that select attempts by provider and window.
type bulkFlags struct {
	provider     string
	since, until string
	dryRun       bool
}

func (b *bulkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.provider, "provider", "", "resolve every unknown attempt of this provider (selected by --since and --until) instead of one")
	fs.StringVar(&b.since, "since", "", "with --provider: attempts unknown since this time or later: RFC 3339, or a duration ago (90m)")
	fs.StringVar(&b.until, "until", "", "with --provider: attempts unknown since before this time: RFC 3339, or a duration ago")
	fs.BoolVar(&b.dryRun, "dry-run", false, "with --provider: count and list what would be resolved, and change nothing")
}

// given reports whether any selecting flag other than --provider was set.
func (b bulkFlags) given() bool { return b.since != "" || b.until != "" || b.dryRun }

// windowTime reads a window's end: an RFC 3339 time, or a duration before
// now ("90m": 90 minutes ago). "" is an open end.
func windowTime(flagName, v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("--%s %q is neither an RFC 3339 time (2026-12-02T01:00:00Z) nor a duration ago (90m)", flagName, v)
}

// bulkAttemptView is one attempt a bulk resolution matched (the API's
// BulkResolveResult.attempts[]).
type bulkAttemptView struct {
	JobID        string `json:"job_id"`
	Owner        string `json:"owner"`
	Attempt      int    `json:"attempt"`
	UnknownSince string `json:"unknown_since"`
	Result       string `json:"result"`
}

type bulkResultView struct {
	DryRun     bool              `json:"dry_run"`
	Matched    int               `json:"matched"`
	Resolved   int               `json:"resolved"`
	Conflicts  int               `json:"conflicts"`
	Scanned    int               `json:"scanned"`
	Attempts   []bulkAttemptView `json:"attempts"`
	NextCursor string            `json:"next_cursor"`
}

// maxBulkRounds bounds how many requests one command sends (the API reads
// at most 1,000 open jobs per request).
const maxBulkRounds = 1000

func jobsResolveBulk(ctx context.Context, c *jobsCmd, b bulkFlags, outcome, reason string) error {
	if outcome == "" || reason == "" {
		return errors.New("resolve --provider needs --outcome (failed or cancelled) and --reason, with --dry-run too: " +
			"the dry run checks the same request the real one sends")
	}
	now := time.Now()
	from, err := windowTime("since", b.since, now)
	if err != nil {
		return err
	}
	to, err := windowTime("until", b.until, now)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	type request struct {
		Provider string `json:"provider"`
		From     string `json:"unknown_since_from,omitempty"`
		To       string `json:"unknown_since_to,omitempty"`
		Outcome  string `json:"outcome"`
		Reason   string `json:"reason"`
		DryRun   bool   `json:"dry_run"`
		Cursor   string `json:"cursor,omitempty"`
	}
	req := request{Provider: b.provider, From: from, To: to, Outcome: outcome, Reason: reason, DryRun: b.dryRun}
	var sum bulkResultView
	seen := map[string]bool{}
	for range maxBulkRounds {
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		resp, err := cl.do(ctx, apiCall{method: http.MethodPost, path: "/v1/admin/attempts/resolve", body: body})
		if err != nil {
			if sum.Resolved > 0 {
				// What is done stays done; say so before the error.
				fmt.Fprintf(c.stderr, "resolved %d attempt(s) before this error; the same command resolves the rest\n", sum.Resolved)
			}
			return err
		}
		var page bulkResultView
		if err := decodeAPI(resp.body, &page); err != nil {
			return fmt.Errorf("the API answered with a body that is not a bulk resolution: %w", err)
		}
		if c.json {
			c.printJSON(resp.body) // one answer per line
		}
		sum.Matched += page.Matched
		sum.Resolved += page.Resolved
		sum.Conflicts += page.Conflicts
		sum.Scanned += page.Scanned
		sum.Attempts = append(sum.Attempts, page.Attempts...)
		if page.NextCursor == "" {
			if !c.json {
				return writeBulk(c.stdout, b, outcome, from, to, sum)
			}
			return nil
		}
		if seen[page.NextCursor] {
			return fmt.Errorf("the API returned cursor %q twice; stopping", page.NextCursor)
		}
		seen[page.NextCursor] = true
		req.Cursor = page.NextCursor
	}
	return fmt.Errorf("stopped after %d requests; the same command goes on", maxBulkRounds)
}

// writeBulk prints the count first, then each attempt matched.
func writeBulk(out io.Writer, b bulkFlags, outcome, from, to string, r bulkResultView) error {
	window := "unknown since " + orDash(from) + " until " + orDash(to)
	if from == "" && to == "" {
		window = "unknown at any time"
	}
	attempts := plural(fmt.Sprint(r.Matched), "unknown attempt")
	if b.dryRun {
		fmt.Fprintf(out, "dry run: %s of %s would be resolved %s (%s; %s read); nothing changed\n",
			attempts, b.provider, outcome, window, plural(fmt.Sprint(r.Scanned), "open job"))
	} else {
		fmt.Fprintf(out, "resolved %d of %s of %s as %s, %s (%s; %s read)\n", r.Resolved, attempts, b.provider, outcome,
			plural(fmt.Sprint(r.Conflicts), "conflict"), window, plural(fmt.Sprint(r.Scanned), "open job"))
	}
	if len(r.Attempts) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tATTEMPT\tOWNER\tUNKNOWN SINCE\tRESULT")
	for _, a := range r.Attempts {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", a.JobID, a.Attempt, orDash(a.Owner), orDash(a.UnknownSince), oneLine(a.Result))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if n := r.Matched - len(r.Attempts); n > 0 {
		_, err := fmt.Fprintf(out, "(%s not listed: the API names at most 200 per request)\n", plural(fmt.Sprint(n), "more attempt"))
		return err
	}
	return nil
}

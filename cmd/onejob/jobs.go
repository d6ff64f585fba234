package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// jobsCommand is the HTTP API from a terminal:
//
//	onejob jobs submit|get|list|attempts|watch|cancel|resolve [flags]
//
// and the operators' incident tools beside it (providers.go).
//
// It talks to the API only (--api or $ONEJOB_API_URL, with --token or
// $ONEJOB_TOKEN), as any client would.
func jobsCommand(ctx context.Context, args []string) error {
	if code := runJobs(ctx, args, os.Getenv, os.Stdout, os.Stderr); code != 0 {
		return exitCode(code)
	}
	return nil
}

// Environment variables the jobs commands read.
const (
	envAPIURL = "ONEJOB_API_URL"
	envToken  = "ONEJOB_TOKEN"
	// defaultAPIURL is where `onejob run` serves the API.
	defaultAPIURL = "http://127.0.0.1:8080"
)

// jobsSubcommand is one `onejob jobs` subcommand.
type jobsSubcommand struct {
	name     string
	synopsis string
	summary  string
	run      func(ctx context.Context, c *jobsCmd, args []string) error
	// failCode is the exit status when the command fails (watch keeps 1
	// and 2 for the job's own outcomes).
	failCode int
}

// jobsSubcommands is the one list of subcommands: dispatch and usage.
func jobsSubcommands() []jobsSubcommand {
	return []jobsSubcommand{
		{"submit", "--type T --input @file.json|JSON [--key K] [--providers a,b] [--stream]",
			"create a job, or replay the one the key names; prints the key it used", jobsSubmit, 1},
		{"get", "ID", "one job", jobsGet, 1},
		{"list", "[--status S] [--limit N] [--cursor C] [--all] [--all-owners]",
			"your jobs, newest first; --all-owners: every owner's open jobs, oldest first (jobs:admin)", jobsList, 1},
		{"attempts", "ID", "a job's attempts, with their usage and resolutions", jobsAttempts, 1},
		{"watch", "ID [--stream]", "follow a job, one line per change (--stream: its answer as it forms), until it ends: exit 0 succeeded, 1 failed, 2 cancelled, 3 otherwise",
			jobsWatch, exitWatchStopped},
		{"cancel", "ID [--reason TEXT]", "cancel a job; the job keeps who cancelled it and why", jobsCancel, 1},
		{"resolve", "ID N --outcome succeeded|failed|cancelled --reason TEXT [--result @file.json|JSON]\n" +
			"            | --provider P [--since T] [--until T] --outcome failed|cancelled --reason TEXT [--dry-run]",
			"settle unknown attempt N of a job; or, given --provider, every unknown attempt of P that became unknown\n" +
				"              in [--since, --until), each its own audited write: --dry-run counts them first (jobs:admin)", jobsResolve, 1},
	}
}

// runJobs runs `onejob jobs <args>` and returns the exit status.
func runJobs(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	return runGroup(ctx, commandGroup{name: "jobs", subs: jobsSubcommands()}, args, env, stdout, stderr)
}

// commandGroup is a command made of subcommands that talk to the API
// (`onejob jobs …`, `onejob providers …`), all taking the same flags.
type commandGroup struct {
	name string
	subs []jobsSubcommand
	// dflt is the subcommand run when none is named ("": none is).
	dflt string
}

// runGroup runs one of g's subcommands and returns the exit status. Errors
// are one line on stderr: the API's problem (status, type, detail, field
// errors, the job concerned), or why no answer came.
func runGroup(ctx context.Context, g commandGroup, args []string, env func(string) string, stdout, stderr io.Writer) int {
	help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help")
	if g.dflt != "" && !help && (len(args) == 0 || strings.HasPrefix(args[0], "-")) {
		args = append([]string{g.dflt}, args...)
	}
	if len(args) == 0 || help {
		fmt.Fprint(stderr, groupUsage(g))
		if len(args) == 0 {
			return 1
		}
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "error: flags go after the subcommand: onejob %s <subcommand> %s … (subcommands: %s)\n", g.name, args[0], subcommandNames(g.subs))
		return 1
	}
	for _, sub := range g.subs {
		if sub.name != args[0] {
			continue
		}
		c := newJobsCmd(g.name, sub, env, stdout, stderr)
		err := sub.run(ctx, c, args[1:])
		var code exitCode
		var told *reportedError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &code):
			return int(code)
		case errors.As(err, &told):
		default:
			c.fail(err)
		}
		return sub.failCode
	}
	fmt.Fprintf(stderr, "error: unknown %s subcommand %q (want %s)\n", g.name, args[0], subcommandNames(g.subs))
	return 1
}

func subcommandNames(subs []jobsSubcommand) string {
	names := make([]string, 0, len(subs))
	for _, s := range subs {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func groupUsage(g commandGroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: onejob %s <subcommand> [flags]\n", g.name)
	if g.dflt != "" {
		fmt.Fprintf(&b, "       onejob %s [flags]  (the same as %s)\n", g.name, g.dflt)
	}
	b.WriteString("\n")
	for _, s := range g.subs {
		fmt.Fprintf(&b, "%s\n  %-9s   %s\n", strings.TrimRight(fmt.Sprintf("  %-9s %s", s.name, s.synopsis), " "), "", s.summary)
	}
	fmt.Fprintf(&b, "\nEvery subcommand takes --api URL ($%s, default %s), --token T ($%s)\n"+
		"and --json (print the API's JSON as is). Errors are one line on stderr.\n"+
		"'onejob %s <subcommand> -h' describes its flags.\n", envAPIURL, defaultAPIURL, envToken, g.name)
	return b.String()
}

// jobsCmd is one run of a subcommand: its flags (those every subcommand
// shares registered), its environment and its output.
type jobsCmd struct {
	group          string
	sub            jobsSubcommand
	fs             *flag.FlagSet
	env            func(string) string
	stdout, stderr io.Writer

	api, token string
	json       bool
}

func newJobsCmd(group string, sub jobsSubcommand, env func(string) string, stdout, stderr io.Writer) *jobsCmd {
	c := &jobsCmd{group: group, sub: sub, fs: flag.NewFlagSet(group+" "+sub.name, flag.ContinueOnError), env: env, stdout: stdout, stderr: stderr}
	c.fs.SetOutput(stderr)
	// No defaults from the environment here: PrintDefaults would show the token.
	c.fs.StringVar(&c.api, "api", "", fmt.Sprintf("the HTTP API's base URL (default $%s, else %s)", envAPIURL, defaultAPIURL))
	c.fs.StringVar(&c.token, "token", "", fmt.Sprintf("bearer token (default $%s; locally: the one make run printed, or onejob token --sub user-1 --secret S)", envToken))
	c.fs.BoolVar(&c.json, "json", false, "print the API's JSON as is (a problem too), for scripts")
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: onejob %s %s %s\n\n%s.\n\n", group, sub.name, sub.synopsis, sub.summary)
		c.fs.PrintDefaults()
	}
	return c
}

// reportedError is an error already shown to the user (the flag package
// prints its own).
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// parse parses flags wherever they stand among the arguments (`get ID
// --json` as well as `get --json ID`; after "--" everything is positional)
// and returns the positional ones, which must be as many as names.
func (c *jobsCmd) parse(args []string, names ...string) ([]string, error) {
	pos, err := c.parseAny(args)
	if err != nil {
		return nil, err
	}
	return pos, c.wantArgs(pos, names...)
}

// parseAny is parse for a subcommand whose flags decide which arguments it
// takes: it returns the positional ones, however many (wantArgs checks them).
func (c *jobsCmd) parseAny(args []string) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, &reportedError{err}
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if c.api == "" {
		c.api = c.env(envAPIURL)
	}
	if c.api == "" {
		c.api = defaultAPIURL
	}
	if c.token == "" {
		c.token = c.env(envToken)
	}
	return pos, nil
}

// wantArgs refuses positional arguments other than as many as names.
func (c *jobsCmd) wantArgs(pos []string, names ...string) error {
	if len(pos) == len(names) {
		return nil
	}
	want := "no arguments"
	if len(names) > 0 {
		want = strings.Join(names, " ")
	}
	return fmt.Errorf("%s wants %s, got %d argument(s) (usage: onejob %s %s %s)", c.sub.name, want, len(pos), c.group, c.sub.name, c.sub.synopsis)
}

// client is the API client for the parsed flags.
func (c *jobsCmd) client() (*apiClient, error) { return newAPIClient(c.api, c.token) }

// fail shows an error: one line on stderr and, with --json, the problem
// document the API sent on stdout.
func (c *jobsCmd) fail(err error) {
	var pe *problemError
	if c.json && errors.As(err, &pe) && json.Valid(pe.body) {
		c.printJSON(pe.body)
	}
	line := err.Error()
	if !strings.HasPrefix(line, "error") {
		line = "error: " + line
	}
	fmt.Fprintln(c.stderr, oneLine(line))
}

// printJSON writes an API body as is, on one line of its own.
func (c *jobsCmd) printJSON(body []byte) {
	fmt.Fprintln(c.stdout, compactJSON(body))
}

// jobPath is the path of a job, or of something under it.
func jobPath(id string, under ...string) string {
	return "/v1/jobs/" + strings.Join(append([]string{url.PathEscape(id)}, under...), "/")
}

// jsonArg reads a JSON flag value: the JSON itself, or @file.
func jsonArg(flagName, v string) (json.RawMessage, error) {
	raw := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		raw = b
	}
	var probe any
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("--%s is not JSON: %v", flagName, err)
	}
	return raw, nil
}

// newKey is a fresh Idempotency-Key: 128 random bits, in hex.
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func jobsSubmit(ctx context.Context, c *jobsCmd, args []string) error {
	typ := c.fs.String("type", "", "the job type (required)")
	input := c.fs.String("input", "", "the job's input: JSON, or @file.json (required)")
	key := c.fs.String("key", "", "the Idempotency-Key naming this intent (default: a new random 128-bit key; submit again with it to replay)")
	providers := c.fs.String("providers", "", "providers in failover order, comma-separated (default: the type's)")
	tier := c.fs.String("tier", "", "how long the job may wait: now, 2h, 8h or 24h (a cheaper completion window: an asynchronous provider's, a flex tier, a provider batch; default: the type's)")
	stream := c.fs.Bool("stream", false, `record the answer as it forms ("stream": true), to follow with watch --stream`)
	if _, err := c.parse(args); err != nil {
		return err
	}
	if *typ == "" || *input == "" {
		return errors.New("submit needs --type and --input")
	}
	in, err := jsonArg("input", *input)
	if err != nil {
		return err
	}
	req := struct {
		Type      string          `json:"type"`
		Input     json.RawMessage `json:"input"`
		Providers []string        `json:"providers,omitempty"`
		Tier      string          `json:"tier,omitempty"`
		Stream    bool            `json:"stream,omitempty"`
	}{Type: *typ, Input: in, Tier: *tier, Stream: *stream}
	for _, p := range strings.Split(*providers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			req.Providers = append(req.Providers, p)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	k := *key
	if k == "" {
		k = newKey()
	}
	// The key is shown before the request goes out: whatever becomes of
	// it, submitting again with this key cannot make a second job.
	keyOut := c.stdout
	if c.json {
		keyOut = c.stderr
	}
	fmt.Fprintln(keyOut, "key "+k)
	resp, err := cl.do(ctx, apiCall{method: http.MethodPost, path: "/v1/jobs", header: http.Header{"Idempotency-Key": {k}}, body: body})
	if err != nil {
		if transient(err) {
			return fmt.Errorf("%w (the job may exist: submit again with --key %s)", err, k)
		}
		return err
	}
	if c.json {
		c.printJSON(resp.body)
		return nil
	}
	var j jobView
	if err := decodeAPI(resp.body, &j); err != nil {
		return fmt.Errorf("the API answered %d with a body that is not a job: %w", resp.status, err)
	}
	verb := "created"
	if resp.status == http.StatusOK {
		verb = "replayed"
	}
	_, err = fmt.Fprintf(c.stdout, "%s %s  %s  %s\n", verb, j.ID, j.Type, statusLine(j))
	return err
}

func jobsGet(ctx context.Context, c *jobsCmd, args []string) error {
	pos, err := c.parse(args, "ID")
	if err != nil {
		return err
	}
	j, body, err := c.getJob(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(body)
		return nil
	}
	return writeJob(c.stdout, j)
}

// getJob reads one job.
func (c *jobsCmd) getJob(ctx context.Context, id string) (jobView, []byte, error) {
	cl, err := c.client()
	if err != nil {
		return jobView{}, nil, err
	}
	resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: jobPath(id)})
	if err != nil {
		return jobView{}, nil, err
	}
	var j jobView
	if err := decodeAPI(resp.body, &j); err != nil {
		return jobView{}, nil, fmt.Errorf("the API answered with a body that is not a job: %w", err)
	}
	return j, resp.body, nil
}

func jobsList(ctx context.Context, c *jobsCmd, args []string) error {
	status := c.fs.String("status", "", "only jobs in this status (with --all-owners: pending, running or unknown)")
	limit := c.fs.Int("limit", 0, "jobs per page, 1 to 100 (default: the API's, 20)")
	cursor := c.fs.String("cursor", "", "start at a previous page's next_cursor")
	all := c.fs.Bool("all", false, "follow next_cursor to the last page")
	allOwners := c.fs.Bool("all-owners", false, "every owner's open jobs, oldest first (GET /v1/admin/jobs; needs jobs:admin)")
	if _, err := c.parse(args); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	path := "/v1/jobs"
	if *allOwners {
		path = "/v1/admin/jobs"
	}
	var jobs []jobView
	next, seen := *cursor, map[string]bool{}
	for {
		q := url.Values{}
		if *status != "" {
			q.Set("status", *status)
		}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		if next != "" {
			q.Set("cursor", next)
		}
		p := path
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
		resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: p})
		if err != nil {
			return err
		}
		var page listBody
		if err := decodeAPI(resp.body, &page); err != nil {
			return fmt.Errorf("the API answered with a body that is not a listing: %w", err)
		}
		if c.json {
			c.printJSON(resp.body) // with --all, one page per line
		}
		jobs = append(jobs, page.Jobs...)
		next = page.NextCursor
		if !*all || next == "" {
			break
		}
		if seen[next] {
			return fmt.Errorf("the API returned cursor %q twice; stopping", next)
		}
		seen[next] = true
	}
	if c.json {
		return nil
	}
	switch {
	case len(jobs) == 0 && next != "":
		// The admin listing filters a page after reading it: an empty
		// page may have more after it.
		fmt.Fprintln(c.stdout, "no jobs on this page")
	case len(jobs) == 0:
		fmt.Fprintln(c.stdout, "no jobs")
	default:
		if err := writeJobList(c.stdout, jobs); err != nil {
			return err
		}
	}
	if next != "" {
		fmt.Fprintf(c.stderr, "more: --cursor %s (or --all)\n", next)
	}
	return nil
}

func jobsAttempts(ctx context.Context, c *jobsCmd, args []string) error {
	pos, err := c.parse(args, "ID")
	if err != nil {
		return err
	}
	atts, body, err := c.getAttempts(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(body)
		return nil
	}
	fmt.Fprintf(c.stdout, "%s  %s\n", atts.JobID, plural(strconv.Itoa(len(atts.Attempts)), "attempt"))
	return writeAttempts(c.stdout, "", atts.Attempts)
}

// getAttempts reads a job's attempts.
func (c *jobsCmd) getAttempts(ctx context.Context, id string) (attemptsBody, []byte, error) {
	cl, err := c.client()
	if err != nil {
		return attemptsBody{}, nil, err
	}
	resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: jobPath(id, "attempts")})
	if err != nil {
		return attemptsBody{}, nil, err
	}
	var atts attemptsBody
	if err := decodeAPI(resp.body, &atts); err != nil {
		return attemptsBody{}, nil, fmt.Errorf("the API answered with a body that is not an attempt list: %w", err)
	}
	return atts, resp.body, nil
}

func jobsCancel(ctx context.Context, c *jobsCmd, args []string) error {
	reason := c.fs.String("reason", "", "why the job is cancelled")
	pos, err := c.parse(args, "ID")
	if err != nil {
		return err
	}
	var body []byte
	if *reason != "" {
		if body, err = json.Marshal(map[string]string{"reason": *reason}); err != nil {
			return err
		}
	}
	return c.postJob(ctx, jobPath(pos[0], "cancel"), body, "")
}

// jobsResolve settles one unknown attempt (ID N), or, given --provider,
// every unknown attempt of that provider within a window (jobsResolveBulk).
func jobsResolve(ctx context.Context, c *jobsCmd, args []string) error {
	outcome := c.fs.String("outcome", "", "how the attempt ended: succeeded, failed or cancelled; with --provider: failed or cancelled (required)")
	reason := c.fs.String("reason", "", "why you know, e.g. what the provider said (required; kept with each resolution)")
	result := c.fs.String("result", "", "the attempt's result for --outcome succeeded: JSON, or @file.json (one attempt only)")
	var bulk bulkFlags
	bulk.register(c.fs)
	pos, err := c.parseAny(args)
	if err != nil {
		return err
	}
	if bulk.provider != "" {
		if err := c.wantArgs(pos); err != nil {
			return fmt.Errorf("%w; with --provider, attempts are selected by provider and window, not named", err)
		}
		if *result != "" {
			return errors.New("resolve: --result settles one attempt as succeeded; with --provider the outcome is failed or cancelled")
		}
		return jobsResolveBulk(ctx, c, bulk, *outcome, *reason)
	}
	if bulk.given() {
		return errors.New("resolve: --since, --until and --dry-run select attempts by provider: give --provider too")
	}
	if err := c.wantArgs(pos, "ID", "N"); err != nil {
		return err
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 1 {
		return fmt.Errorf("resolve: the attempt number %q is not a positive integer", pos[1])
	}
	if *outcome == "" || *reason == "" {
		return errors.New("resolve needs --outcome and --reason")
	}
	req := struct {
		Outcome string          `json:"outcome"`
		Reason  string          `json:"reason"`
		Result  json.RawMessage `json:"result,omitempty"`
	}{Outcome: *outcome, Reason: *reason}
	if *result != "" {
		if req.Result, err = jsonArg("result", *result); err != nil {
			return err
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("--result: %w", err)
	}
	return c.postJob(ctx, jobPath(pos[0], "attempts", strconv.Itoa(n), "resolve"), body,
		fmt.Sprintf("resolved attempt %d as %s", n, *outcome))
}

// postJob sends a POST answered with a job and prints it: the API's JSON,
// or a line (after done, when given).
func (c *jobsCmd) postJob(ctx context.Context, path string, body []byte, done string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.do(ctx, apiCall{method: http.MethodPost, path: path, body: body})
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(resp.body)
		return nil
	}
	var j jobView
	if err := decodeAPI(resp.body, &j); err != nil {
		return fmt.Errorf("the API answered with a body that is not a job: %w", err)
	}
	if done != "" {
		fmt.Fprintln(c.stdout, done)
	}
	_, err = fmt.Fprintf(c.stdout, "%s  %s\n", j.ID, statusLine(j))
	return err
}

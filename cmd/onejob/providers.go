package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/onejob/onejob/internal/job"
)

// providersCommand is the providers' health from a terminal (operators):
//
//	onejob providers [list]
//	onejob providers force NAME --state open|closed|clear --reason TEXT
//
// It talks to the API only, with the same flags as `onejob jobs`.
func providersCommand(ctx context.Context, args []string) error {
	if code := runProviders(ctx, args, os.Getenv, os.Stdout, os.Stderr); code != 0 {
		return exitCode(code)
	}
	return nil
}

// runProviders runs `onejob providers <args>` and returns the exit status.
func runProviders(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	return runGroup(ctx, commandGroup{name: "providers", subs: providersSubcommands(), dflt: "list"}, args, env, stdout, stderr)
}

// providersSubcommands is the one list of `onejob providers` subcommands.
func providersSubcommands() []jobsSubcommand {
	return []jobsSubcommand{
		{"list", "", "every provider's health: its state as attempts see it, why and since when, its counts,\n" +
			"              an operator's override (jobs:admin)", providersList, 1},
		{"force", "NAME --state open|closed|clear --reason TEXT",
			"force a provider open (no new attempts) or closed (attempts whatever its breaker says), or clear the override;\n" +
				"              who, when and why are kept (jobs:admin)", providersForce, 1},
	}
}

// The API's Provider and ProviderList (internal/apigw/providers.go and
// openapi.yaml are the source).

type forcedView struct {
	State  string `json:"state"`
	By     string `json:"by"`
	Reason string `json:"reason"`
	At     string `json:"at"`
}

type providerView struct {
	Name            string         `json:"name"`
	State           string         `json:"state"`
	BreakerState    string         `json:"breaker_state"`
	Since           string         `json:"since"`
	Reason          string         `json:"reason"`
	OpenUntil       string         `json:"open_until"`
	CooldownSeconds int64          `json:"cooldown_seconds"`
	Trips           int            `json:"trips"`
	WindowStart     string         `json:"window_start"`
	Failures        map[string]int `json:"failures"`
	Held            int            `json:"held"`
	Overdue         int            `json:"overdue"`
	Probes          int            `json:"probes"`
	Opened          int            `json:"opened"`
	Forced          *forcedView    `json:"forced"`
}

type providersBody struct {
	Providers []providerView `json:"providers"`
}

const providersPath = "/v1/admin/providers"

func providersList(ctx context.Context, c *jobsCmd, args []string) error {
	if _, err := c.parse(args); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: providersPath})
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(resp.body)
		return nil
	}
	var list providersBody
	if err := decodeAPI(resp.body, &list); err != nil {
		return fmt.Errorf("the API answered with a body that is not a provider list: %w", err)
	}
	if len(list.Providers) == 0 {
		_, err := fmt.Fprintln(c.stdout, "no providers")
		return err
	}
	return writeProviders(c.stdout, list.Providers)
}

// forceStates maps the CLI's words to the API's: clear lifts the override
// (the API's auto, accepted too).
var forceStates = map[string]string{"open": "open", "closed": "closed", "clear": "auto", "auto": "auto"}

func providersForce(ctx context.Context, c *jobsCmd, args []string) error {
	state := c.fs.String("state", "", "open, closed, or clear (lift the override: the breaker decides again) (required)")
	reason := c.fs.String("reason", "", "why, e.g. the provider's status page (required; kept with the override and logged)")
	pos, err := c.parse(args, "NAME")
	if err != nil {
		return err
	}
	apiState, ok := forceStates[*state]
	if !ok || *reason == "" {
		return errors.New("force needs --state open, closed or clear, and --reason")
	}
	body, err := json.Marshal(map[string]string{"state": apiState, "reason": *reason})
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.do(ctx, apiCall{method: http.MethodPost, path: providersPath + "/" + url.PathEscape(pos[0]) + "/force", body: body})
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(resp.body)
		return nil
	}
	var p providerView
	if err := decodeAPI(resp.body, &p); err != nil {
		return fmt.Errorf("the API answered with a body that is not a provider: %w", err)
	}
	if apiState == "auto" {
		fmt.Fprintf(c.stdout, "cleared the override of %s: its breaker decides\n", p.Name)
	} else {
		fmt.Fprintf(c.stdout, "forced %s %s\n", p.Name, apiState)
	}
	return writeProviders(c.stdout, []providerView{p})
}

// writeProviders prints each provider on a line (name, state as attempts
// see it, since when) and what more is known of it on indented lines below:
// why, until when it stays open, its counts, an operator's override.
func writeProviders(out io.Writer, providers []providerView) error {
	var nameW, stateW int
	for _, p := range providers {
		nameW = max(nameW, len(p.Name))
		stateW = max(stateW, len(p.State))
	}
	var b strings.Builder
	for _, p := range providers {
		line := fmt.Sprintf("%-*s  %-*s  since %s", nameW, p.Name, stateW, p.State, orDash(p.Since))
		b.WriteString(line + "\n")
		detail := func(k, v string) {
			if v != "" {
				fmt.Fprintf(&b, "%*s  %-10s  %s\n", nameW, "", k, v)
			}
		}
		if f := p.Forced; f != nil {
			detail("forced", fmt.Sprintf("%s by %s at %s: %s", orDash(f.State), orDash(f.By), orDash(f.At), oneLine(f.Reason)))
			if p.BreakerState != "" && p.BreakerState != p.State {
				detail("breaker", p.BreakerState)
			}
		}
		detail("reason", oneLine(p.Reason))
		if p.OpenUntil != "" {
			detail("open until", fmt.Sprintf("%s (cooldown %ds, trip %d)", p.OpenUntil, p.CooldownSeconds, p.Trips))
		}
		failures := failuresText(p.Failures)
		if p.WindowStart != "" {
			failures += " since " + p.WindowStart
		}
		detail("failures", failures)
		// Overdue: cancelled jobs' calls past the provider's
		// max_processing_time, no longer counted (shown when there are).
		overdue := ""
		if p.Overdue > 0 {
			overdue = fmt.Sprintf(", %d overdue", p.Overdue)
		}
		detail("counts", fmt.Sprintf("%s held%s, %s, opened %s", fmt.Sprint(p.Held), overdue, plural(fmt.Sprint(p.Probes), "probe"),
			plural(fmt.Sprint(p.Opened), "time")))
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// failuresText is a window's failures by kind, in job.FailureKinds order
// (kinds this CLI does not know after them, by name), or "none".
func failuresText(f map[string]int) string {
	known := make([]string, 0, len(job.FailureKinds()))
	for _, k := range job.FailureKinds() {
		known = append(known, string(k))
	}
	kinds := make([]string, 0, len(f))
	for k := range f {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := slices.Index(known, kinds[i]), slices.Index(known, kinds[j])
		if a < 0 {
			a = len(known)
		}
		if b < 0 {
			b = len(known)
		}
		if a != b {
			return a < b
		}
		return kinds[i] < kinds[j]
	})
	var parts []string
	for _, k := range kinds {
		if n := f[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, termSafe(k)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

package jobtype

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// CaseResult is the outcome of one contract case.
type CaseResult struct {
	Case              string
	Passed            bool
	PromptChars       int
	ProviderRequestID string
	Model             string
	Output            json.RawMessage
	// Err is the render or call error, if any (also listed in Violations).
	Err        error
	Violations []Violation
}

// Report is the outcome of running a type's contract cases on a provider.
type Report struct {
	JobType         string
	Version         int
	ContractVersion string
	Provider        string
	InputLimitChars int
	Cases           []CaseResult
}

// Passed reports whether every case passed. A run without cases certifies
// nothing, so it does not pass.
func (r Report) Passed() bool {
	if len(r.Cases) == 0 {
		return false
	}
	for _, c := range r.Cases {
		if !c.Passed {
			return false
		}
	}
	return true
}

// String renders a readable per-case report naming cases and violations.
func (r Report) String() string {
	passed := 0
	for _, c := range r.Cases {
		if c.Passed {
			passed++
		}
	}
	verdict := "FAIL"
	if r.Passed() {
		verdict = "PASS"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "contract %s v%d (contract %s) on provider %s: %s, %d/%d cases passed\n",
		r.JobType, r.Version, r.ContractVersion, r.Provider, verdict, passed, len(r.Cases))
	for _, c := range r.Cases {
		status := "PASS"
		if !c.Passed {
			status = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s", status, c.Case)
		if c.ProviderRequestID != "" {
			fmt.Fprintf(&b, " (request %s)", c.ProviderRequestID)
		}
		b.WriteByte('\n')
		for _, v := range c.Violations {
			fmt.Fprintf(&b, "      - %s\n", v)
		}
	}
	return b.String()
}

// RunContract runs each case against p: render, check the prompt (system +
// user, in characters) fits inputLimitChars (<= 0: no limit), call with the
// type's timeout, then check the output against the contract (schema, unknown
// keys, semantic checks) and the case's expectations. Cases run one after
// another so a provider's rate limit is not tripped by the run itself.
// It does no I/O besides the provider calls and never fails as a whole: every
// problem lands in the report.
func RunContract(ctx context.Context, t *Type, p provider.Provider, cases []Case, inputLimitChars int) Report {
	r := Report{
		JobType:         t.Name(),
		Version:         t.Version(),
		ContractVersion: t.ContractVersion(),
		Provider:        p.Name(),
		InputLimitChars: inputLimitChars,
		Cases:           make([]CaseResult, 0, len(cases)),
	}
	run := runID()
	for _, c := range cases {
		r.Cases = append(r.Cases, runCase(ctx, t, p, c, run, inputLimitChars))
	}
	return r
}

func runCase(ctx context.Context, t *Type, p provider.Provider, c Case, run string, limit int) CaseResult {
	res := CaseResult{Case: c.Name}
	fail := func(v Violation) CaseResult {
		res.Violations = append(res.Violations, v)
		return res
	}
	// A fresh job id per run: a provider that honours Idempotency-Key must
	// not replay an earlier run's answer.
	jobID := fmt.Sprintf("contract-%s-%s-%s", t.Name(), c.Name, run)
	req, err := t.Request(c.Input)
	req.JobID, req.Attempt, req.IdempotencyKey = jobID, 1, job.AttemptKey(jobID, 1)
	if err != nil {
		res.Err = err
		return fail(Violation{Rule: RuleRender, Message: err.Error()})
	}
	res.PromptChars = utf8.RuneCountInString(req.System) + utf8.RuneCountInString(req.Prompt)
	if limit > 0 && res.PromptChars > limit {
		return fail(Violation{Rule: RulePromptLimit, Message: fmt.Sprintf("prompt is %d chars, over the provider's %d-char input limit", res.PromptChars, limit)})
	}

	callCtx, cancel := context.WithTimeout(ctx, t.Timeout())
	resp, err := p.Call(callCtx, req)
	cancel()
	res.ProviderRequestID, res.Model, res.Output = resp.ProviderRequestID, resp.Model, resp.Output
	if err != nil {
		res.Err = err
		var ce *provider.CallError
		if errors.As(err, &ce) && res.ProviderRequestID == "" {
			res.ProviderRequestID = ce.ProviderRequestID
		}
		return fail(Violation{Rule: RuleCall, Message: fmt.Sprintf("call failed (%s): %v", provider.Classify(err), err)})
	}
	if err := t.CheckOutput(resp.Output); err != nil {
		var cv *ContractViolationError
		if errors.As(err, &cv) {
			res.Violations = append(res.Violations, cv.Violations...)
		} else {
			res.Violations = append(res.Violations, Violation{Rule: RuleSchema, Message: err.Error()})
		}
		// Case expectations still say something useful next to unknown keys
		// or failed semantic checks; after a schema failure they are noise.
		if !onlyUnknownKeys(res.Violations) {
			return res
		}
	}
	res.Violations = append(res.Violations, c.check(resp.Output)...)
	res.Passed = len(res.Violations) == 0
	return res
}

func onlyUnknownKeys(vs []Violation) bool {
	for _, v := range vs {
		if v.Rule != RuleUnknownKey && !strings.HasPrefix(v.Rule, RuleCheckPrefix) {
			return false
		}
	}
	return true
}

func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

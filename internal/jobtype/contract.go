package jobtype

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// CaseResult is the outcome of one contract case.
type CaseResult struct {
	Case   string
	Passed bool
	// Measure is the case's request as the provider receives it, counted
	// (nil when it could not be measured).
	Measure *Measure
	// Headroom is what is left of the window once input and
	// max_output_tokens are in (tokens; bytes for a webhook's declared limit).
	Headroom int
	// Notes say what the adapter changed to fit the model's rules.
	Notes             []string
	ProviderRequestID string
	Model             string
	Usage             *provider.Usage
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
	// Limits are the provider's declared limits the cases were checked against.
	Limits          Limits
	MaxOutputTokens int
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

// Window describes the limit the cases were checked against.
func (r Report) Window() string {
	for _, c := range r.Cases {
		if c.Measure != nil && c.Measure.Unit == UnitBytes {
			if r.Limits.MaxRequestBytes == 0 {
				return "no request limit declared by the provider"
			}
			return fmt.Sprintf("%d request bytes, as the provider declares", r.Limits.MaxRequestBytes)
		}
	}
	if r.Limits.ContextWindow == 0 {
		return "no context window declared"
	}
	s := fmt.Sprintf("%d-token context window, max_output_tokens %d", r.Limits.ContextWindow, r.MaxOutputTokens)
	if r.Limits.MaxOutputTokens > 0 {
		s += fmt.Sprintf(" (model's output limit %d)", r.Limits.MaxOutputTokens)
	}
	return s
}

// String renders a readable per-case report naming cases, their token
// counts and headroom, and violations.
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
	fmt.Fprintf(&b, "  checked against: %s\n", r.Window())
	method, shared := r.method()
	if shared {
		fmt.Fprintf(&b, "  %s\n", method)
	}
	for _, c := range r.Cases {
		status := "PASS"
		if !c.Passed {
			status = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s", status, c.Case)
		if c.ProviderRequestID != "" {
			fmt.Fprintf(&b, " (request %s)", c.ProviderRequestID)
		}
		if m := c.Measure; m != nil {
			fmt.Fprintf(&b, ": input %d %s", m.Input, m.Unit)
			if m.Unit == UnitTokens || r.Limits.MaxRequestBytes > 0 {
				fmt.Fprintf(&b, ", headroom %d", c.Headroom)
			}
			if !shared {
				fmt.Fprintf(&b, " [%s]", countedBy(*m))
			}
		}
		if c.Usage != nil {
			fmt.Fprintf(&b, "; charged %d in, %d out", c.Usage.InputTokens, c.Usage.OutputTokens)
		}
		b.WriteByte('\n')
		for _, n := range c.Notes {
			fmt.Fprintf(&b, "      note: %s\n", n)
		}
		for _, v := range c.Violations {
			fmt.Fprintf(&b, "      - %s\n", v)
		}
	}
	return b.String()
}

// method is how the cases were measured, when they all were the same way.
func (r Report) method() (string, bool) {
	var first *Measure
	for _, c := range r.Cases {
		switch {
		case c.Measure == nil:
		case first == nil:
			first = c.Measure
		case c.Measure.Method != first.Method || c.Measure.Estimate != first.Estimate:
			return "", false
		}
	}
	if first == nil {
		return "", false
	}
	return countedBy(*first), true
}

func countedBy(m Measure) string {
	if m.Estimate {
		return "ESTIMATED, not counted: " + m.Method
	}
	return "counted by " + m.Method
}

// RunContract runs each case against p: render (no missing variable, no
// template syntax left), build the exact request the adapter would send
// (refused if the model would refuse it), measure it with the provider's
// own tokenizer through budget and check that input plus max_output_tokens
// fit the declared window, call with the type's timeout, then check the
// output against the contract (schema, unknown keys, semantic checks) and
// the case's expectations. Cases run one after another so a provider's rate
// limit is not tripped by the run itself. It never fails as a whole: every
// problem lands in the report. A nil budget measures nothing, so no case
// passes.
func RunContract(ctx context.Context, t *Type, p provider.Provider, cases []Case, budget Budget) Report {
	r := Report{
		JobType:         t.Name(),
		Version:         t.Version(),
		ContractVersion: t.ContractVersion(),
		Provider:        p.Name(),
		MaxOutputTokens: t.MaxOutputTokens(),
		Cases:           make([]CaseResult, 0, len(cases)),
	}
	if budget != nil {
		r.Limits = budget.Limits()
	}
	run := runID()
	for _, c := range cases {
		r.Cases = append(r.Cases, runCase(ctx, t, p, c, run, budget))
	}
	return r
}

func runCase(ctx context.Context, t *Type, p provider.Provider, c Case, run string, budget Budget) CaseResult {
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
	if msg := leftoverTemplate(c.Input, req.System+"\n"+req.Prompt); msg != "" {
		return fail(Violation{Rule: RuleRender, Message: msg})
	}
	if pp, ok := p.(provider.Preparer); ok {
		prep, err := pp.Prepare(req)
		if err != nil {
			res.Err = err
			return fail(Violation{Rule: RuleModelRules, Message: err.Error()})
		}
		res.Notes = prep.Notes
	}
	if budget == nil {
		return fail(Violation{Rule: RuleContextWindow, Message: "no token counter for this provider: whether the case fits is unknown"})
	}
	m, err := budget.Measure(ctx, req)
	if err != nil {
		res.Err = err
		return fail(Violation{Rule: RuleContextWindow, Message: "could not count the request's input tokens: " + err.Error()})
	}
	res.Measure = &m
	headroom, v := fit(t, budget.Limits(), m)
	res.Headroom = headroom
	if v != nil {
		return fail(*v)
	}

	callCtx, cancel := context.WithTimeout(ctx, t.Timeout())
	resp, err := p.Call(callCtx, req)
	cancel()
	res.ProviderRequestID, res.Model, res.Output, res.Usage = resp.ProviderRequestID, resp.Model, resp.Output, resp.Usage
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

// leftoverTemplate reports template text a render left in the prompt: a
// "<no value>" or "{{ }}" the case's input did not bring.
func leftoverTemplate(input json.RawMessage, rendered string) string {
	var values []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			values = append(values, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var in any
	_ = json.Unmarshal(input, &in)
	walk(in)
	for _, marker := range []string{"<no value>", "{{", "}}"} {
		if !strings.Contains(rendered, marker) {
			continue
		}
		fromInput := false
		for _, v := range values {
			fromInput = fromInput || strings.Contains(v, marker)
		}
		if !fromInput {
			return fmt.Sprintf("the rendered prompt still holds %q: a variable is missing or template syntax was left", marker)
		}
	}
	return ""
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

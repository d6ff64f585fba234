package jobtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

// compileFunc compiles a boolean check expression over the named object
// variables ("output", or "input" and "output" for case assertions).
type compileFunc func(expr string, vars ...string) (func(vars map[string]any) (any, error), error)

type compiledCheck struct {
	spec CheckSpec
	prg  func(vars map[string]any) (any, error)
}

func compileChecks(compile compileFunc, vars []string, specs []CheckSpec, requireName bool) ([]compiledCheck, error) {
	var errs []error
	out := make([]compiledCheck, 0, len(specs))
	seen := map[string]bool{}
	for i, s := range specs {
		label := fmt.Sprintf("[%d]", i)
		if s.Name != "" {
			label += " " + s.Name
		}
		switch {
		case requireName && !namePatternCheck(s.Name):
			errs = append(errs, fmt.Errorf("%s: name must be snake_case", label))
			continue
		case seen[s.Name] && s.Name != "":
			errs = append(errs, fmt.Errorf("%s: duplicate name", label))
			continue
		case strings.TrimSpace(s.Message) == "":
			errs = append(errs, fmt.Errorf("%s: message is required (it is what a failing report shows)", label))
			continue
		}
		seen[s.Name] = true
		if strings.TrimSpace(s.Expr) == "" {
			errs = append(errs, fmt.Errorf("%s: expr is required", label))
			continue
		}
		prg, err := compile(s.Expr, vars...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", label, err))
			continue
		}
		out = append(out, compiledCheck{spec: s, prg: prg})
	}
	return out, errors.Join(errs...)
}

func namePatternCheck(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// eval runs a check; ok is false when the check fails or cannot be
// evaluated (e.g. a field it reads is missing), and why says which.
func (c compiledCheck) eval(vars map[string]any) (ok bool, why string) {
	val, err := c.prg(vars)
	if err != nil {
		return false, c.spec.Message + " (could not evaluate: " + err.Error() + ")"
	}
	b, isBool := val.(bool)
	if !isBool {
		return false, c.spec.Message + fmt.Sprintf(" (check returned %v, not a bool)", val)
	}
	if !b {
		return false, c.spec.Message
	}
	return true, ""
}

// celValue decodes JSON for the checks (checkexpr.Decode: integral numbers
// become int64).
func celValue(raw json.RawMessage) (any, error) { return checkexpr.Decode(raw) }

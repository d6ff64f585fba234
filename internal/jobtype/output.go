package jobtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/onejob/onejob/internal/job"
)

// ErrContractViolation is wrapped by every *ContractViolationError.
var ErrContractViolation = errors.New("output violates the job type contract")

// Violation rules.
const (
	RuleJSON        = "json"
	RuleSchema      = "schema"
	RuleUnknownKey  = "unknown_key"
	RuleCheckPrefix = "check:"
	RuleExpect      = "expect"
	RuleAssert      = "assert"
	RuleCall        = "call"
	RuleRender      = "render"
	// RuleContextWindow: the case does not fit the model's context window
	// (input tokens plus max_output_tokens), or its size is unknown.
	RuleContextWindow = "context_window"
	// RuleModelRules: the model would refuse the request (a parameter or a
	// max_output_tokens it does not accept).
	RuleModelRules = "model_rules"
)

// Violation is one way an output (or a contract case) failed.
type Violation struct {
	// Pointer is the JSON pointer into the output ("" = the whole output).
	Pointer string `json:"pointer,omitempty"`
	// Rule names what failed: schema, unknown_key, check:<name>, expect, ...
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

func (v Violation) String() string {
	s := v.Message + " [" + v.Rule + "]"
	if v.Pointer != "" {
		s = v.Pointer + ": " + s
	}
	return s
}

// ContractViolationError is returned by CheckOutput.
type ContractViolationError struct {
	Violations []Violation
}

func (e *ContractViolationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.String()
	}
	return ErrContractViolation.Error() + ": " + strings.Join(parts, "; ")
}

func (e *ContractViolationError) Unwrap() error { return ErrContractViolation }

// CheckOutput validates a provider's output against the output schema, rejects
// unknown top-level keys (even when the schema forgot additionalProperties:
// false, since a hallucinated field must never reach a client), then runs the
// semantic checks. Checks only run when the declared shape is intact (unknown
// keys aside): they may assume it. An output beyond job.CheckJSON's bounds
// (duplicate keys, numbers outside the interoperable range, deep nesting) is
// refused before any of that work. It returns nil or a
// *ContractViolationError.
func (t *Type) CheckOutput(output json.RawMessage) error {
	v, err := decodeInstance(output)
	if err != nil {
		return &ContractViolationError{Violations: []Violation{{Rule: RuleJSON, Message: "output is not valid JSON: " + err.Error()}}}
	}
	var je *job.JSONError
	if errors.As(job.CheckJSON(output), &je) {
		return &ContractViolationError{Violations: []Violation{{Pointer: je.Pointer, Rule: RuleJSON, Message: "output refused: " + je.Reason}}}
	}
	var vs []Violation
	shapeOK := true // unknown keys alone leave the declared shape intact
	if err := t.outputSchema.Validate(v); err != nil {
		for _, se := range schemaErrors(err) {
			rule := RuleSchema
			if se.unknownKey {
				rule = RuleUnknownKey
			} else {
				shapeOK = false
			}
			vs = append(vs, Violation{Pointer: se.Pointer, Rule: rule, Message: se.Message})
		}
	}
	if obj, ok := v.(map[string]any); ok && !t.rejectsExtra {
		var unknown []string
		for k := range obj {
			if !t.outputKeys[k] {
				unknown = append(unknown, k)
			}
		}
		slices.Sort(unknown)
		for _, k := range unknown {
			vs = append(vs, Violation{Pointer: job.Pointer(k), Rule: RuleUnknownKey, Message: fmt.Sprintf("unknown key %q is not allowed (not in the output schema)", k)})
		}
	}
	if shapeOK {
		cv, err := celValue(output)
		if err != nil {
			return &ContractViolationError{Violations: []Violation{{Rule: RuleJSON, Message: err.Error()}}}
		}
		vars := map[string]any{"output": cv}
		for _, c := range t.checks {
			if ok, why := c.eval(vars); !ok {
				vs = append(vs, Violation{Rule: RuleCheckPrefix + c.spec.Name, Message: why})
			}
		}
	}
	if len(vs) > 0 {
		return &ContractViolationError{Violations: vs}
	}
	return nil
}

package checkexpr_test

import (
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

func TestEval(t *testing.T) {
	t.Parallel()
	output := map[string]any{
		"priority": int64(1), "needs_human": true, "category": "outage", "summary": "line one",
		"text": "sim-primary answered: hi", "provider": "sim-primary", "score": 0.75,
		"tags": []any{"a", "b"}, "nested": map[string]any{"n": int64(3)},
	}
	env := map[string]any{"output": output, "input": map[string]any{"prompt": "hi"}}
	tests := []struct {
		name, expr string
		want       any
		wantErr    string
	}{
		{"ImpliesTrue", "output.priority != 1 || output.needs_human", true, ""},
		{"ImpliesFalse", "output.priority != 1 || !output.needs_human", false, ""},
		{"CategoryRule", "output.category != 'outage' || output.priority <= 2", true, ""},
		{"NoNewline", "!output.summary.contains('\\n')", true, ""},
		{"FieldContainsField", "output.text.contains(output.provider)", true, ""},
		{"InputAndOutput", "output.text.contains(input.prompt)", true, ""},
		{"Ordering", "output.priority >= 2", false, ""},
		{"MixedNumbers", "output.score < 1 && output.score > 0.5 && output.priority == 1.0", true, ""},
		{"InList", "output.category in ['outage', 'billing']", true, ""},
		{"NotInList", "output.category in [\"billing\"]", false, ""},
		{"Size", "size(output.summary) == 8 && output.tags.size() == 2 && size(output.tags) > 1", true, ""},
		{"Functions", "output.text.startsWith('sim') && output.text.endsWith('hi') && output.text.matches('^sim-[a-z]+ ')", true, ""},
		{"IndexAndNested", "output.tags[1] == 'b' && output.nested.n - 1 == 2 && output['category'] == 'outage'", true, ""},
		{"Parens", "!(output.priority == 2) && (true || false)", true, ""},
		{"DifferentKindsUnequal", "output.priority == '1'", false, ""},
		{"MissingFieldErrors", "output.missing == 1", nil, "no such key: missing"},
		{"OrAbsorbsError", "true || output.missing == 1", true, ""},
		{"AndAbsorbsError", "output.missing == 1 && false", false, ""},
		{"OrderingKindsError", "output.category < 3", nil, "cannot order"},
		{"NotNeedsBool", "!output.priority", nil, "! needs a bool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := checkexpr.Compile(tc.expr, "input", "output")
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got, err := f(env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %v (err %v), want %v", got, err, tc.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, expr, want string }{
		{"Undeclared", "input.prompt == ''", "undeclared reference"},
		{"UnknownFunction", "output.text.lower()", "unknown function"},
		{"Unterminated", "output.text == 'x", "unterminated string"},
		{"Trailing", "output.a == 1 )", "unexpected"},
		{"BadChar", "output.a # 1", "unexpected character"},
		{"Arity", "output.text.contains()", "takes 1"},
		{"Empty", "", "unexpected end"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := checkexpr.Compile(tc.expr, "output"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNotBoolean(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"1 + 1", "'x'", "[true]", "size(output.a)", "3"} {
		if _, err := checkexpr.Compile(expr, "output"); err == nil || !strings.Contains(err.Error(), "must be boolean") {
			t.Fatalf("%s: err = %v", expr, err)
		}
	}
}

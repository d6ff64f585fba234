package checkexpr_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/jobtype/checkexpr"
)

func TestEval(t *testing.T) {
	t.Parallel()
	output := map[string]any{
		"priority": int64(1), "needs_human": true, "category": "outage", "summary": "line one",
		"text": "sim-primary answered: hi", "provider": "sim-primary", "score": 0.75,
		"tags": []any{"a", "b"}, "nested": map[string]any{"n": int64(3)}, "max": int64(math.MaxInt64),
		"min": int64(math.MinInt64), "digits": "d123", "opt": nil,
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
		{"OrAbsorbsNonBool", "output.priority || true", true, ""},
		{"OrderingKindsError", "output.category < 3", nil, "no such overload"},
		{"NotNeedsBool", "!output.priority", nil, "no such overload"},
		{"EscapedBackslash", `output.digits.matches('^d\\d+$')`, true, ""},
		{"RawString", `output.digits.matches(r'^d\d+$')`, true, ""},
		{"UnicodeEscapes", `output.digits == '\u0064\x31\U00000032\063'`, true, ""},
		{"SimpleEscapes", "'\\a\\b\\f\\n\\r\\t\\v\\\\\\'\\\"\\?\\`' == \"\\x07\\x08\\x0c\\x0a\\x0d\\x09\\x0b\\\\'\\\"?`\"", true, ""},
		{"Comment", "output.needs_human // priority 1 only", true, ""},
		{"HasPresent", "has(output.nested.n)", true, ""},
		{"HasAbsent", "has(output.nested.x) || has(output.absent)", false, ""},
		{"HasNull", "has(output.opt)", true, ""},
		{"HasOnScalar", "has(output.summary.x)", false, ""},
		{"InMap", "'n' in output.nested && !('x' in output.nested) && !(1 in output.nested)", true, ""},
		{"Arithmetic", "output.priority * 6 / 4 % 2 == 1 && output.score * 2.0 == 1.5", true, ""},
		{"NegativeLiteral", "-9223372036854775808 == output.min", true, ""},
		{"ChainedRelations", "output.priority < 2 == true", true, ""},
		{"DoubleNegation", "!!output.needs_human && --output.priority == 1", true, ""},
		{"AddOverflow", "output.max + 1 > 0", nil, "integer overflow"},
		{"SubOverflow", "output.min - 1 < 0", nil, "integer overflow"},
		{"MulOverflow", "output.max * 2 > 0", nil, "integer overflow"},
		{"NegOverflow", "-output.min > 0", nil, "integer overflow"},
		{"DivOverflow", "output.min / -1 > 0", nil, "integer overflow"},
		{"ModOverflow", "output.min % -1 == 0", nil, "integer overflow"},
		{"DivideByZero", "output.priority / 0 == 1", nil, "division by zero"},
		{"MixedArithmetic", "output.priority + 0.5 > 1.0", nil, "no such overload"},
		{"ListContainsIsNotCEL", "output.tags.contains('a')", nil, "no such overload"},
		{"IndexOutOfRange", "output.tags[2] == 'c'", nil, "index out of range"},
		{"BadIndex", "output.tags['a'] == 'c'", nil, "invalid index"},
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
		{"InvalidEscape", `output.text.matches('\d+')`, `invalid escape sequence \d`},
		{"InvalidOctal", `output.text == '\08'`, "octal escape"},
		{"OctalOutOfRange", `output.text == '\400'`, `invalid escape sequence \4`},
		{"SurrogateEscape", `output.text == '\ud800'`, "not a valid code point"},
		{"ShortHex", `output.text == '\x4'`, "hex digits"},
		{"NewlineInString", "output.text == 'a\nb'", "newline in string"},
		{"TripleQuoted", "output.text == '''a'''", "triple-quoted"},
		{"Bytes", "output.text == b'a'", "bytes literals"},
		{"IntOutOfRange", "output.n == 9223372036854775808", "invalid int literal"},
		{"DoubleOutOfRange", "output.n == 1e309", "invalid double literal"},
		{"TrailingDot", "output.n == 1.", "bad number"},
		{"Unsigned", "output.n == 1u", "unsigned integers"},
		{"MixedTypes", "1 == 'a'", "no matching overload"},
		{"MixedNumbers", "1 + 1.0 > 0.0", "no matching overload"},
		{"IndexVariableWithInt", "output[1] == 1", "no matching overload"},
		{"SizeOfInt", "size(1) == 1", "no matching overload"},
		{"FieldOfString", "'a'.b == 1", "does not support field selection"},
		{"ListContains", "['a'].contains('a')", "no matching overload"},
		{"HasNeedsSelect", "has(output['a'])", "field selection"},
		{"Macro", "output.tags.all(t, t != '')", "macro all"},
		{"Conditional", "output.a ? true : false", "conditional"},
		{"MapLiteral", "output.a == {}", "map literals"},
		{"Reserved", "if", "reserved identifier"},
		{"BadRegex", "output.text.matches('[')", "matches:"},
		{"TooDeep", strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), "nested more than"},
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
	for _, expr := range []string{"1 + 1", "'x'", "[true]", "size(output.a)", "3", "output.a + 1", "-1"} {
		if _, err := checkexpr.Compile(expr, "output"); err == nil || !strings.Contains(err.Error(), "must be boolean") {
			t.Fatalf("%s: err = %v", expr, err)
		}
	}
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	env := map[string]any{"output": map[string]any{"n": int64(math.MaxInt64), "l": []any{}, "s": "x"}}
	tests := []struct {
		name, expr string
		want       error
	}{
		{"NoSuchKey", "output.missing", checkexpr.ErrNoSuchKey},
		{"NoSuchOverload", "output.s < 1", checkexpr.ErrNoSuchOverload},
		{"Overflow", "output.n + 1 == 0", checkexpr.ErrOverflow},
		{"DivideByZero", "output.n % 0 == 0", checkexpr.ErrDivideByZero},
		{"IndexOutOfRange", "output.l[0]", checkexpr.ErrIndexOutOfRange},
		{"BadIndex", "output.l[output.s]", checkexpr.ErrBadIndex},
		{"BadRegex", "output.s.matches(output.s + '[')", checkexpr.ErrBadRegex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := checkexpr.Compile(tc.expr, "output")
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if _, err := f(env); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		want       any
	}{
		{"Integral", "1", int64(1)},
		{"IntegralDouble", "1.0", 1.0},
		{"Exponent", "1e2", 100.0},
		{"BeyondInt64", "9223372036854775808", 9223372036854775808.0},
		{"Nested", `{"a": [2, 2.5]}`, map[string]any{"a": []any{int64(2), 2.5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkexpr.Decode([]byte(tc.json))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("= %#v (err %v), want %#v", got, err, tc.want)
			}
		})
	}
}

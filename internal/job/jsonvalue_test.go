package job_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/job"
)

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	members := func(n int) string {
		var b strings.Builder
		b.WriteString(`{`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"k` + strconv.Itoa(i) + `":1`)
		}
		return b.String() + `}`
	}
	tests := []struct {
		name    string
		doc     string
		ok      bool
		pointer string
	}{
		{"Object", `{"a":[1,2.5,-3e2,{"b":null}],"c":"x"}`, true, ""},
		{"Int64Max", `9223372036854775807`, true, ""},
		{"LongExactInteger", `123456789012345678901234567890`, true, ""},
		{"DoubleMax", `1.7976931348623157e308`, true, ""},
		{"SmallestNormal", `2.2250738585072014e-308`, true, ""},
		{"ZeroWithHugeExponent", `0e999999`, true, ""},
		{"HugeExponent", `{"n":[1,1e999999]}`, false, "/n/1"},
		{"JustPastDoubleRange", `1e309`, false, ""},
		{"LeadingDigitsPushPastRange", `99999e305`, false, ""},
		{"TinyFraction", `0.` + strings.Repeat("0", 30) + `1e-290`, false, ""},
		{"LongLiteral", `1.` + strings.Repeat("1", 40), false, ""},
		{"DuplicateKey", `{"a":{"b":1,"b":2}}`, false, "/a/b"},
		{"DeepNesting", strings.Repeat("[", 65) + strings.Repeat("]", 65), false, "/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"},
		{"MaxDepth", strings.Repeat("[", 64) + strings.Repeat("]", 64), true, ""},
		{"MaxMembers", members(job.MaxObjectMembers), true, ""},
		{"TooManyMembers", members(job.MaxObjectMembers + 1), false, ""},
		{"TrailingData", `{} {}`, false, ""},
		{"NotUTF8", "\"\xff\"", false, ""},
		{"Empty", " ", false, ""},
		{"EscapedPointer", `{"a/b~c":{"d":1e400}}`, false, "/a~1b~0c/d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := job.CheckJSON([]byte(tc.doc))
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var je *job.JSONError
			if !errors.As(err, &je) || !errors.Is(err, job.ErrJSON) {
				t.Fatalf("err = %v, want a *JSONError", err)
			}
			if je.Pointer != tc.pointer {
				t.Fatalf("pointer %q, want %q (%v)", je.Pointer, tc.pointer, err)
			}
		})
	}
}

// TestFingerprintBoundsNumbers: a number no check would admit never reaches
// math/big, whoever calls New.
func TestFingerprintBoundsNumbers(t *testing.T) {
	t.Parallel()
	_, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Providers: []string{"p"}, Primary: "p",
		Input: json.RawMessage(`{"n":1e999999}`)}, t0)
	if !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("New = %v, want an invalid input", err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/onejob/onejob/internal/jobtype"
)

func TestContractLint(t *testing.T) {
	t.Parallel()
	lintFailed := errLintFailed.Error()
	typeWith := func(expr string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(`{"name": "t", "checks": [{"name": "c", "expr": ` + quoteJSON(expr) + `, "message": "m"}]}`)}
	}
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		wantErr string // in the error; "" for none
		want    []string
		notWant []string
	}{
		{"Clean", fstest.MapFS{"types/t.json": typeWith("output.priority != 1 || output.needs_human")}, "",
			[]string{"1 expressions, 0 problems"}, []string{"refuses"}},
		{"InvalidEscape", fstest.MapFS{"types/t.json": typeWith(`output.s.matches('\d+')`)}, lintFailed,
			[]string{"types/t.json: check c: cel-go refuses `output.s.matches('\\d+')`: Syntax error",
				"types/t.json: check c: checkexpr refuses `output.s.matches('\\d+')`: invalid escape sequence \\d",
				"1 expressions, 2 problems"}, nil},
		{"OutsideTheSubset", fstest.MapFS{"types/t.json": typeWith("output.tags.all(t, t != '')")}, lintFailed,
			[]string{"checkexpr refuses", "the macro all is not supported", "1 expressions, 1 problems"}, []string{"cel-go refuses"}},
		{"NotBoolean", fstest.MapFS{"types/t.json": typeWith("size(output.tags) + 1")}, lintFailed,
			[]string{"cel-go refuses", "its type is int, not bool", "checkexpr refuses", "must be boolean"}, nil},
		{"NotCEL", fstest.MapFS{"types/t.json": typeWith("1 == 'a'")}, lintFailed,
			[]string{"cel-go refuses", "no matching overload", "checkexpr refuses"}, nil},
		{"CaseAssertion", fstest.MapFS{"types/t.json": typeWith("true"),
			"cases/t/one.json": {Data: []byte(`{"input": {}, "assert": [{"expr": "input.x + ", "message": "m"}, {"expr": "input.x == output.x", "message": "m"}]}`)}},
			lintFailed, []string{"cases/t/one.json: assert [0]: cel-go refuses `input.x + `",
				`cases/t/one.json: assert [0]: checkexpr refuses`, "3 expressions, 2 problems"}, []string{"assert [1]"}},
		{"NotJSON", fstest.MapFS{"types/t.json": {Data: []byte("{")}}, "types/t.json: unexpected end of JSON", nil, nil},
		{"NoTypes", fstest.MapFS{}, "no types/*.json files", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := lintContracts(tc.fsys, &out)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q\n%s", err, tc.wantErr, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestContractLintCommand runs `contract lint` as the CLI does: on the
// built-in types (which must lint clean) and on a directory.
func TestContractLintCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "types"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "types", "t.json"), []byte(`{"checks": [{"expr": "output.n + 1.0 > 0", "message": "m"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	builtIn, err := jobtype.Expressions(jobtype.Embedded())
	if err != nil || len(builtIn) == 0 {
		t.Fatalf("built-in expressions: %d, %v", len(builtIn), err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr error
		want    string
	}{
		{"BuiltIn", []string{"lint"}, nil, ", 0 problems"},
		{"Dir", []string{"lint", "--dir", dir}, errLintFailed, "types/t.json: check [0]: cel-go refuses"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := contract(context.Background(), tc.args, func(string) string { return "" }, &out, &errOut)
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want %v\n%s%s", err, tc.wantErr, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteString(`\` + string(r))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

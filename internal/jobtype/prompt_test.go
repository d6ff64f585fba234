package jobtype

import (
	"encoding/json"
	"strings"
	"testing"
	"text/template"
)

// The oracle: text/template as prompts were rendered before (missingkey=error
// and json), which the executor of prompt.go must match.
func textTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).Parse(text)
}

// TestPromptsRenderAsTextTemplate: every construct the executor accepts,
// over JSON inputs of every kind, renders exactly what text/template
// renders, and fails where it fails.
func TestPromptsRenderAsTextTemplate(t *testing.T) {
	t.Parallel()
	inputs := []string{
		`{"prompt":"hi","n":3,"f":1.5,"big":1e21,"t":true,"f0":false,"z":0,"s":"","nul":null,
		  "o":{"a":"x","b":{"c":[1,"two",null]}},"arr":["a","b","c"],"empty":[],"eo":{},"u":"<&>\"é"}`,
		`{}`,
		`{"prompt":null,"arr":[{"x":1},{"x":null},{}]}`,
	}
	templates := []string{
		// fields, dot, variables
		`{{.prompt}}`, `{{.missing}}`, `{{.nul}}`, `{{.nul.x}}`, `{{.o.b.c}}`, `{{.o}}`, `{{.arr}}`,
		`{{.n}}`, `{{.f}}`, `{{.big}}`, `{{.t}}`, `{{.u}}`, `{{.o.a.x}}`, `{{.arr.x}}`, `{{.n.x}}`,
		`{{.}}`, `{{$}}`, `{{$.prompt}}`, `{{(.o).a}}`, `{{(index .o "b").c}}`, `{{(index . "nul").x}}`,
		`{{$x := .prompt}}{{$x}}`, `{{$x := 1}}{{$x = 2}}{{$x}}`, `{{$x := .o}}{{$x.a}}`, `{{$x := .o}}{{$x.missing}}`,
		`{{.prompt 1}}`, `{{.prompt | .n}}`, `{{$x := 1}}{{$x 2}}`, `a {{- .prompt}} b {{/* a comment */}}c`,
		// constants
		`{{1}}`, `{{1.5}}`, `{{1e3}}`, `{{0x10}}`, `{{'a'}}`, `{{"s"}}`, `{{true}}`, `{{1+2i}}`, `{{nil}}`,
		`{{"{{name}}"}}`, `{{9223372036854775807}}`, `{{18446744073709551615}}`,
		// index
		`{{with index . "tone"}}({{.}}){{end}}`, `{{index . "tone"}}`, `{{index .arr 1}}`, `{{index .arr 3}}`,
		`{{index .arr -1}}`, `{{index .o "b" "c" 1}}`, `{{index .o.b.c 2}}`, `{{index .prompt 0}}`, `{{index .n 0}}`,
		`{{index . 0}}`, `{{index .arr "x"}}`, `{{index nil 1}}`, `{{index .nul 1}}`, `{{index .arr}}`,
		`{{index . .prompt}}`, `{{index .arr .n}}`, `{{index . .nul}}`, `{{range index .prompt 0}}{{.}}{{end}}`,
		// if, with, range
		`{{if .t}}y{{else}}n{{end}}`, `{{if .f0}}y{{else if .z}}z{{else}}n{{end}}`, `{{if .s}}y{{else}}n{{end}}`,
		`{{if .nul}}y{{else}}n{{end}}`, `{{if .empty}}y{{else}}n{{end}}`, `{{if .eo}}y{{else}}n{{end}}`,
		`{{if .missing}}y{{end}}`, `{{if 0}}y{{else}}n{{end}}`, `{{if 0.0}}y{{else}}n{{end}}`, `{{if "x"}}y{{end}}`,
		`{{with .o}}{{.a}}{{end}}`, `{{with .nul}}y{{else}}n{{end}}`, `{{with $x := .o.a}}{{$x}}{{.}}{{end}}`,
		`{{with .o}}{{with .b}}{{.c}}{{end}}{{end}}`, `{{with .nul}}a{{else with .o}}{{.a}}{{end}}`,
		`{{if $x := .prompt}}{{$x}}{{end}}{{$x := 2}}{{$x}}`,
		`{{range .arr}}[{{.}}]{{end}}`, `{{range $i, $e := .arr}}{{$i}}={{$e}};{{end}}`, `{{range $e := .arr}}{{$e}}{{end}}`,
		`{{range .o}}{{.}}|{{end}}`, `{{range $k, $v := .o}}{{$k}}:{{$v}};{{end}}`, `{{range .empty}}x{{else}}none{{end}}`,
		`{{range .nul}}x{{else}}none{{end}}`, `{{range .prompt}}x{{end}}`, `{{range .n}}x{{end}}`, `{{range .t}}x{{end}}`,
		`{{range 3}}{{.}}{{end}}`, `{{range $i := 2}}{{$i}}{{end}}`, `{{range $i, $e := 3}}{{end}}`, `{{range 0}}x{{else}}y{{end}}`,
		`{{range .arr}}{{if $.t}}{{break}}{{end}}{{.}}{{end}}`, `{{range $i, $e := .arr}}{{if not $i}}{{continue}}{{end}}{{$e}}{{end}}`,
		`{{range .o.b.c}}{{.}},{{end}}`, `{{range .o.b.c}}{{.x}}{{end}}`, `{{range .arr}}{{.x}},{{end}}`,
		`{{$i := 0}}{{range $i, $e := .arr}}{{end}}{{$i}}`, `{{$e := 0}}{{range $e = .arr}}{{end}}{{$e}}`,
		`{{range .arr}}{{$y := .}}{{end}}ok`,
		// functions
		`{{len .arr}}`, `{{len .prompt}}`, `{{len .o}}`, `{{len .n}}`, `{{len .nul}}`, `{{len .t}}`, `{{.arr | len}}`,
		`{{not .t}}`, `{{not .nul}}`, `{{and .t .prompt}}`, `{{and .f0 .prompt}}`, `{{or .s .nul}}`, `{{or .s .prompt}}`,
		`{{and .t .nul}}`, `{{.prompt | and .t}}`, `{{.s | or .f0}}`, `{{and nil 1}}`, `{{or 0 .missing}}`,
		`{{print .prompt .n .nul}}`, `{{print}}`, `{{print (index . "missing")}}`, `{{printf "%s-%v-%d" .prompt .n 4}}`,
		`{{printf "%v" .nul}}`, `{{printf .n}}`, `{{printf 3}}`, `{{printf .prompt}}`, `{{println .prompt}}`,
		`{{.prompt | printf "%q"}}`, `{{"%d" | printf}}`, `{{print nil}}`,
		`{{json .o}}`, `{{.o | json}}`, `{{json .nul}}`, `{{json (index . "missing")}}`, `{{index . "missing" | json}}`,
		`{{json .u}}`, `{{json 1+2i}}`, `{{json print}}`,
		`{{json}}`, `{{not}}`, `{{len .arr .arr}}`, `{{and}}`, `{{printf}}`,
	}
	for _, text := range templates {
		want, err := textTemplate("t", text)
		if err != nil {
			t.Fatalf("text/template refuses %s: %v", text, err)
		}
		got, err := parseTemplate("t", text)
		if err != nil {
			t.Errorf("parseTemplate(%s) = %v, text/template parses it", text, err)
			continue
		}
		for _, in := range inputs {
			data, err := decodeInstance(json.RawMessage(in))
			if err != nil {
				t.Fatal(err)
			}
			var wb, gb strings.Builder
			werr := want.Execute(&wb, data)
			gerr := got.execute(&gb, data)
			switch {
			case (werr != nil) != (gerr != nil):
				t.Errorf("%s over %.30s: error %v, text/template's %v", text, in, gerr, werr)
			case werr == nil && gb.String() != wb.String():
				t.Errorf("%s over %.30s = %q, text/template renders %q", text, in, gb.String(), wb.String())
			}
		}
	}
}

// TestPromptsRefuseWhatNeedsReflection: what the executor does not do is
// refused when the type loads (a function it has not, another template),
// or fails its render (a method of a JSON number), never rendered
// differently.
func TestPromptsRefuseWhatNeedsReflection(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`{{eq .n 3}}`, `{{ne 1 2}}`, `{{lt 1 2}}`, `{{slice .arr 1}}`, `{{html .u}}`, `{{js .u}}`,
		`{{urlquery .u}}`, `{{call .f}}`, `{{define "x"}}a{{end}}{{template "x"}}`, `{{block "b" .}}x{{end}}`,
		`{{template "y"}}`, `{{if .t}}{{template "y"}}{{end}}`,
	} {
		if _, err := textTemplate("t", text); err != nil {
			t.Fatalf("text/template refuses %s too: %v", text, err)
		}
		if _, err := parseTemplate("t", text); err == nil {
			t.Errorf("parseTemplate(%s) accepted it", text)
		}
	}
	data, err := decodeInstance(json.RawMessage(`{"n":3}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseTemplate("t", `{{.n.String}}`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := p.execute(&b, data); err == nil {
		t.Errorf("{{.n.String}} rendered %q: a method of a number is not called", b.String())
	}
}

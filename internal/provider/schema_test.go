package provider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/provider"
)

func TestStrictSchema(t *testing.T) {
	t.Parallel()
	oai, claude := provider.OpenAIStrict, provider.ClaudeStrict
	tests := []struct {
		name    string
		sub     provider.SchemaSubset
		in      string
		want    string   // exact, member order included
		dropped []string // in order
	}{
		{"StringLengthsDroppedOpenAI", oai,
			`{"type":"object","properties":{"s":{"type":"string","minLength":1,"maxLength":280}},"required":["s"],"additionalProperties":false}`,
			`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"],"additionalProperties":false}`,
			[]string{"minLength at /properties/s", "maxLength at /properties/s"}},
		{"NumberBoundsKeptOpenAI", oai,
			`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":4,"multipleOf":1}},"required":["n"],"additionalProperties":false}`,
			`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":4,"multipleOf":1}},"required":["n"],"additionalProperties":false}`,
			nil},
		{"NumberBoundsDroppedClaude", claude,
			`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":4}},"required":["n"],"additionalProperties":false}`,
			`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`,
			[]string{"minimum at /properties/n", "maximum at /properties/n"}},
		{"ObjectsClosed", oai,
			`{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},"l":{"type":"array","items":{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"],"additionalProperties":{"type":"string"}}}},"required":["o","l"]}`,
			`{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false},"l":{"type":"array","items":{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"],"additionalProperties":false}}},"required":["o","l"],"additionalProperties":false}`,
			[]string{"additionalProperties at /properties/l/items"}},
		{"OptionalMadeRequiredAndNullableOpenAI", oai,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer","description":"opt"},"c":{"enum":["x","y"],"type":"string"},"d":{"$ref":"#/$defs/d"},"e":{"type":["string","null"]}},"required":["a"],"additionalProperties":false,"$defs":{"d":{"type":"string"}}}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":["integer","null"],"description":"opt"},"c":{"enum":["x","y",null],"type":["string","null"]},"d":{"anyOf":[{"$ref":"#/$defs/d"},{"type":"null"}]},"e":{"type":["string","null"]}},"required":["a","b","c","d","e"],"additionalProperties":false,"$defs":{"d":{"type":"string"}}}`,
			nil},
		{"OptionalStaysOptionalClaude", claude,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"],"additionalProperties":false}`,
			nil},
		{"FormatsPerProvider", oai,
			`{"type":"object","properties":{"e":{"type":"string","format":"email"},"u":{"type":"string","format":"uri"}},"required":["e","u"],"additionalProperties":false}`,
			`{"type":"object","properties":{"e":{"type":"string","format":"email"},"u":{"type":"string"}},"required":["e","u"],"additionalProperties":false}`,
			[]string{`format "uri" at /properties/u`}},
		{"UriKeptClaude", claude,
			`{"type":"object","properties":{"u":{"type":"string","format":"uri"}},"required":["u"],"additionalProperties":false}`,
			`{"type":"object","properties":{"u":{"type":"string","format":"uri"}},"required":["u"],"additionalProperties":false}`,
			nil},
		{"LookaroundPatternDroppedClaude", claude,
			`{"type":"object","properties":{"p":{"type":"string","pattern":"^(?!x)\\w+$"},"q":{"type":"string","pattern":"^[a-z]+$"}},"required":["p","q"],"additionalProperties":false}`,
			`{"type":"object","properties":{"p":{"type":"string"},"q":{"type":"string","pattern":"^[a-z]+$"}},"required":["p","q"],"additionalProperties":false}`,
			[]string{"pattern at /properties/p"}},
		{"ArrayBoundsClaude", claude,
			`{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":5,"uniqueItems":true},"m":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["l","m"],"additionalProperties":false}`,
			`{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"}},"m":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["l","m"],"additionalProperties":false}`,
			[]string{"minItems at /properties/l", "maxItems at /properties/l", "uniqueItems at /properties/l"}},
		{"ArrayBoundsOpenAI", oai,
			`{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":5,"uniqueItems":true}},"required":["l"],"additionalProperties":false}`,
			`{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":5}},"required":["l"],"additionalProperties":false}`,
			[]string{"uniqueItems at /properties/l"}},
		{"OneOfIsAnyOf", oai,
			`{"type":"object","properties":{"v":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"required":["v"],"additionalProperties":false}`,
			`{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer"}]}},"required":["v"],"additionalProperties":false}`,
			nil},
		{"TypeSpecificKeywordsNeedTheType", oai,
			`{"type":"object","properties":{"v":{"enum":[1,2],"minimum":1,"default":1,"examples":[1]}},"required":["v"],"additionalProperties":false,"$schema":"https://json-schema.org/draft/2020-12/schema"}`,
			`{"type":"object","properties":{"v":{"enum":[1,2]}},"required":["v"],"additionalProperties":false}`,
			[]string{"$schema at /", "minimum at /properties/v", "default at /properties/v", "examples at /properties/v"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.sub.Strict(json.RawMessage(tc.in))
			if err != nil {
				t.Fatalf("Strict: %v", err)
			}
			if string(got.Schema) != tc.want {
				t.Errorf("schema\n got %s\nwant %s", got.Schema, tc.want)
			}
			if !slices.Equal(got.Dropped, tc.dropped) {
				t.Errorf("dropped %q, want %q", got.Dropped, tc.dropped)
			}
		})
	}
}

func TestStrictSchemaRefuses(t *testing.T) {
	t.Parallel()
	deep := `{"type":"string"}`
	for range 10 {
		deep = `{"type":"object","properties":{"x":` + deep + `},"required":["x"],"additionalProperties":false}`
	}
	var optional []string
	for i := range 25 {
		optional = append(optional, fmt.Sprintf(`"p%d":{"type":"string"}`, i))
	}
	tests := []struct {
		name string
		sub  provider.SchemaSubset
		in   string
		why  string
	}{
		{"RootNotAnObject", provider.OpenAIStrict, `{"type":"array","items":{"type":"string"}}`, "root must be an object"},
		{"RootAnyOf", provider.OpenAIStrict, `{"type":"object","anyOf":[{"type":"object"}]}`, "must not be anyOf"},
		{"AllOfLeavesNothing", provider.OpenAIStrict, `{"type":"object","properties":{"v":{"allOf":[{"type":"string"}]}},"required":["v"]}`, "the schema at /properties/v has no type left"},
		{"TrueSchemaProperty", provider.ClaudeStrict, `{"type":"object","properties":{"v":true}}`, "not a schema"},
		{"ElevenLevels", provider.OpenAIStrict, deep, "more than 10 levels"},
		{"TwentyFiveOptional", provider.ClaudeStrict, `{"type":"object","properties":{` + strings.Join(optional, ",") + `}}`, "25 optional properties"},
		{"NotJSON", provider.OpenAIStrict, `{"type":`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.sub.Strict(json.RawMessage(tc.in))
			if !errors.Is(err, provider.ErrNotStrict) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Strict = %v, want ErrNotStrict saying %q", err, tc.why)
			}
		})
	}
	if _, err := provider.OpenAIStrict.Strict(json.RawMessage(strings.Replace(deep, `{"type":"object","properties":{"x":`, "", 1))); err != nil {
		t.Errorf("ten levels: %v", err)
	}
}

// TestStrictSchemaRestore: the nulls a model gives for properties made
// nullable only to be required are removed; others stay.
func TestStrictSchemaRestore(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"a":{"type":"string"},"opt":{"type":"string"},"nul":{"type":["string","null"]},
		"items":{"type":"array","items":{"type":"object","properties":{"x":{"type":"integer"}}}}},"required":["a","items"]}`
	s, err := provider.OpenAIStrict.Strict(json.RawMessage(schema))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{`{"a":"1","opt":null,"nul":null,"items":[{"x":null},{"x":2}]}`, `{"a":"1","nul":null,"items":[{},{"x":2}]}`},
		{`{"a":"1","opt":"o","nul":"n","items":[]}`, `{"a":"1","opt":"o","nul":"n","items":[]}`},
	}
	for _, tc := range tests {
		if got := s.Restore(json.RawMessage(tc.in)); string(got) != tc.want {
			t.Errorf("Restore(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	closed, err := provider.OpenAIStrict.Strict(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if in := ` {"a": null} `; string(closed.Restore(json.RawMessage(in))) != in {
		t.Error("an answer with nothing to restore must come back as it was")
	}
}

func TestClaudeStrictTools(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"claude-sonnet-4-5":                           true,
		"claude-sonnet-4-5-20250929":                  true,
		"claude-haiku-4-5-20251001":                   true,
		"claude-opus-4-6":                             true,
		"claude-sonnet-5":                             true,
		"claude-opus-4-1-20250805":                    false,
		"claude-sonnet-4-20250514":                    false,
		"claude-3-5-haiku-20241022":                   false,
		"claude-test":                                 false,
		"anthropic.claude-sonnet-4-5-20250929-v1:0":   true,
		"us.anthropic.claude-haiku-4-5-20251001-v1:0": true,
		"anthropic.claude-3-5-haiku-20241022-v1:0":    false,
		"amazon.nova-pro-v1:0":                        false,
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-opus-4-5-20251101-v1:0": true,
	} {
		if got := provider.ClaudeStrictTools(model); got != want {
			t.Errorf("ClaudeStrictTools(%q) = %v, want %v", model, got, want)
		}
	}
}

package job_test

import (
	"testing"

	"github.com/onejob/onejob/internal/job"
)

func TestFieldText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, field, answer, want string
	}{
		{"Plain", "text", `{"text":"Hello, world"}`, "Hello, world"},
		{"AfterOtherMembers", "text", `{"n": 3, "tags": ["text", {"text": "no"}], "meta": {"text": "nested"}, "text": "yes"}`, "yes"},
		{"BeforeOtherMembers", "summary", "{\n  \"summary\" : \"short\",\n  \"text\": \"other\"\n}", "short"},
		{"Escapes", "text", `{"text":"a\"b\\c\/d\n\t\u00e9\ud83d\ude00 end"}`, "a\"b\\c/d\n\té😀 end"},
		{"RawUTF8", "text", `{"text":"naïve 日本 😀"}`, "naïve 日本 😀"},
		{"NotAString", "text", `{"text": 42, "other": "x"}`, ""},
		{"NotAStringThenNothing", "text", `{"text": null}`, ""},
		{"FirstOccurrenceOnly", "text", `{"text":"one","text":"two"}`, "one"},
		{"AKeyThatOnlyStartsLikeIt", "text", `{"textual":"no","tex":"no","text":"yes"}`, "yes"},
		{"EscapedKey", "text", `{"te\u0078t":"yes"}`, "yes"},
		{"LongKeys", "text", `{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":"no","text":"yes"}`, "yes"},
		{"LoneSurrogate", "text", `{"text":"a\ud83db"}`, "a\ufffdb"},
		{"BrokenEscape", "text", `{"text":"a\qb\u00zzc"}`, "a\ufffdb\ufffdc"},
		{"NoFieldPassesThrough", "", `{"text":"a"}`, `{"text":"a"}`},
		{"TruncatedAnswer", "text", `{"text":"half an ans`, "half an ans"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.NewFieldText(tc.field).Write(tc.answer); got != tc.want {
				t.Fatalf("whole: %q, want %q", got, tc.want)
			}
			// Cut anywhere, in two or three fragments (a provider may cut
			// inside an escape, a key or a character), the text is the same.
			b := []byte(tc.answer)
			for i := 0; i <= len(b); i++ {
				for k := i; k <= len(b); k++ {
					f := job.NewFieldText(tc.field)
					got := f.Write(string(b[:i])) + f.Write(string(b[i:k])) + f.Write(string(b[k:]))
					if got != tc.want {
						t.Fatalf("cut at %d and %d: %q, want %q", i, k, got, tc.want)
					}
				}
			}
		})
	}
}

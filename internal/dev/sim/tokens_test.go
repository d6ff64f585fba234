package sim

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestTokensAreTheRegexp holds the hand-written tokenizer to the regular
// expression it documents, on texts of every kind of character (invalid
// UTF-8 included).
func TestTokensAreTheRegexp(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`[\p{L}\p{M}]+|\p{N}{1,3}|[^\s\p{L}\p{M}\p{N}]`)
	alphabet := []string{"a", "Z", "é", "\u0301", "ß", "日", "1", "٣", "Ⅻ", "½", " ", "\t", "\n", "\r", "\f", "\v", "\u00a0",
		"{", "\"", ":", ",", "!", "😀", "\xff", "\xe2\x82"}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 500; n++ {
		var b strings.Builder
		for k := rng.IntN(40); k > 0; k-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		text := b.String()
		var want [][2]int
		for _, m := range re.FindAllStringIndex(text, -1) {
			want = append(want, [2]int{m[0], m[1]})
		}
		if got := tokenSpans(text); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: spans %v, the regexp's %v", text, got, want)
		}
	}
}

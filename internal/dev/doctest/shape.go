package doctest

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Ellipsis in an output block stands for any text: a time, a generated
// ID, the rest of a line. A line that is only an ellipsis says to the
// reader that more lines come; it matches nothing.
const Ellipsis = "…"

// capture is an output string (or, in text, a word) that is only a
// variable: whatever stands there is given to the blocks after it under
// that name, as a reader copies an ID from one answer into the next
// command.
var capture = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`)

// Match compares what a run block printed with its output block by shape,
// and returns the values its variables captured. A json output block is a
// JSON value: each member it names must be there with a value of the same
// type; strings are equal, but for an ellipsis (any text) or a variable
// (any string, captured); numbers are any number (timings, counts);
// arrays hold at least as many elements, each matching in turn. Any
// other output block is lines: each must match a line printed after the
// one the line before it matched (an ellipsis: any text; a variable: one
// word, captured).
func Match(out Block, printed string) (map[string]string, error) {
	vars := map[string]string{}
	if out.Lang == "json" {
		var want, got any
		if err := json.Unmarshal([]byte(out.Text), &want); err != nil {
			return nil, fmt.Errorf("the output block is not JSON: %w", err)
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(printed)), &got); err != nil {
			return nil, fmt.Errorf("printed no JSON value (%v): %q", err, excerpt(printed))
		}
		if err := matchJSON("", want, got, vars); err != nil {
			return nil, err
		}
		return vars, nil
	}
	lines := strings.Split(printed, "\n")
	next := 0
	for _, w := range strings.Split(out.Text, "\n") {
		w = strings.TrimRight(w, " \t")
		if strings.TrimSpace(w) == "" || strings.TrimSpace(w) == Ellipsis {
			continue
		}
		re := linePattern(w)
		found := false
		for ; next < len(lines); next++ {
			m := re.FindStringSubmatch(strings.TrimRight(lines[next], " \t"))
			if m == nil {
				continue
			}
			for i, name := range re.SubexpNames() {
				if name != "" {
					vars[name] = m[i]
				}
			}
			next++
			found = true
			break
		}
		if !found {
			return nil, fmt.Errorf("no line like %q (in order) in what it printed:\n%s", w, excerpt(printed))
		}
	}
	return vars, nil
}

// linePattern is an output line as a pattern of a whole line.
func linePattern(line string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	seen := map[string]bool{}
	for i, part := range strings.Split(line, Ellipsis) {
		if i > 0 {
			b.WriteString(".*?")
		}
		last := 0
		for _, m := range capture.FindAllStringSubmatchIndex(part, -1) {
			b.WriteString(regexp.QuoteMeta(part[last:m[0]]))
			name := part[m[2]:m[3]]
			if seen[name] {
				b.WriteString(`\S+`)
			} else {
				b.WriteString(`(?P<` + name + `>\S+)`)
				seen[name] = true
			}
			last = m[1]
		}
		b.WriteString(regexp.QuoteMeta(part[last:]))
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func matchJSON(at string, want, got any, vars map[string]string) error {
	where := at
	if where == "" {
		where = "the answer"
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is %s, want an object", where, kind(got))
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			wv := w[k]
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s has no member %q (it has %s)", where, k, members(g))
			}
			if err := matchJSON(at+"/"+k, wv, gv, vars); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s is %s, want an array", where, kind(got))
		}
		if len(g) < len(w) {
			return fmt.Errorf("%s has %d elements, want at least %d", where, len(g), len(w))
		}
		for i := range w {
			if err := matchJSON(fmt.Sprintf("%s/%d", at, i), w[i], g[i], vars); err != nil {
				return err
			}
		}
	case string:
		g, ok := got.(string)
		if !ok {
			return fmt.Errorf("%s is %s, want a string", where, kind(got))
		}
		if m := capture.FindStringSubmatch(w); m != nil && m[0] == w {
			vars[m[1]] = g
			return nil
		}
		if !linePattern(w).MatchString(g) {
			return fmt.Errorf("%s is %q, want %q", where, g, w)
		}
	case float64:
		if _, ok := got.(float64); !ok {
			return fmt.Errorf("%s is %s, want a number", where, kind(got))
		}
	default: // booleans and null
		if want != got {
			return fmt.Errorf("%s is %v, want %v", where, got, want)
		}
	}
	return nil
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func members(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, fmt.Sprintf("%q", k))
	}
	if len(ks) == 0 {
		return "none"
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// excerpt is printed output, cut for an error message.
func excerpt(s string) string {
	const limit = 2000
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}

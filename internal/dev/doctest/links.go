package doctest

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Link is a page's link or image to a place in the checkout (a file, a
// folder, a heading): what CheckLinks follows. Links with a scheme
// (https:, mailto:) leave the checkout and are not followed.
type Link struct {
	Line int
	// Dest is the destination as written (docs/api.md#routes, #routes,
	// ../clients/typescript).
	Dest string
}

// Anchors are the fragments a Markdown file's headings answer to, as
// GitHub names them: the heading's text lower-cased, its punctuation
// dropped, each space a hyphen; a repeated one gets -1, -2, … .
func Anchors(src []byte) map[string]bool {
	out := map[string]bool{}
	doc := goldmark.New().Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		h, ok := n.(*ast.Heading)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		slug := Slug(plainText(h, src))
		a := slug
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", slug, i)
		}
		out[a] = true
		return ast.WalkSkipChildren, nil
	})
	return out
}

// Slug is a heading's anchor as GitHub makes it (github-slugger): lower
// case; letters, digits, marks, hyphens and underscores kept; each space a
// hyphen; everything else dropped.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// plainText is what a heading reads: its text, code spans' included.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// linkAt is the link or image n as a Link, if it leads into the checkout.
func linkAt(n ast.Node, lineAt func(int) int) (Link, bool) {
	var dest string
	switch n := n.(type) {
	case *ast.Link:
		dest = string(n.Destination)
	case *ast.Image:
		dest = string(n.Destination)
	default:
		return Link{}, false
	}
	if u, err := url.Parse(dest); dest == "" || (err == nil && (u.Scheme != "" || u.Host != "")) {
		return Link{}, false
	}
	l := Link{Dest: dest}
	// An inline has no place of its own: its first text's is its line.
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering && l.Line == 0 {
			l.Line = lineAt(t.Segment.Start)
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	return l, true
}

// CheckLinks holds the page's links to the checkout (root): each names a
// file or folder that exists, and a fragment names a heading of its
// Markdown file (of the page itself, for #fragment alone).
func CheckLinks(root string, p Page) []error {
	var errs []error
	anchors := map[string]map[string]bool{}
	for _, l := range p.Links {
		u, err := url.Parse(l.Dest)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: link %q: %v", p.Name, l.Line, l.Dest, err))
			continue
		}
		if u.Path == "" {
			if !p.anchors[u.Fragment] {
				errs = append(errs, fmt.Errorf("%s:%d: link %q: the page has no heading #%s", p.Name, l.Line, l.Dest, u.Fragment))
			}
			continue
		}
		target := path.Clean(path.Join(path.Dir(p.Name), u.Path))
		if target == ".." || strings.HasPrefix(target, "../") {
			errs = append(errs, fmt.Errorf("%s:%d: link %q leaves the checkout", p.Name, l.Line, l.Dest))
			continue
		}
		file := filepath.Join(root, filepath.FromSlash(target))
		if _, err := os.Stat(file); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: link %q: no %s in the checkout", p.Name, l.Line, l.Dest, target))
			continue
		}
		if u.Fragment == "" {
			continue
		}
		if !strings.HasSuffix(target, ".md") {
			errs = append(errs, fmt.Errorf("%s:%d: link %q: a fragment of %s, which has no headings", p.Name, l.Line, l.Dest, target))
			continue
		}
		a, ok := anchors[target]
		if !ok {
			src, err := os.ReadFile(file)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			a = Anchors(src)
			anchors[target] = a
		}
		if !a[u.Fragment] {
			errs = append(errs, fmt.Errorf("%s:%d: link %q: %s has no heading #%s", p.Name, l.Line, l.Dest, target, u.Fragment))
		}
	}
	return errs
}

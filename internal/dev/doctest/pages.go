// Package doctest holds the docs' pages to what they show. Every fenced
// block of a page is marked: `run` (a command a test runs against a `make
// run` stack, as a reader would), `output` (what the run block before it
// prints, compared by shape), or `illustrative` (shown, not run); a
// mermaid diagram is generated and held by its own test. A figure names
// the row it comes from in a code span: `bench:TABLE/ROW` (a `make bench`
// row, checked by bench's tests against the bench's own names) or
// `test:Name` (a test that logs it). A link into the checkout leads to a
// file that is there and, with a fragment, to one of its headings.
// CONTRIBUTING.md, "Docs that are tested", is the authors' side of it.
package doctest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// The marks a fenced block's info string carries after its language
// (```sh run, ```json output, ```text illustrative), or first when the
// block has no language.
const (
	MarkRun          = "run"
	MarkOutput       = "output"
	MarkIllustrative = "illustrative"
)

// The languages a run block may be written in: bash runs it.
var runLangs = []string{"sh", "bash"}

// Diagram is the language of the blocks exempt from marks: the state
// machines' diagrams, generated from the code and held to it by
// TestDiagramsAreCurrent.
const Diagram = "mermaid"

// Page is one page, parsed.
type Page struct {
	// Name is its path from the checkout's root (README.md, docs/x.md).
	Name      string
	Blocks    []Block
	Citations []Citation
	// Links are its links and images into the checkout (CheckLinks).
	Links []Link
	// anchors are its headings' fragments, for its #fragment links.
	anchors map[string]bool
	// Problems are what the page breaks of the marks' rules.
	Problems []error
}

// Block is a fenced block (or an indented one, which cannot be marked).
type Block struct {
	// Line is the line of its opening fence, from 1.
	Line int
	// Lang is the info string's first word unless that is a mark.
	Lang string
	// Mark is run, output, illustrative or empty; Note what the info
	// string says after it (why a block is illustrative, say).
	Mark, Note string
	Text       string
	// Indented is an indented code block: it has no info string.
	Indented bool
	// Output is, for a run block, the output block that follows it.
	Output *Block
}

// Citation is a code span naming where a figure comes from:
// `bench:TABLE/ROW` (Row empty: the table, one row or rows by a parameter)
// or `test:Name` (`test:path/to/pkg.TestName` names its package too).
type Citation struct {
	Line int
	// Kind is "bench" or "test".
	Kind       string
	Table, Row string
	// Package is the test's package directory, when the citation names it.
	Package, Test string
	Text          string
}

// String is the citation as written.
func (c Citation) String() string { return "`" + c.Text + "`" }

// Pages are the pages held to their blocks: README.md, CONTRIBUTING.md and
// every Markdown file under docs/.
func Pages(root string) ([]string, error) {
	pages := []string{"README.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(pages[2:])
	return pages, nil
}

// Load reads and parses every page of Pages.
func Load(root string) ([]Page, error) {
	names, err := Pages(root)
	if err != nil {
		return nil, err
	}
	out := make([]Page, 0, len(names))
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Parse(name, src))
	}
	return out, nil
}

// Parse reads a page's blocks and citations and checks its marks.
func Parse(name string, src []byte) Page {
	p := Page{Name: name}
	lineAt := func(offset int) int { return bytes.Count(src[:offset], []byte("\n")) + 1 }
	doc := goldmark.New().Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.FencedCodeBlock:
			b := Block{Text: linesOf(n, src)}
			switch {
			case n.Info != nil:
				b.Line = lineAt(n.Info.Segment.Start)
				b.Lang, b.Mark, b.Note = splitInfo(string(n.Info.Segment.Value(src)))
			case n.Lines().Len() > 0:
				b.Line = lineAt(n.Lines().At(0).Start) - 1
			}
			p.Blocks = append(p.Blocks, b)
			return ast.WalkSkipChildren, nil
		case *ast.CodeBlock:
			b := Block{Text: linesOf(n, src), Indented: true}
			if n.Lines().Len() > 0 {
				b.Line = lineAt(n.Lines().At(0).Start)
			}
			p.Blocks = append(p.Blocks, b)
			return ast.WalkSkipChildren, nil
		case *ast.Link, *ast.Image:
			if l, ok := linkAt(n, lineAt); ok {
				p.Links = append(p.Links, l)
			}
			return ast.WalkContinue, nil
		case *ast.CodeSpan:
			var parts []string
			start := -1
			for c := n.FirstChild(); c != nil; c = c.NextSibling() {
				if t, ok := c.(*ast.Text); ok {
					parts = append(parts, string(t.Segment.Value(src)))
					if start < 0 {
						start = t.Segment.Start
					}
				}
			}
			if c, ok := citation(strings.Join(strings.Fields(strings.Join(parts, " ")), " ")); ok && start >= 0 {
				c.Line = lineAt(start)
				p.Citations = append(p.Citations, c)
			}
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	p.anchors = Anchors(src)
	p.Problems = p.check()
	return p
}

func linesOf(n ast.Node, src []byte) string {
	var b strings.Builder
	lines := n.Lines()
	for i := range lines.Len() {
		seg := lines.At(i)
		b.Write(seg.Value(src))
	}
	return b.String()
}

// splitInfo reads an info string: a language, then a mark and a note; or
// a mark first (a block without a language).
func splitInfo(info string) (lang, mark, note string) {
	words := strings.Fields(info)
	if len(words) == 0 {
		return "", "", ""
	}
	if isMark(words[0]) {
		return "", words[0], strings.Join(words[1:], " ")
	}
	lang = words[0]
	if len(words) > 1 && isMark(words[1]) {
		return lang, words[1], strings.Join(words[2:], " ")
	}
	return lang, "", strings.Join(words[1:], " ")
}

func isMark(w string) bool {
	return w == MarkRun || w == MarkOutput || w == MarkIllustrative
}

// citation reads a code span's text as a citation, if it is one.
func citation(s string) (Citation, bool) {
	if rest, ok := strings.CutPrefix(s, "bench:"); ok {
		table, row, _ := strings.Cut(rest, "/")
		return Citation{Kind: "bench", Table: strings.TrimSpace(table), Row: strings.TrimSpace(row), Text: s}, true
	}
	if rest, ok := strings.CutPrefix(s, "test:"); ok {
		c := Citation{Kind: "test", Test: rest, Text: s}
		if i := strings.LastIndex(rest, "."); i >= 0 {
			c.Package, c.Test = rest[:i], rest[i+1:]
		}
		return c, true
	}
	return Citation{}, false
}

// check holds the page's blocks to the marks' rules, and pairs each output
// block with the run block before it.
func (p *Page) check() []error {
	var errs []error
	bad := func(b Block, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", p.Name, b.Line, fmt.Sprintf(format, args...)))
	}
	for i := range p.Blocks {
		b := &p.Blocks[i]
		switch {
		case b.Indented:
			bad(*b, "an indented code block cannot be marked: fence it (```sh illustrative, or ```sh run)")
		case b.Mark == "" && b.Lang == Diagram:
		case b.Mark == "":
			bad(*b, "an unmarked block: mark it run, output or illustrative after its language (```sh run, ```json output, ```text illustrative)")
		case b.Mark == MarkRun && !slices.Contains(runLangs, b.Lang):
			bad(*b, "a run block is run by bash: its language is one of %s, not %q", strings.Join(runLangs, ", "), b.Lang)
		case b.Mark == MarkOutput:
			if i == 0 || p.Blocks[i-1].Mark != MarkRun {
				bad(*b, "an output block follows the run block whose output it is")
				continue
			}
			p.Blocks[i-1].Output = b
		}
	}
	return errs
}

// RunBlocks are the page's run blocks, in order.
func (p Page) RunBlocks() []Block {
	var out []Block
	for _, b := range p.Blocks {
		if b.Mark == MarkRun {
			out = append(out, b)
		}
	}
	return out
}

// CheckTests holds the page's `test:` citations to tests: the test
// functions of the checkout by package directory (from its root). A
// subtest is cited by its test's name and path.
func CheckTests(p Page, tests map[string][]string) []error {
	var errs []error
	for _, c := range p.Citations {
		if c.Kind != "test" {
			continue
		}
		name, _, _ := strings.Cut(c.Test, "/")
		found := false
		for pkg, names := range tests {
			if (c.Package == "" || pkg == c.Package) && slices.Contains(names, name) {
				found = true
				break
			}
		}
		if !found {
			where := ""
			if c.Package != "" {
				where = " in " + c.Package
			}
			errs = append(errs, fmt.Errorf("%s:%d: %s names no test function%s", p.Name, c.Line, c, where))
		}
	}
	return errs
}

// CheckBench holds the page's `bench:` citations to the bench's rows:
// table names, each with the names of its rows (none: a table cited
// whole). A row that is gone, or renamed, fails it.
func CheckBench(p Page, rows map[string][]string) []error {
	var errs []error
	for _, c := range p.Citations {
		if c.Kind != "bench" {
			continue
		}
		names, ok := rows[c.Table]
		switch {
		case !ok:
			tables := make([]string, 0, len(rows))
			for t := range rows {
				tables = append(tables, t)
			}
			slices.Sort(tables)
			errs = append(errs, fmt.Errorf("%s:%d: %s: make bench has no table %q (it has %s)", p.Name, c.Line, c, c.Table,
				strings.Join(tables, ", ")))
		case c.Row == "" && len(names) > 0:
			errs = append(errs, fmt.Errorf("%s:%d: %s: name the row of %s (%s)", p.Name, c.Line, c, c.Table, strings.Join(names, "; ")))
		case c.Row != "" && !slices.Contains(names, c.Row):
			errs = append(errs, fmt.Errorf("%s:%d: %s: make bench's %s has no row %q (it has: %s)", p.Name, c.Line, c, c.Table, c.Row,
				strings.Join(names, "; ")))
		}
	}
	return errs
}

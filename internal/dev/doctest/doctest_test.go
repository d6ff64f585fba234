package doctest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
)

const fence = "```"

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, page string
		// blocks: "lang mark" of each block; problems: a word each problem says.
		blocks, problems []string
		citations        []Citation
		outputOf         int // the index of the block whose Output is set, or -1
	}{
		{"Marked", "# p\n\n" + fence + "sh run\necho hi\n" + fence + "\n\n" + fence + "text output\nhi\n" + fence + "\n\n" +
			fence + "json illustrative needs AWS\n{}\n" + fence + "\n\n" + fence + "illustrative\ntree\n" + fence + "\n",
			[]string{"sh run", "text output", "json illustrative", " illustrative"}, nil, nil, 0},
		{"Diagram", fence + "mermaid\nstateDiagram-v2\n" + fence + "\n", []string{"mermaid "}, nil, nil, -1},
		{"Unmarked", fence + "sh\nmake run\n" + fence + "\n\n" + fence + "\nplain\n" + fence + "\n",
			[]string{"sh ", " "}, []string{"unmarked", "unmarked"}, nil, -1},
		{"Indented", "text\n\n    onejob jobs get ID\n", []string{" "}, []string{"indented"}, nil, -1},
		{"OutputWithoutRun", fence + "sh illustrative\nx\n" + fence + "\n\n" + fence + "text output\ny\n" + fence + "\n",
			[]string{"sh illustrative", "text output"}, []string{"follows the run block"}, nil, -1},
		{"RunNotShell", fence + "json run\n{}\n" + fence + "\n", []string{"json run"}, []string{"bash"}, nil, -1},
		{"Citations", "Costs $1 (`bench:per_job/happy path, create\nrate`), waits (`bench:throttling_drill`),\n" +
			"logged by `test:TestBrownout` and `test:internal/dev/stack.TestOneOwnerIsBounded`; `make bench` is no citation.\n",
			nil, nil, []Citation{
				{Line: 1, Kind: "bench", Table: "per_job", Row: "happy path, create rate"},
				{Line: 2, Kind: "bench", Table: "throttling_drill"},
				{Line: 3, Kind: "test", Test: "TestBrownout"},
				{Line: 3, Kind: "test", Package: "internal/dev/stack", Test: "TestOneOwnerIsBounded"},
			}, -1},
		{"CodeInABlockIsNoCitation", fence + "text illustrative\n`bench:nothing`\n" + fence + "\n", []string{"text illustrative"}, nil, nil, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Parse("page.md", []byte(tc.page))
			var blocks []string
			for _, b := range p.Blocks {
				blocks = append(blocks, b.Lang+" "+b.Mark)
			}
			if strings.Join(blocks, "|") != strings.Join(tc.blocks, "|") {
				t.Errorf("blocks %q, want %q", blocks, tc.blocks)
			}
			if len(p.Problems) != len(tc.problems) {
				t.Fatalf("problems %v, want %d", p.Problems, len(tc.problems))
			}
			for i, want := range tc.problems {
				if !strings.Contains(p.Problems[i].Error(), want) || !strings.HasPrefix(p.Problems[i].Error(), "page.md:") {
					t.Errorf("problem %q does not say %q with its place", p.Problems[i], want)
				}
			}
			for i, b := range p.Blocks {
				if (b.Output != nil) != (i == tc.outputOf) {
					t.Errorf("block %d output %v", i, b.Output)
				}
			}
			if len(p.Citations) != len(tc.citations) {
				t.Fatalf("citations %+v, want %+v", p.Citations, tc.citations)
			}
			for i, want := range tc.citations {
				got := p.Citations[i]
				got.Text = ""
				if got != want {
					t.Errorf("citation %d = %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, lang, want, printed string
		vars                      map[string]string
		fails                     string // a word of the error; "" matches
	}{
		{"JSONShape", "json", `{"id": "$ID", "type": "demo", "created_at": "…Z", "version": 0, "providers": ["sim-primary"]}`,
			`{"id":"job_1","type":"demo","status":"pending","created_at":"2026-01-02T03:04:05Z","version":3,"providers":["sim-primary","sim-fallback"]}`,
			map[string]string{"ID": "job_1"}, ""},
		{"JSONMissingMember", "json", `{"id": "$ID", "type": "demo"}`, `{"type":"https://onejob.dev/problems/not-found","status":404}`, nil, `no member "id"`},
		{"JSONOtherString", "json", `{"status": "succeeded"}`, `{"status":"failed"}`, nil, `/status is "failed"`},
		{"JSONOtherType", "json", `{"version": 0}`, `{"version":"0"}`, nil, "want a number"},
		{"JSONShortArray", "json", `{"a": [1, 2]}`, `{"a":[1]}`, nil, "at least 2"},
		{"NoJSON", "json", `{}`, "404 page not found", nil, "no JSON"},
		{"Lines", "text", "succeeded  #1 sim-primary succeeded\n…\n  result  {…}\n", "running  #1 sim-primary running\n" +
			"succeeded  #1 sim-primary succeeded\n  #1  sim-primary  succeeded\n  result  {\"text\":\"x\"}\n", map[string]string{}, ""},
		{"LinesCapture", "text", "created $ID  demo  …", "key k1\ncreated job_9  demo  pending\n", map[string]string{"ID": "job_9"}, ""},
		{"LinesOutOfOrder", "text", "b\na", "a\nb\n", nil, `no line like "a"`},
		{"LinesWhole", "text", "succeeded", "not succeeded\n", nil, "no line like"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars, err := Match(Block{Lang: tc.lang, Mark: MarkOutput, Text: tc.want}, tc.printed)
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("err = %v, want one saying %q", err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(vars) != len(tc.vars) {
				t.Fatalf("vars %v, want %v", vars, tc.vars)
			}
			for k, v := range tc.vars {
				if vars[k] != v {
					t.Errorf("%s = %q, want %q", k, vars[k], v)
				}
			}
		})
	}
}

// TestSessionRun: a page's blocks run as in one reader's shell (variables,
// captures and the directory carry on; make run's port is the stack's),
// and the first that fails is named.
func TestSessionRun(t *testing.T) {
	t.Parallel()
	page := Parse("page.md", []byte(strings.Join([]string{
		fence + "sh run\nGREETING=hello\ncd sub\necho \"$SETUP $GREETING\"; echo created job_7 demo\n" + fence,
		fence + "text output\n$SETUP hello\ncreated $ID demo\n" + fence,
		fence + "sh run\necho \"$GREETING $ID $(basename \"$PWD\") localhost:8080 127.0.0.1:8080/v1/jobs\"\n" + fence,
		fence + "text output\nhello job_7 sub localhost:4711 127.0.0.1:4711/v1/jobs\n" + fence,
		fence + "sh run\necho '{\"id\": \"job_8\"}'\n" + fence,
		fence + "json output\n{\"id\": \"$ID\"}\n" + fence,
		fence + "sh run\necho $ID\n" + fence,
		fence + "text output\njob_8\n" + fence,
	}, "\n\n")))
	if len(page.Problems) > 0 {
		t.Fatal(page.Problems)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := Session{Dir: dir, Env: os.Environ(), Setup: "export SETUP=pasted", Port: "4711"}
	blocks := page.RunBlocks()
	if err := s.Run(t.Context(), page.Name, blocks); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		block int
		text  string
		fails string
	}{
		{"ExitStatus", 1, "false\n", "exit status 1"},
		{"UnsetVariable", 1, "echo $NOT_SET\n", "unbound variable"},
		{"Output", 3, "echo job_9\n", `no line like "job_8"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			changed := append([]Block(nil), blocks...)
			changed[tc.block].Text = tc.text
			err := s.Run(t.Context(), page.Name, changed)
			var be *BlockError
			if !errors.As(err, &be) || be.Index != tc.block || !strings.Contains(err.Error(), tc.fails) {
				t.Fatalf("err = %v, want block %d failing with %q", err, tc.block, tc.fails)
			}
		})
	}
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		// A block that never ends is ended at its bound, with what it
		// started (the sleep in its process group).
		short := Session{Dir: dir, Env: os.Environ(), BlockTimeout: 100 * time.Millisecond}
		err := short.Run(context.Background(), page.Name, []Block{{Mark: MarkRun, Text: "sleep 600 & wait\n"}})
		var be *BlockError
		if !errors.As(err, &be) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRenameRoute(t *testing.T) {
	t.Parallel()
	b, ok := RenameRoute(Block{Text: "curl -s localhost:8080/v1/jobs/$ID/attempts -H x\n"})
	if !ok || b.Text != "curl -s localhost:8080/v1/jobs-renamed/$ID/attempts -H x\n" {
		t.Fatalf("%v %q", ok, b.Text)
	}
	if _, ok := RenameRoute(Block{Text: "onejob jobs watch $ID\n"}); ok {
		t.Fatal("renamed a route in a block that names none")
	}
}

// TestThePagesMarkEveryBlock: every block of README.md, CONTRIBUTING.md and
// docs/ is marked run, output or illustrative (or is a diagram).
func TestThePagesMarkEveryBlock(t *testing.T) {
	t.Parallel()
	pages, err := Load(testenv.MustRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, p := range pages {
		for _, err := range p.Problems {
			t.Error(err)
		}
		blocks += len(p.Blocks)
	}
	if len(pages) < 3 || blocks == 0 {
		t.Fatalf("%d pages, %d blocks", len(pages), blocks)
	}
}

// TestThePagesCiteTestsThatExist: a figure's `test:Name` names a test
// function of the checkout (of its package, when the citation names one).
func TestThePagesCiteTestsThatExist(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	pages, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := testFuncs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		for _, err := range CheckTests(p, tests) {
			t.Error(err)
		}
	}
	bogus := Parse("bogus.md", []byte("Measured by `test:TestNoSuchDrill` and `test:internal/job.TestBrownout`.\n"))
	if errs := CheckTests(bogus, tests); len(errs) != 2 {
		t.Errorf("citations of tests that do not exist: %v", errs)
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)

// testFuncs is every test function of the checkout, by package directory.
func testFuncs(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], m[1])
		}
		return nil
	})
	return out, err
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"What onejob guarantees": "what-onejob-guarantees",
		"4. A webhook":           "4-a-webhook",
		"Feedback: make check, make test, and where the time goes":    "feedback-make-check-make-test-and-where-the-time-goes",
		"An owner's standing at a provider (fair share and back-off)": "an-owners-standing-at-a-provider-fair-share-and-back-off",
		"How to …": "how-to-",
		"The asynchronous variant: webhook-async":        "the-asynchronous-variant-webhook-async",
		"Limits per owner, and how long things are kept": "limits-per-owner-and-how-long-things-are-kept",
		"snake_case Über":                                "snake_case-über",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := Anchors([]byte("# On `make run`, and the drills\n\n## Notes\n\n## Notes\n\ntext\n"))
	for _, want := range []string{"on-make-run-and-the-drills", "notes", "notes-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
}

// TestThePagesLinksResolve: every link of README.md, CONTRIBUTING.md and
// docs/ into the checkout names a file or folder that is there, and its
// fragment a heading of that file.
func TestThePagesLinksResolve(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	pages, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, p := range pages {
		for _, err := range CheckLinks(root, p) {
			t.Error(err)
		}
		links += len(p.Links)
	}
	if links == 0 {
		t.Fatal("no page links anywhere")
	}
	bogus := Parse("docs/bogus.md", []byte("# Here\n\nSee [here](#here), [the API](api.md#routes), [a folder](../clients/typescript),\n"+
		"[gone](api.md#no-such-heading), [no file](nowhere.md), [out](../../etc/passwd), [a fragment of Go](../go.mod#x),\n"+
		"[missing anchor](#elsewhere) and ![an image](missing.png); [outside](https://example.com/x#y) is not followed.\n"))
	errs := CheckLinks(root, bogus)
	want := []string{"no heading #no-such-heading", "no docs/nowhere.md", "leaves the checkout", "which has no headings", "no heading #elsewhere", "no docs/missing.png"}
	if len(errs) != len(want) {
		t.Fatalf("bogus links: %v, want %d errors", errs, len(want))
	}
	for i, w := range want {
		if !strings.Contains(errs[i].Error(), w) || !strings.HasPrefix(errs[i].Error(), "docs/bogus.md:") {
			t.Errorf("error %d = %v, want one saying %q with its place", i, errs[i], w)
		}
	}
}

// TestThePagesAreSizedToRead: the README stays a front door and each page
// under docs/ a comfortable read; a subject that outgrows its page gets a
// page of its own (CONTRIBUTING.md, "Where docs go").
func TestThePagesAreSizedToRead(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	names, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		limit := maxPageLines
		switch {
		case name == "README.md":
			limit = maxReadmeLines
		case !strings.HasPrefix(name, "docs/"):
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(src), "\n"); n > limit {
			t.Errorf("%s has %d lines, over %d: move a subject to a page of its own under docs/ and link it", name, n, limit)
		}
	}
}

// The bounds TestThePagesAreSizedToRead holds the pages to: about 200 and
// about 400 lines, with room for a paragraph.
const (
	maxReadmeLines = 215
	maxPageLines   = 440
)

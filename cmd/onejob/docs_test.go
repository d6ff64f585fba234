package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/doctest"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// TestDocs runs the pages' run blocks (internal/dev/doctest: README.md,
// CONTRIBUTING.md and docs/) as a reader would, against `onejob run` as
// `make run` starts it: the export lines it prints pasted first, onejob on
// the PATH, make run's port read as the stack's. A page's blocks run in
// order, in one reader's shell; one that exits non-zero, or prints other
// than its output block's shape, fails it. Then each block that names an
// API route runs again with the route renamed, as a page reads once a
// route changed and the page did not: it must fail, at that block.
func TestDocs(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	pages, err := doctest.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var runnable []doctest.Page
	for _, p := range pages {
		if len(p.Problems) > 0 {
			t.Fatalf("%s breaks the marks' rules (TestThePagesMarkEveryBlock, internal/dev/doctest): %v", p.Name, p.Problems)
		}
		if len(p.RunBlocks()) > 0 {
			runnable = append(runnable, p)
		}
	}
	if len(runnable) == 0 {
		t.Fatal("no page has a run block")
	}

	banner, _ := startRun(t)
	port := regexp.MustCompile(`HTTP API\s+http://127\.0\.0\.1:(\d+)`).FindStringSubmatch(banner)
	if port == nil {
		t.Fatalf("no API port in:\n%s", banner)
	}
	var exports []string
	for _, line := range strings.Split(banner, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "export ") {
			exports = append(exports, l)
		}
	}
	if len(exports) == 0 {
		t.Fatalf("make run prints no export lines:\n%s", banner)
	}
	env := []string{"PATH=" + filepath.Dir(buildOnejob(t)) + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	s := doctest.Session{Dir: root, Env: env, Setup: strings.Join(exports, "\n"), Port: port[1]}

	blocks := 0
	for _, p := range runnable {
		t.Run(strings.NewReplacer("/", "_", ".", "_").Replace(p.Name), func(t *testing.T) {
			if err := s.Run(t.Context(), p.Name, p.RunBlocks()); err != nil {
				t.Fatal(err)
			}
			blocks += len(p.RunBlocks())
		})
	}

	t.Run("ARenamedRouteFails", func(t *testing.T) {
		renamed := 0
		for _, p := range runnable {
			run := p.RunBlocks()
			for i, b := range run {
				changed, ok := doctest.RenameRoute(b)
				if !ok {
					continue
				}
				renamed++
				upTo := append(append([]doctest.Block(nil), run[:i]...), changed)
				err := s.Run(t.Context(), p.Name, upTo)
				var be *doctest.BlockError
				if !errors.As(err, &be) || be.Index != i {
					t.Errorf("%s:%d with its route renamed: %v; want that block to fail", p.Name, b.Line, err)
				}
			}
		}
		if renamed == 0 {
			t.Fatal("no run block names a route: nothing shows that a renamed route fails a page")
		}
		t.Logf("docs: %d pages, %d run blocks ran; %d with a route renamed failed", len(runnable), blocks, renamed)
	})
}

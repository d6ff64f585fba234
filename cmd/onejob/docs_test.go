package main

import (
	"errors"
	"io"
	"net/http"
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

	t.Run("TheBannerIsTheTour", func(t *testing.T) {
		checkBannerIsTheTour(t, banner, pages)
	})

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

// checkBannerIsTheTour holds what `make run` prints to README.md's tour:
// each command of the banner's tour is one of the README's run blocks
// (make run's port and a job's ID as the README writes them), and the
// console's link, as printed, serves the console the tour shows.
func checkBannerIsTheTour(t *testing.T, banner string, pages []doctest.Page) {
	t.Helper()
	var readme strings.Builder
	for _, p := range pages {
		if p.Name == "README.md" {
			for _, b := range p.RunBlocks() {
				readme.WriteString(joinedCommand(b.Text) + "\n")
			}
		}
	}
	port := regexp.MustCompile(`(http://)?127\.0\.0\.1:\d+`)
	cmds := tourCommands(banner)
	if len(cmds) < 3 {
		t.Fatalf("the banner's tour has %d commands, want the submit, the watch and the listener:\n%s", len(cmds), banner)
	}
	for _, c := range cmds {
		c = strings.ReplaceAll(port.ReplaceAllString(c, "localhost:"+doctest.DefaultPort), "JOB_ID", "$ID")
		if !strings.Contains(readme.String(), c) {
			t.Errorf("make run prints %q, which no run block of README.md's tour runs", c)
		}
	}

	m := regexp.MustCompile(`(?m)^\s+console\s+(http://127\.0\.0\.1:\d+/console)#token=\S+$`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no console link in the banner:\n%s", banner)
	}
	if !strings.Contains(readme.String(), "localhost:"+doctest.DefaultPort+"/console") {
		t.Error("README.md's tour fetches no /console")
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(body), "<title>onejob console</title>") || !strings.Contains(string(body), "console.mjs") {
		t.Errorf("the printed console link %s answered %d %s:\n%.300s", m[1], resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// tourCommands are the commands the banner's tour shows (the lines after
// "take README.md's five-minute tour" up to the next blank line), each on
// one line, without the notes in parentheses beside them.
func tourCommands(banner string) []string {
	_, tour, ok := strings.Cut(banner, "five-minute tour")
	if !ok {
		return nil
	}
	_, tour, _ = strings.Cut(tour, "\n\n")
	tour, _, _ = strings.Cut(tour, "\n\n")
	note := regexp.MustCompile(`\s{2,}\(.*\)$`)
	var cmds []string
	var cur strings.Builder
	for _, line := range strings.Split(tour, "\n") {
		line = note.ReplaceAllString(strings.TrimSpace(line), "")
		cont := strings.HasSuffix(line, "\\")
		cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
		if !cont {
			cmds = append(cmds, joinedCommand(cur.String()))
			cur.Reset()
		}
	}
	return cmds
}

// joinedCommand is a command with its continuation lines joined and its spaces
// collapsed.
func joinedCommand(cmd string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(cmd, "\\\n", " ")), " ")
}

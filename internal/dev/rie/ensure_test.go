package rie

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// Parallel tests of one package share a process: callers that find no
// cached emulator at the same moment must end with one build and one
// answer, not trip over each other's half-built file (a CI run once
// failed when two same-process builds shared a temporary name).
func TestEnsureRIEConcurrentCallersBuildOnce(t *testing.T) {
	t.Parallel()
	// A cache folder of its own starts empty; the Go build cache
	// makes this second build of the emulator mostly a link.
	root := t.TempDir()
	testenv.MustRoot(t) // the module cache and go command the build needs
	const callers = 4
	var (
		progress lockedBuffer
		wg       sync.WaitGroup
		paths    = make([]string, callers)
		errs     = make([]error, callers)
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = EnsureRIE(t.Context(), root, &progress)
		}()
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if paths[i] != RIEPath(root) {
			t.Fatalf("caller %d got %s, want %s", i, paths[i], RIEPath(root))
		}
	}
	if !cached(RIEPath(root)) {
		t.Fatalf("%s is not a regular file", RIEPath(root))
	}
	left, err := filepath.Glob(filepath.Join(filepath.Dir(RIEPath(root)), "*.tmp"))
	if err != nil || len(left) > 0 {
		t.Fatalf("temporary builds left behind: %v %v", left, err)
	}
	if n := strings.Count(progress.String(), "building "); n != 1 {
		t.Fatalf("%d builds for %d concurrent callers, want 1:\n%s", n, callers, progress.String())
	}
}

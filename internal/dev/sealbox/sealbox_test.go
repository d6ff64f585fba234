package sealbox_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/dev/sealbox"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/sealtest"
)

func TestSealboxConforms(t *testing.T) {
	t.Parallel()
	sealtest.Run(t, func(t *testing.T) sealtest.Pair {
		t.Helper()
		s, o, err := sealbox.NewPair()
		if err != nil {
			t.Fatal(err)
		}
		return sealtest.Pair{Sealer: s, Opener: o}
	})
}

// A key file make run created opens, after a restart, what was sealed
// before it; only its owner may read it.
func TestAKeyFileOutlivesTheRun(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "local", "secrets.key")
	first, created, err := sealbox.LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate = %v, created %v", err, created)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	s, err := sealbox.NewSealer(first.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	scope := lifecycle.SealScope{Owner: "o", EndpointID: "ep_1"}
	sealed, err := s.Seal(t.Context(), scope, "whsec_c2VjcmV0")
	if err != nil {
		t.Fatal(err)
	}
	again, created, err := sealbox.LoadOrCreate(path)
	if err != nil || created {
		t.Fatalf("second LoadOrCreate = %v, created %v; want the file read", err, created)
	}
	o, err := sealbox.NewOpener(again)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := o.Open(t.Context(), scope, sealed); err != nil || got != "whsec_c2VjcmV0" {
		t.Fatalf("Open after reload = %q, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sealbox.LoadOrCreate(path); err == nil {
		t.Fatal("a damaged key file was accepted")
	}
}

// Runs started together (the CLI tests start several) agree on one key.
func TestRunsStartedTogetherAgreeOnOneKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secrets.key")
	const runs = 8
	keys := make(chan []byte, runs)
	errs := make(chan error, runs)
	var wg sync.WaitGroup
	for range runs {
		wg.Go(func() {
			k, _, err := sealbox.LoadOrCreate(path)
			if err != nil {
				errs <- err
				return
			}
			keys <- k.Bytes()
		})
	}
	wg.Wait()
	close(keys)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var first []byte
	for k := range keys {
		if first == nil {
			first = k
		} else if !bytes.Equal(k, first) {
			t.Fatal("two runs made different keys")
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonTool: a tool is found on PATH, else in the checkout's virtual
// environment, else the error says how to install it. (t.Setenv: not
// parallel.)
func TestPythonTool(t *testing.T) {
	root := t.TempDir()
	onPath := t.TempDir()
	t.Setenv("PATH", onPath)
	write := func(dir, name string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}

	if _, err := PythonTool(root, "cfn-lint"); err == nil || !strings.Contains(err.Error(), "make python-tools") {
		t.Fatalf("missing everywhere: err = %v", err)
	}
	venv := write(VenvBin(root), "cfn-lint")
	if got, err := PythonTool(root, "cfn-lint"); err != nil || got != venv {
		t.Fatalf("in the venv: %q %v, want %q", got, err, venv)
	}
	path := write(onPath, "cfn-lint")
	if got, err := PythonTool(root, "cfn-lint"); err != nil || got != path {
		t.Fatalf("on PATH and in the venv: %q %v, want PATH's %q", got, err, path)
	}
	if _, err := PythonTool(root, "pip"); err == nil {
		t.Fatal("a tool requirements.txt does not pin was accepted")
	}
}

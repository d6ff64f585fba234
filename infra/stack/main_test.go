package stack

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// TestMain makes jsii (the CDK's Go bindings) run on the pinned node. jsii
// starts its node process while the packages initialize, before TestMain,
// with JSII_NODE or else whatever "node" is on PATH; `make` exports
// JSII_NODE, and a bare `go test` gets it here by running this test binary
// again with it set (the first node process ends with this one's pipes).
func TestMain(m *testing.M) {
	root, err := testenv.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra/stack:", err)
		os.Exit(1)
	}
	node, err := testenv.Node(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra/stack:", err)
		os.Exit(1)
	}
	if os.Getenv("JSII_NODE") != node {
		self, err := os.Executable()
		if err == nil {
			err = syscall.Exec(self, os.Args, append(os.Environ(), "JSII_NODE="+node))
		}
		fmt.Fprintln(os.Stderr, "infra/stack: running again with JSII_NODE:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

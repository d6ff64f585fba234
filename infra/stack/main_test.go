package stack

import (
	"fmt"
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// TestMain points jsii at the pinned node before the first CDK call starts
// its node process: jsii reads JSII_NODE, else runs whatever "node" is on
// PATH.
func TestMain(m *testing.M) {
	root, err := testenv.Root()
	if err == nil {
		var node string
		if node, err = testenv.Node(root); err == nil {
			err = os.Setenv("JSII_NODE", node)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra/stack:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

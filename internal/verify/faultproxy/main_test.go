package faultproxy_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/dev/testenv"
)

var harness ddbtest.Harness

func TestMain(m *testing.M) {
	// The tests wait on dynalite through the proxy: 24 s at 2 at a time,
	// 18 s at 8 (idle).
	testenv.WaitBoundParallel(8)
	os.Exit(harness.Run(m))
}

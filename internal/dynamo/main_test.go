package dynamo_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// harness is this package's dynalite, motoHarness its moto_server (each
// started on first use); every test gets its own tables.
var (
	harness     = ddbtest.Harness{Backend: ddbtest.Dynalite}
	motoHarness = ddbtest.Harness{Backend: ddbtest.Moto}
)

func TestMain(m *testing.M) {
	// The conformance suite's tests mostly wait on the two servers.
	testenv.WaitBoundParallel(8)
	os.Exit(ddbtest.RunAll(m, &harness, &motoHarness))
}

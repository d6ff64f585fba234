package dynamo_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
)

// harness is this package's dynalite, motoHarness its moto_server (each
// started on first use); every test gets its own tables.
var (
	harness     = ddbtest.Harness{Backend: ddbtest.Dynalite}
	motoHarness = ddbtest.Harness{Backend: ddbtest.Moto}
)

func TestMain(m *testing.M) { os.Exit(ddbtest.RunAll(m, &harness, &motoHarness)) }

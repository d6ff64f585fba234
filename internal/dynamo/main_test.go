package dynamo_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/dynalite/dynalitetest"
)

// harness is this package's one dynalite; every test gets its own tables.
var harness dynalitetest.Harness

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

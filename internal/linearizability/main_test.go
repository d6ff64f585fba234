package linearizability_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dynalite/dynalitetest"
)

var harness dynalitetest.Harness

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

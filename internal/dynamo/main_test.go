package dynamo_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/dynalite/dynalitetest"
)

var harness dynalitetest.Harness

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

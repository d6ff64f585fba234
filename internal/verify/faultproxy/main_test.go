package faultproxy_test

import (
	"os"
	"testing"

	"github.com/onejob/onejob/internal/dev/ddbtest"
)

var harness ddbtest.Harness

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

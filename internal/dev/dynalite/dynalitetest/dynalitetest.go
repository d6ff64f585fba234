// Package dynalitetest gives each test package one dynalite server and each
// test its own freshly created tables.
package dynalitetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dynamo"
)

// Harness is one dynalite shared by a test binary.
type Harness struct {
	once   sync.Once
	server *dynalite.Server
	err    error
}

// Run starts nothing until a test asks; it stops the server after m.Run.
// Use it from TestMain: os.Exit(h.Run(m)).
func (h *Harness) Run(m *testing.M) int {
	code := m.Run()
	if h.server != nil {
		_ = h.server.Close()
	}
	return code
}

// Endpoint starts the server on first use and returns its URL.
func (h *Harness) Endpoint(t testing.TB) string {
	t.Helper()
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h.server, h.err = dynalite.Start(ctx, dynalite.Options{Stderr: os.Stderr})
	})
	if h.err != nil {
		t.Fatalf("start dynalite: %v", h.err)
	}
	return h.server.Endpoint()
}

// Tables creates a fresh set of tables with a unique prefix and returns a
// client and their names.
func (h *Harness) Tables(t testing.TB, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, dynamo.TableNames) {
	t.Helper()
	db := dynalite.NewClient(h.Endpoint(t), optFns...)
	names := dynamo.NamesWithPrefix(UniquePrefix())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dynamo.CreateTables(ctx, db, names); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	return db, names
}

// UniquePrefix returns a random table-name prefix.
func UniquePrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("t%s", hex.EncodeToString(b))
}

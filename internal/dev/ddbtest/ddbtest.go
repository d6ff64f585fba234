// Package ddbtest gives each test package one local DynamoDB — dynalite,
// or moto_server as a second, independent implementation — and each test
// its own freshly created tables.
package ddbtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/moto"
	"github.com/onejob/onejob/internal/dynamo"
)

// Backend names a local DynamoDB implementation.
type Backend string

// The implementations a Harness can start.
const (
	Dynalite Backend = "dynalite" // npm; the default
	Moto     Backend = "moto"     // moto_server (Python)
)

// Harness is one local DynamoDB shared by a test binary.
type Harness struct {
	// Backend is the implementation to start; Dynalite when empty.
	Backend Backend

	once     sync.Once
	endpoint string
	close    func() error
	err      error
}

// Run starts nothing until a test asks; it stops the server after m.Run.
// Use it from TestMain: os.Exit(h.Run(m)).
func (h *Harness) Run(m *testing.M) int {
	code := m.Run()
	if h.close != nil {
		_ = h.close()
	}
	return code
}

// RunAll is Run for several harnesses of one test binary: m runs once, then
// every server that was started stops.
func RunAll(m *testing.M, hs ...*Harness) int {
	code := m.Run()
	for _, h := range hs {
		if h.close != nil {
			_ = h.close()
		}
	}
	return code
}

// Endpoint starts the server on first use and returns its URL.
func (h *Harness) Endpoint(t testing.TB) string {
	t.Helper()
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		switch h.Backend {
		case Moto:
			var s *moto.Server
			if s, h.err = moto.Start(ctx, nil); h.err == nil {
				h.endpoint, h.close = s.Endpoint(), s.Close
			}
		case Dynalite, "":
			var s *dynalite.Server
			if s, h.err = dynalite.Start(ctx, dynalite.Options{Stderr: os.Stderr}); h.err == nil {
				h.endpoint, h.close = s.Endpoint(), s.Close
			}
		default:
			h.err = fmt.Errorf("ddbtest: unknown backend %q", h.Backend)
		}
	})
	if h.err != nil {
		t.Fatalf("start %s: %v", h.backend(), h.err)
	}
	return h.endpoint
}

func (h *Harness) backend() Backend {
	if h.Backend == "" {
		return Dynalite
	}
	return h.Backend
}

// Tables creates a fresh set of tables with a unique prefix and returns a
// client and their names.
func (h *Harness) Tables(t testing.TB, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, dynamo.TableNames) {
	t.Helper()
	if h.backend() == Moto {
		// moto_server does not make a conditional write atomic against
		// concurrent requests (measured: 2 winners of 32 concurrent
		// completers); DynamoDB does, per request. Sending one request at a
		// time to these tables gives moto that atomicity and keeps every
		// interleaving of whole requests the test's goroutines produce.
		// Other tests' tables are other items, so their requests go on
		// meanwhile: one lock for the whole server made its tests wait for
		// each other's Go side (issue 30).
		// Its own transport too: http.DefaultTransport's idle connections
		// are closed by any httptest.Server.Close in the process, and a
		// request on one closed under it fails ambiguously.
		serial := new(sync.Mutex)
		own := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(own.CloseIdleConnections)
		optFns = append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: serialTransport{mu: serial, next: own}}
		}}, optFns...)
	}
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

// serialTransport sends one request at a time through next.
type serialTransport struct {
	mu   *sync.Mutex
	next http.RoundTripper
}

func (s serialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, err := s.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// The response is read while the lock is held: moto answers only after
	// its write, but the body is the rest of the request's work.
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

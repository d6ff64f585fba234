package dynamo_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/verify/storetest"
)

// newStoreOn is a dynamo.Store on fresh tables of the given local
// DynamoDB. Options apply to its client (countRequests).
func newStoreOn(t *testing.T, h *ddbtest.Harness, optFns ...func(*dynamodb.Options)) (*dynamo.Store, storetest.Store) {
	t.Helper()
	return newStoreAt(t, h, time.Now, optFns...)
}

// newStoreAt is newStoreOn reading expiry against now.
func newStoreAt(t *testing.T, h *ddbtest.Harness, now func() time.Time, optFns ...func(*dynamodb.Options)) (*dynamo.Store, storetest.Store) {
	t.Helper()
	db, names := h.Tables(t, optFns...)
	st, err := dynamo.New(dynamo.Config{Client: db, Tables: names, NowFunc: now})
	if err != nil {
		t.Fatal(err)
	}
	count := func(t *testing.T, table string) int {
		t.Helper()
		out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		return int(out.Count)
	}
	return st, storetest.Store{Interface: st, Purge: st.PurgeExpired, Count: func(t *testing.T) storetest.Counts {
		t.Helper()
		return storetest.Counts{Jobs: count(t, names.Jobs), Ledger: count(t, names.Attempts), Inbound: count(t, names.Inbound), Batches: count(t, names.Batches)}
	}}
}

// TestConformance holds the store to the port's contract, and the rules to
// their tests, on two independent DynamoDB implementations: dynalite and
// moto_server.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		h *ddbtest.Harness
		// rounds of each race: moto_server answers one request at a time,
		// so three whole races each, beside dynalite's default.
		rounds int
	}{{&harness, 0}, {&motoHarness, 3}} {
		t.Run(string(b.h.Backend)+"Backend", func(t *testing.T) {
			t.Parallel()
			storetest.Exercise(t, func(t *testing.T, now func() time.Time) storetest.Store {
				_, st := newStoreAt(t, b.h, now)
				st.Rounds = b.rounds
				return st
			})
		})
	}
}

// countRequests is SDK middleware counting every DynamoDB request sent.
func countRequests(calls *atomic.Int64) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("count",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					calls.Add(1)
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

package faultproxy_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/verify/faultproxy"
)

// never fails the test if a misbehaviour was seen at all.
func never(t *testing.T, name string, n int, detail string) {
	t.Helper()
	if n != 0 {
		t.Errorf("%s: %d occurrences: %s", name, n, detail)
	}
}

// rig is one test's tables, reached directly (clean) and through a proxy.
type rig struct {
	names  dynamo.TableNames
	clean  *dynamodb.Client
	faulty *dynamodb.Client
	proxy  *faultproxy.Proxy
	obs    *faultproxy.Observer
	// eng writes through the proxy; check reads directly; impatient goes
	// through the proxy with one SDK attempt, so its calls fail at the
	// first fault with an unknown outcome.
	eng, check, impatient *lifecycle.Engine
}

// uniqueClock never returns the same instant twice, so a job's created_at
// names the one Create call that wrote it.
func uniqueClock() func() time.Time {
	base := time.Now().UTC()
	var tick atomic.Int64
	return func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Microsecond) }
}

func newRig(t *testing.T, cfg faultproxy.Config, maxAttempts int) *rig {
	t.Helper()
	clean, names := harness.Tables(t)
	cfg.Target = harness.Endpoint(t)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := faultproxy.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = p.Close() })
	obs := &faultproxy.Observer{}
	faulty := dynalite.NewClient(p.URL(), faultproxy.ClientOptions(maxAttempts, obs))
	clock := uniqueClock()
	mk := func(db *dynamodb.Client) *lifecycle.Engine {
		st, err := dynamo.New(dynamo.Config{Client: db, Tables: names})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: clock})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}
	return &rig{names: names, clean: clean, faulty: faulty, proxy: p, obs: obs, eng: mk(faulty), check: mk(clean),
		impatient: mk(dynalite.NewClient(p.URL(), faultproxy.ClientOptions(1, obs)))}
}

// ledger reads a job's attempt ledger directly: attempt number → state.
func (r *rig) ledger(t *testing.T, id string) map[int]string {
	t.Helper()
	out := map[int]string{}
	var start map[string]types.AttributeValue
	for {
		res, err := r.clean.Query(context.Background(), &dynamodb.QueryInput{
			TableName:                 aws.String(r.names.Attempts),
			KeyConditionExpression:    aws.String("#j = :j"),
			ExpressionAttributeNames:  map[string]string{"#j": dynamo.AttrJobID},
			ExpressionAttributeValues: map[string]types.AttributeValue{":j": &types.AttributeValueMemberS{Value: id}},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range res.Items {
			n, _ := strconv.Atoi(str(item, dynamo.AttrNumberKey))
			out[n] = str(item, "state")
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out
		}
	}
}

// scan reads a whole table directly.
func (r *rig) scan(t *testing.T, table string) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		res, err := r.clean.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table),
			ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, res.Items...)
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return items
		}
	}
}

// str reads a string or number attribute.
func str(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

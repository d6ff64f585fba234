package dynalite_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// A Scan or Query that stops at its Limit must release its LevelDB
// iterator: dynalite 4.0.0 left each one open (server.cjs fixes it), and
// 3,000 limited scans of a small table on disk grew the server by some
// 60 MB, against under 15 MB with the fix. (In memory the leak is there
// too but costs too little per scan to tell apart here.)
func TestLimitedScansDoNotGrowTheServer(t *testing.T) {
	t.Parallel()
	srv, err := dynalite.Start(t.Context(), dynalite.Options{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	db := dynalite.NewClient(srv.Endpoint())
	ctx := t.Context()
	createTable(t, db, "items")
	// Enough data that an iterator reads ahead more than a page.
	blob := strings.Repeat("x", 1000)
	for i := range 200 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("items"), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: fmt.Sprint(i)}, "blob": &types.AttributeValueMemberS{Value: blob}}}); err != nil {
			t.Fatal(err)
		}
	}
	scans := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for range n / 8 {
					if _, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("items"), Limit: aws.Int32(5)}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// The first scans grow the server's heap to its working size.
	scans(3000)
	before := rss(t, srv.PID())
	scans(3000)
	after := rss(t, srv.PID())
	t.Logf("RSS %.1f MiB before, %.1f MiB after 3,000 more limited scans", float64(before)/1024, float64(after)/1024)
	if grown := after - before; grown > 30*1024 {
		t.Fatalf("3,000 limited scans grew dynalite by %.1f MiB (its iterators are not released)", float64(grown)/1024)
	}
}

func rss(t *testing.T, pid int) int64 {
	t.Helper()
	kib, err := testenv.RSSKiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	return kib
}

// The wrapper answers POST /control/gc itself (the soak drill collects
// before reading memory; on disk it compacts LevelDB first) and hands every
// other request to dynalite, in memory and on disk.
func TestCollectGarbage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		disk bool
	}{{"InMemory", false}, {"OnDisk", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts dynalite.Options
			if tt.disk {
				opts.Path = t.TempDir()
			}
			srv, err := dynalite.Start(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			db := dynalite.NewClient(srv.Endpoint())
			createTable(t, db, "items")
			item := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "a"}}
			if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String("items"), Item: item}); err != nil {
				t.Fatal(err)
			}
			mem, err := testenv.CollectGarbage(t.Context(), srv.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			if mem.HeapUsedBytes <= 0 || mem.HeapUsedBytes > mem.RSSBytes {
				t.Fatalf("memory after a collection: %+v", mem)
			}
			out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("items"), Key: item, ConsistentRead: aws.Bool(true)})
			if err != nil || out.Item == nil {
				t.Fatalf("the item after a collection: %v %v", out, err)
			}
		})
	}
}

// createTable creates a table keyed by the string "id" and waits until it
// is active.
func createTable(t *testing.T, db *dynamodb.Client, name string) {
	t.Helper()
	if _, err := db.CreateTable(t.Context(), &dynamodb.CreateTableInput{TableName: aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
	}).Wait(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// A server must serve on its own port or fail: one that lost its port to
// another server used to exit while its readiness probe reached the other
// one, and the caller then talked to a stranger's dynalite until that one
// stopped (a flaky CI run's 503s). Here the port is taken by a server that
// answers like a dynalite would not: Start must refuse it, and a Start on
// a free port must serve from its own process.
func TestStartServesOnItsOwnPort(t *testing.T) {
	t.Parallel()
	stranger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "someone else")
	}))
	t.Cleanup(stranger.Close)
	taken := stranger.Listener.Addr().(*net.TCPAddr).Port
	if srv, err := dynalite.Start(t.Context(), dynalite.Options{Port: taken}); err == nil {
		_ = srv.Close()
		t.Fatalf("Start on port %d, held by another server, succeeded", taken)
	}

	srv, err := dynalite.Start(t.Context(), dynalite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := dynalite.NewClient(srv.Endpoint())
	createTable(t, db, "mine")
	_ = srv.Kill()
	// Its tables went with its process: nothing else answers there.
	if _, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err == nil {
		t.Fatalf("%s still answers after its dynalite was killed", srv.Endpoint())
	}
}

// A client that gives up while sending a request's body (a held request
// cancelled) must not stop the server for everyone: dynalite rethrew the
// request's error and exited, and the next callers saw connections
// refused (a loaded make test lost its CLI tests' stack so). server.cjs
// keeps it up and says so on its output, which this waits for.
func TestAnAbortedRequestLeavesTheServerUp(t *testing.T) {
	t.Parallel()
	srv, err := dynalite.Start(t.Context(), dynalite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	db := dynalite.NewClient(srv.Endpoint())
	createTable(t, db, "kept")
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	// Half a body, then the connection closes.
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: dynalite\r\nContent-Type: application/x-amz-json-1.0\r\n"+
		"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 100\r\n\r\n{\"Lim"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(srv.Output(), "a request ended early"); {
		select {
		case <-srv.Exited():
			t.Fatalf("dynalite exited after an aborted request: %s\n%s", srv.ExitState(), srv.Output())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dynalite never saw the aborted request; its output:\n%s", srv.Output())
		}
	}
	out, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	if err != nil || len(out.TableNames) != 1 {
		t.Fatalf("after an aborted request: %v %v", out, err)
	}
}

package kmsseal_test

import (
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/onejob/onejob/internal/dev/ddbtest"
	"github.com/onejob/onejob/internal/kmsseal"
	"github.com/onejob/onejob/internal/verify/sealtest"
)

// motoHarness is this package's moto_server (moto's KMS checks the
// encryption context on Decrypt, as KMS does).
var motoHarness = ddbtest.Harness{Backend: ddbtest.Moto}

func TestMain(m *testing.M) { os.Exit(ddbtest.RunAll(m, &motoHarness)) }

// serial sends one request at a time: moto_server's backends are not
// safe for concurrent requests.
type serial struct {
	mu   *sync.Mutex
	next http.RoundTripper
}

func (s serial) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next.RoundTrip(r)
}

var motoMu sync.Mutex

// newKey is a new KMS key on moto and a client for it.
func newKey(t *testing.T) (*kms.Client, string) {
	t.Helper()
	client := kms.New(kms.Options{Region: "eu-west-1", BaseEndpoint: aws.String(motoHarness.Endpoint(t)),
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
		HTTPClient:  &http.Client{Transport: serial{mu: &motoMu, next: http.DefaultTransport}}})
	out, err := client.CreateKey(t.Context(), &kms.CreateKeyInput{})
	if err != nil {
		t.Fatal(err)
	}
	return client, aws.ToString(out.KeyMetadata.Arn)
}

func TestKMSConforms(t *testing.T) {
	t.Parallel()
	sealtest.Run(t, func(t *testing.T) sealtest.Pair {
		t.Helper()
		client, key := newKey(t)
		k, err := kmsseal.New(client, key)
		if err != nil {
			t.Fatal(err)
		}
		return sealtest.Pair{Sealer: k, Opener: k}
	})
}

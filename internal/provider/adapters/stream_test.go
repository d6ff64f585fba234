package adapters_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

// TestStreamSendsCallsRequest: a streamed call is the call Call makes
// (the body Prepare builds, the same headers, the credential, the
// attempt's key where Call sends one), but for the stream flags: OpenAI's
// stream and stream_options, Anthropic's stream, Bedrock's
// converse-stream path, and the Accept header.
func TestStreamSendsCallsRequest(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name, config string
		flags        []string // body members only a stream sends
		paths        [2]string
	}{
		{"openai", `{"name":"p","kind":"openai","base_url":"%s/v1","model":"gpt-x","credential_ref":"KEY"}`,
			[]string{"stream", "stream_options"}, [2]string{"/v1/chat/completions", "/v1/chat/completions"}},
		{"anthropic", `{"name":"p","kind":"anthropic","base_url":"%s","model":"claude-x","credential_ref":"KEY"}`,
			[]string{"stream"}, [2]string{"/v1/messages", "/v1/messages"}},
		{"bedrock", `{"name":"p","kind":"bedrock","base_url":"%s","model":"anthropic.claude-x","region":"eu-west-1"}`,
			nil, [2]string{"/model/anthropic.claude-x/converse", "/model/anthropic.claude-x/converse-stream"}},
		{"webhook", `{"name":"p","kind":"webhook","base_url":"%s/run","credential_ref":"KEY"}`,
			nil, [2]string{"/run", "/run"}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			type seen struct {
				path   string
				header http.Header
				body   map[string]any
			}
			var mu sync.Mutex
			var got []seen
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				raw, _ := io.ReadAll(r.Body)
				var body map[string]any
				_ = json.Unmarshal(raw, &body)
				mu.Lock()
				got = append(got, seen{r.URL.Path, r.Header.Clone(), body})
				mu.Unlock()
				// Refused, so that nothing but the request matters.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"error":{"message":"no","type":"invalid_request_error"}}`)
			}))
			t.Cleanup(srv.Close)
			cfg, err := provider.ParseConfig([]byte(`{"providers":[` + fmt.Sprintf(kind.config, srv.URL) + `]}`))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := adapters.NewRegistry(t.Context(), cfg,
				provider.EnvSecrets{Lookup: func(string) (string, bool) { return secretValue, true }},
				adapters.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", secretValue, "")})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := reg.Get("p")
			_, callErr := p.Call(t.Context(), callRequest())
			_, streamErr := p.(provider.Streamer).Stream(t.Context(), callRequest(), func(string) {})
			if provider.Classify(callErr) != provider.ClassNonRetryable || provider.Classify(streamErr) != provider.ClassNonRetryable {
				t.Fatalf("a 400: Call %v, Stream %v", callErr, streamErr)
			}
			if len(got) != 2 {
				t.Fatalf("%d requests", len(got))
			}
			call, stream := got[0], got[1]
			if call.path != kind.paths[0] || stream.path != kind.paths[1] {
				t.Errorf("paths %s, %s; want %v", call.path, stream.path, kind.paths)
			}
			want := map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}
			for _, f := range kind.flags {
				if _, ok := call.body[f]; ok {
					t.Errorf("Call sent %s", f)
				}
				if !reflect.DeepEqual(stream.body[f], want[f]) {
					t.Errorf("Stream sent %s %v, want %v", f, stream.body[f], want[f])
				}
				delete(stream.body, f)
			}
			if !reflect.DeepEqual(call.body, stream.body) {
				t.Errorf("bodies differ but for the stream flags:\n%v\n%v", call.body, stream.body)
			}
			if accept := stream.header.Get("Accept"); kind.name != "bedrock" && !strings.HasPrefix(accept, "text/event-stream") {
				t.Errorf("Stream's Accept %q", accept)
			}
			// SigV4 signs each request anew; the rest is the same.
			for _, h := range []string{"Accept", "Authorization", "X-Amz-Date", "Amz-Sdk-Invocation-Id", "Amz-Sdk-Request", "Content-Length", "X-Amz-Content-Sha256"} {
				if h != "Accept" && h != "Content-Length" && kind.name != "bedrock" {
					continue
				}
				call.header.Del(h)
				stream.header.Del(h)
			}
			call.header.Del("User-Agent")
			stream.header.Del("User-Agent")
			if !reflect.DeepEqual(call.header, stream.header) {
				t.Errorf("headers differ:\n%v\n%v", call.header, stream.header)
			}
		})
	}
}

package stack

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing"
)

// traces starts each function's tracer provider when cfg exports spans
// (Config.OTLP) or keeps them (Config.Spans): one per function, so each
// span names its function (service.name onejob-<fn>), as deployed; nil
// each when off. Kept, they are exported to a loopback receiver into
// Config.Spans, which passes each export on to Config.OTLP.
func traces(ctx context.Context, cfg Config) (map[string]*tracing.Tracing, func() error, error) {
	out := map[string]*tracing.Tracing{}
	endpoint, stopReceiver := cfg.OTLP, func() {}
	if cfg.Spans != nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		srv := &http.Server{Handler: cfg.Spans.Forwarding(cfg.OTLP, http.DefaultClient), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		endpoint, stopReceiver = "http://"+ln.Addr().String()+"/v1/traces", func() { _ = srv.Close() }
	}
	if endpoint == "" {
		return out, func() error { return nil }, nil
	}
	ratio := cfg.TraceRatio
	if ratio == 0 {
		ratio = 1
	}
	for _, f := range deploy.Functions() {
		t, err := tracing.New(ctx, tracing.Config{Endpoint: endpoint, Ratio: ratio, Service: "onejob-" + f.Name, Batch: true})
		if err != nil {
			stopReceiver()
			return nil, nil, err
		}
		out[f.Name] = t
	}
	return out, func() error {
		defer stopReceiver()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, t := range out {
			_ = t.Shutdown(sctx)
		}
		return nil
	}, nil
}

// jobTraces are the operators' reads of jobs' traces from Config.Spans
// (nil when the stack keeps none).
func jobTraces(cfg Config) apigw.Traces {
	if cfg.Spans == nil {
		return nil
	}
	return lifecycle.Traces{Reader: cfg.Spans}
}

// tracer is fn's lifecycle.Tracer (nil: tracing off); its provider calls
// are described by the stack's providers configuration.
func (fc functionClients) tracer(fn string) lifecycle.Tracer {
	return fc.traces[fn].Tracer(describe(fc.providers))
}

// describe finds a provider in c by name.
func describe(c provider.Config) tracing.Describe {
	return func(name string) (provider.ProviderConfig, bool) {
		for _, p := range c.Providers {
			if p.Name == name {
				return p, true
			}
		}
		return provider.ProviderConfig{}, false
	}
}

// flushing exports a task invocation's spans before it returns, as the
// deployed function does (tracing.Flushing).
func flushing(t *tracing.Tracing, h func() lambda.Handler) func() lambda.Handler {
	if t == nil {
		return h
	}
	return func() lambda.Handler {
		inner := h()
		return lambda.NewHandler(tracing.Flushing(t, func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
			out, err := inner.Invoke(ctx, payload)
			return json.RawMessage(out), err
		}))
	}
}

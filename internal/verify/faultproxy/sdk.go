package faultproxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Observer counts what DynamoDB clients saw: operations, the HTTP attempts
// the SDK's retryer made for them, and how attempts failed. It is safe for
// concurrent use.
type Observer struct {
	operations atomic.Int64
	attempts   atomic.Int64
	ambiguous  atomic.Int64
	throttled  atomic.Int64
}

// SDKStats is a snapshot of an Observer.
type SDKStats struct {
	Operations int64
	Attempts   int64
	// Retries is Attempts - Operations: the SDK's own retries.
	Retries int64
	// Ambiguous attempts ended in a transport error or a 5xx: the request
	// may or may not have been applied.
	Ambiguous int64
	Throttled int64
}

// Stats returns the counters so far.
func (o *Observer) Stats() SDKStats {
	s := SDKStats{Operations: o.operations.Load(), Attempts: o.attempts.Load(),
		Ambiguous: o.ambiguous.Load(), Throttled: o.throttled.Load()}
	s.Retries = s.Attempts - s.Operations
	return s
}

// ClientOptions configures a DynamoDB client for a faulty network: the
// default (standard) retryer with maxAttempts attempts, and obs (may be nil)
// plus any Trace in the operation's context told about every attempt.
func ClientOptions(maxAttempts int, obs *Observer) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		if maxAttempts > 0 {
			o.RetryMaxAttempts = maxAttempts
		}
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("faultproxy.operation",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if obs != nil {
						obs.operations.Add(1)
					}
					if tr, ok := ctx.Value(traceKey{}).(*Trace); ok {
						ctx = context.WithValue(ctx, opKey{}, tr.begin(middleware.GetOperationName(ctx), in.Parameters))
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before); err != nil {
				return err
			}
			// After the retry middleware: runs once per HTTP attempt.
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("faultproxy.attempt",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleFinalize(ctx, in)
					a := classify(err)
					if obs != nil {
						obs.attempts.Add(1)
						if a.Ambiguous() {
							obs.ambiguous.Add(1)
						}
						if a.Throttled {
							obs.throttled.Add(1)
						}
					}
					if op, ok := ctx.Value(opKey{}).(*opTrace); ok {
						op.add(a)
					}
					return out, md, err
				}), middleware.After)
		})
	}
}

// Attempt is one HTTP attempt as the client saw it.
type Attempt struct {
	Err       error
	Status    int // HTTP status; 0 when no response arrived
	Throttled bool
}

// Ambiguous reports an attempt that may have been applied although it
// failed: no response, or a 5xx.
func (a Attempt) Ambiguous() bool { return a.Err != nil && (a.Status == 0 || a.Status >= 500) }

func classify(err error) Attempt {
	if err == nil {
		return Attempt{Status: 200}
	}
	a := Attempt{Err: err}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		a.Status = re.HTTPStatusCode()
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			a.Throttled = true
		}
	}
	return a
}

// Trace records the SDK operations made with a context (see WithTrace) and
// the attempts of each: a test can tell which of its calls were retried
// after an attempt that may have been applied.
type Trace struct {
	mu  sync.Mutex
	ops []Op
}

// Op is one traced SDK operation.
type Op struct {
	Name     string // "PutItem", …
	Input    any    // the operation's input, e.g. *dynamodb.PutItemInput
	Attempts []Attempt
}

// RetriedAfterAmbiguous reports an operation that the SDK retried after an
// attempt that may have been applied.
func (o Op) RetriedAfterAmbiguous() bool {
	for i, a := range o.Attempts {
		if a.Ambiguous() && i < len(o.Attempts)-1 {
			return true
		}
	}
	return false
}

type opTrace struct {
	tr *Trace
	i  int
}

type (
	traceKey struct{}
	opKey    struct{}
)

// WithTrace makes the SDK calls made with the returned context record
// themselves in tr.
func WithTrace(ctx context.Context, tr *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, tr)
}

func (t *Trace) begin(name string, input any) *opTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ops = append(t.ops, Op{Name: name, Input: input})
	return &opTrace{tr: t, i: len(t.ops) - 1}
}

func (o *opTrace) add(a Attempt) {
	o.tr.mu.Lock()
	defer o.tr.mu.Unlock()
	o.tr.ops[o.i].Attempts = append(o.tr.ops[o.i].Attempts, a)
}

// Ops returns the traced operations in the order they began.
func (t *Trace) Ops() []Op {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Op, len(t.ops))
	for i, o := range t.ops {
		o.Attempts = append([]Attempt(nil), o.Attempts...)
		out[i] = o
	}
	return out
}

// RetriedAfterAmbiguous reports whether any traced operation named name
// (any, if empty) was retried after an attempt that may have been applied.
func (t *Trace) RetriedAfterAmbiguous(name string) bool {
	for _, o := range t.Ops() {
		if (name == "" || o.Name == name) && o.RetriedAfterAmbiguous() {
			return true
		}
	}
	return false
}

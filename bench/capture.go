package main

import (
	"context"
	"log/slog"
	"sync"
)

// lambdaTimes collects the local Lambda endpoint's per-invocation durations
// from its debug log line "lambda_invoked" (function, duration_ms), the only
// place the stack reports them.
type lambdaTimes struct {
	mu sync.Mutex
	ms map[string]float64 // function → summed billed milliseconds
	n  map[string]int
}

func newLambdaTimes() *lambdaTimes {
	return &lambdaTimes{ms: map[string]float64{}, n: map[string]int{}}
}

func (l *lambdaTimes) observe(r slog.Record) {
	if r.Message != "lambda_invoked" {
		return
	}
	var fn string
	var ms int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "function":
			fn = a.Value.String()
		case "duration_ms":
			ms = a.Value.Int64()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	// The log truncates to whole milliseconds and Lambda bills each started
	// millisecond, so the billed time is one more than the logged value.
	l.ms[fn] += float64(ms + 1)
	l.n[fn]++
}

func (l *lambdaTimes) snapshot() (map[string]float64, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := make(map[string]float64, len(l.ms))
	n := make(map[string]int, len(l.n))
	for k, v := range l.ms {
		ms[k] = v
	}
	for k, v := range l.n {
		n[k] = v
	}
	return ms, n
}

// captureHandler passes Info and above to next and shows every record,
// debug included, to observe.
type captureHandler struct {
	next    slog.Handler
	observe func(slog.Record)
}

func (h captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h captureHandler) Handle(ctx context.Context, r slog.Record) error {
	h.observe(r)
	if r.Level >= slog.LevelInfo && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return captureHandler{next: h.next.WithAttrs(attrs), observe: h.observe}
}

func (h captureHandler) WithGroup(name string) slog.Handler {
	return captureHandler{next: h.next.WithGroup(name), observe: h.observe}
}

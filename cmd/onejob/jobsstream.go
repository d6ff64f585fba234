package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// `onejob jobs watch --stream ID`: the job's answer printed as it forms,
// read from the stream_url its view names (GET /v1/jobs/{id}/stream, as
// server-sent events). The text goes to stdout as it arrives; what happens
// to the attempts (started, dropped) goes to stderr, one line each; at the
// end the job's status, attempts and result, as watch prints them. A
// dropped connection is resumed strictly after the last event received
// (Last-Event-ID), so no text is printed twice or missed.

// Bounds of what one stream connection may send: the final event carries
// a job (at most a DynamoDB item, 400 KB, as JSON a little more).
const (
	streamMaxEventBytes = 4 << 20
	streamMaxBytes      = 1 << 30
	// streamIdle: the server sends a comment every 15 s, so a connection
	// quiet for three of them is dead.
	streamIdle = 45 * time.Second
)

// watchStream follows the job's stream to its final event.
func (c *jobsCmd) watchStream(ctx context.Context, cl *apiClient, id string) error {
	resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: jobPath(id)})
	if err != nil {
		return err
	}
	var j jobView
	if err := decodeAPI(resp.body, &j); err != nil {
		return fmt.Errorf("the API answered with a body that is not a job: %w", err)
	}
	if j.StreamURL == "" {
		return fmt.Errorf("job %s has no stream_url: this deployment serves no streams (watch it without --stream)", j.ID)
	}
	p := &streamPrinter{c: c, texts: map[int]*strings.Builder{}, providers: map[int]string{}, dropped: map[int]bool{}, lineStart: true}
	after := ""
	failures, pause := 0, watchRetryPause
	for {
		final, got, err := p.connect(ctx, cl, j.StreamURL, &after)
		switch {
		case ctx.Err() != nil:
			p.endLine()
			return c.interrupted(p.last)
		case err == nil && final != nil:
			return p.finish(ctx, *final)
		case err == nil:
			// The server bounds a connection's length: go on at once.
			if got {
				failures, pause = 0, watchRetryPause
			}
			continue
		case errors.Is(err, errStreamOver):
			// The stream ended before this client saw its end.
			resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: jobPath(id)})
			if err != nil {
				return err
			}
			var j jobView
			if err := decodeAPI(resp.body, &j); err != nil {
				return err
			}
			return p.finish(ctx, j)
		case transient(err) && (got || failures < watchRetries):
			if got {
				failures, pause = 0, watchRetryPause
			}
			failures++
			// On stderr alone: the text on stdout goes on where it was.
			fmt.Fprintf(c.stderr, "%s; resuming after the last event in %s (%d/%d)\n", oneLine(err.Error()), pause, failures, watchRetries)
			if sleep(ctx, pause) != nil {
				return c.interrupted(p.last)
			}
			pause = min(2*pause, watchMaxPause)
		default:
			p.endLine()
			return err
		}
	}
}

// connect reads one connection's events, resuming after *after (which it
// moves past each event printed). It returns the final event's job when
// one came, and whether any event came; a network error, 5xx or 429 as a
// transient error.
func (p *streamPrinter) connect(ctx context.Context, cl *apiClient, url string, after *string) (*jobView, bool, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	req.Header.Set("Accept", "text/event-stream")
	if *after != "" {
		req.Header.Set("Last-Event-ID", *after)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, false, &networkError{method: http.MethodGet, url: url, err: err}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, false, errStreamOver
	case http.StatusOK:
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, false, newProblemError(resp.StatusCode, b)
	}
	// A connection quiet for streamIdle is given up and resumed.
	body := &idleReader{r: resp.Body, idle: streamIdle, cancel: func() { cancel(errStreamIdle) }}
	defer body.stop()
	events := provider.NewSSEReader(body, streamMaxBytes, streamMaxEventBytes)
	got := false
	for {
		ev, err := events.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, got, nil // the server ended it before the final event
			}
			if cause := context.Cause(ctx); errors.Is(cause, errStreamIdle) {
				err = cause
			}
			return nil, got, &networkError{method: http.MethodGet, url: url, err: err}
		}
		got = true
		final, err := p.event(ev)
		if err != nil {
			return nil, got, err
		}
		*after = ev.ID
		if final != nil {
			return final, got, nil
		}
	}
}

var (
	errStreamIdle = errors.New("no event or heartbeat for 45s")
	// errStreamOver: 204, the stream's final event was sent before.
	errStreamOver = errors.New("the stream is over")
)

// idleReader cancels its connection when no byte arrives for idle.
type idleReader struct {
	r      io.Reader
	idle   time.Duration
	cancel func()
	once   sync.Once
	t      *time.Timer
}

func (r *idleReader) Read(p []byte) (int, error) {
	r.once.Do(func() { r.t = time.AfterFunc(r.idle, r.cancel) })
	n, err := r.r.Read(p)
	r.t.Reset(r.idle)
	return n, err
}

func (r *idleReader) stop() {
	if r.t != nil {
		r.t.Stop()
	}
}

// streamPrinter prints a stream's events. One attempt's text is printed
// at a time (a terminal cannot take text back): the first that sends
// text; a hedge's other attempt's text is held until the printed one is
// dropped, and then printed after a line saying so.
type streamPrinter struct {
	c *jobsCmd
	// shown is the attempt whose text is printed (0: none yet).
	shown     int
	texts     map[int]*strings.Builder // the text held of attempts not shown
	providers map[int]string
	dropped   map[int]bool
	lineStart bool
	last      string
}

// The events' data (apigw's StreamAttemptStarted and its siblings).
type streamEventData struct {
	Attempt  int    `json:"attempt"`
	Provider string `json:"provider"`
	Hedge    bool   `json:"hedge"`
	Fallback bool   `json:"fallback"`
	Seq      int    `json:"seq"`
	Text     string `json:"text"`
	Reason   string `json:"reason"`
}

// event prints one event; the final event's job is returned.
func (p *streamPrinter) event(ev provider.SSEEvent) (*jobView, error) {
	if p.c.json {
		line, err := json.Marshal(struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}{ev.ID, ev.Type, json.RawMessage(ev.Data)})
		if err != nil {
			return nil, fmt.Errorf("the stream sent an event whose data is not JSON (%s)", oneLine(ev.Type))
		}
		fmt.Fprintln(p.c.stdout, jsonSafe(line))
	}
	switch ev.Type {
	case "job.succeeded", "job.failed", "job.cancelled":
		var j jobView
		if err := decodeAPI([]byte(ev.Data), &j); err != nil {
			return nil, fmt.Errorf("the stream's final event is not a job: %w", err)
		}
		return &j, nil
	case "attempt.started", "output.delta", "attempt.discarded":
	default:
		return nil, nil // a type this CLI does not know
	}
	var d streamEventData
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		return nil, fmt.Errorf("the stream sent a %s event that does not parse: %w", oneLine(ev.Type), err)
	}
	// The text keeps its lines (print makes it safe); the rest is one line.
	d.Provider, d.Reason = oneLine(d.Provider), oneLine(d.Reason)
	if p.c.json {
		return nil, nil
	}
	switch ev.Type {
	case "attempt.started":
		p.providers[d.Attempt] = d.Provider
		how := ""
		switch {
		case d.Hedge:
			how = " (a hedge)"
		case d.Fallback:
			how = " (a fallback)"
		}
		p.note(fmt.Sprintf("attempt %d on %s started%s", d.Attempt, d.Provider, how))
		p.last = fmt.Sprintf("attempt %d on %s", d.Attempt, d.Provider)
	case "output.delta":
		if p.shown == 0 {
			p.shown = d.Attempt
		}
		if d.Attempt != p.shown {
			p.hold(d.Attempt).WriteString(d.Text)
			return nil, nil
		}
		p.print(d.Text)
	case "attempt.discarded":
		p.dropped[d.Attempt] = true
		delete(p.texts, d.Attempt)
		if d.Attempt != p.shown {
			p.note(fmt.Sprintf("attempt %d (%s): %s; its text is dropped", d.Attempt, p.providers[d.Attempt], d.Reason))
			return nil, nil
		}
		p.note(fmt.Sprintf("attempt %d (%s): %s; the text above is dropped", d.Attempt, p.providers[d.Attempt], d.Reason))
		p.shown = 0
		// The next attempt that sent text, in order, takes its place.
		held := make([]int, 0, len(p.texts))
		for n := range p.texts {
			held = append(held, n)
		}
		sort.Ints(held)
		if len(held) > 0 {
			p.shown = held[0]
			p.note(fmt.Sprintf("attempt %d's text (%s):", p.shown, p.providers[p.shown]))
			p.print(p.texts[p.shown].String())
			delete(p.texts, p.shown)
		}
	}
	return nil, nil
}

func (p *streamPrinter) hold(n int) *strings.Builder {
	b, ok := p.texts[n]
	if !ok {
		b = &strings.Builder{}
		p.texts[n] = b
	}
	return b
}

// print writes answer text to stdout, terminal-safe (textSafe).
func (p *streamPrinter) print(text string) {
	if text == "" {
		return
	}
	fmt.Fprint(p.c.stdout, textSafe(text))
	p.lineStart = strings.HasSuffix(text, "\n")
}

// note is one line on stderr about the attempts, after the text's line.
func (p *streamPrinter) note(line string) {
	p.endLine()
	fmt.Fprintln(p.c.stderr, "["+line+"]")
}

// endLine ends the text's line on stdout, if one is open.
func (p *streamPrinter) endLine() {
	if !p.lineStart {
		fmt.Fprintln(p.c.stdout)
		p.lineStart = true
	}
}

// finish prints the job's end as watch does and returns its exit status.
func (p *streamPrinter) finish(ctx context.Context, j jobView) error {
	if !p.c.json {
		p.endLine()
		fmt.Fprintln(p.c.stdout, statusLine(j))
		p.c.watchSummary(ctx, j)
	}
	return exitCode(outcomeExit(j.Status))
}

// textSafe is an answer's text as a terminal may show it: its lines and
// tabs kept, every other unsafe rune escaped as termSafe escapes it.
func textSafe(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(s, "\n\t")
		if i < 0 {
			b.WriteString(termSafe(s))
			return b.String()
		}
		b.WriteString(termSafe(s[:i]))
		b.WriteByte(s[i])
		s = s[i+1:]
	}
}

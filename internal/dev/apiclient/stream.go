package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// StreamEvent is one event of a job's stream as this client received it.
type StreamEvent struct {
	ID   string
	Type string
	Data json.RawMessage
	// At is when its last byte arrived.
	At time.Time
}

// Final reports the event that ends a stream (its data is the job).
func (e StreamEvent) Final() bool {
	return e.Type == "job.succeeded" || e.Type == "job.failed" || e.Type == "job.cancelled"
}

// Delta is an output.delta event's data.
type Delta struct {
	Attempt int    `json:"attempt"`
	Seq     int    `json:"seq"`
	Text    string `json:"text"`
}

// StreamConn is what one connection to a job's stream did.
type StreamConn struct {
	// After is the Last-Event-ID it sent ("" from the start).
	After string
	// Status is the HTTP status; 0 when no answer came.
	Status int
	// Sent is when the request left; FirstByte when the answer's body
	// began (zero: it never did).
	Sent, FirstByte time.Time
	Events          int
	// Err is why it ended without the final event (nil: the server ended
	// it, or it answered 204).
	Err error
}

// ErrStreamFailed is a stream answer other than 200 or 204.
var ErrStreamFailed = errors.New("stream answer")

// Stream reads one connection of the stream at url (a job's stream_url),
// resuming strictly after the event id after, and hands each event to
// each as it arrives, until the final event, the stream's end, or each
// returns false.
func (c *Client) Stream(ctx context.Context, url, after string, each func(StreamEvent) bool) StreamConn {
	conn := StreamConn{After: after}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		conn.Err = err
		return conn
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	conn.Sent = time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		conn.Err = err
		return conn
	}
	defer resp.Body.Close()
	conn.Status = resp.StatusCode
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNoContent:
		return conn
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Err = fmt.Errorf("%w %d: %s", ErrStreamFailed, resp.StatusCode, b)
		return conn
	}
	events := provider.NewSSEReader(&firstByte{r: resp.Body, at: &conn.FirstByte}, 1<<30, 4<<20)
	for {
		ev, err := events.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				conn.Err = err
			}
			return conn
		}
		conn.Events++
		e := StreamEvent{ID: ev.ID, Type: ev.Type, Data: json.RawMessage(ev.Data), At: time.Now()}
		if !each(e) || e.Final() {
			return conn
		}
	}
}

// firstByte notes when its reader first gave bytes.
type firstByte struct {
	r  io.Reader
	at *time.Time
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && f.at.IsZero() {
		*f.at = time.Now()
	}
	return n, err
}

// Follow reads the stream at url to its final event, as a client that
// resumes by itself does: after a connection fails or ends, it waits
// pause and connects again after the last event received. It returns
// every event and every connection; an error only when ctx ends first.
func (c *Client) Follow(ctx context.Context, url string, pause time.Duration, each func(StreamEvent)) ([]StreamEvent, []StreamConn, error) {
	var events []StreamEvent
	var conns []StreamConn
	after := ""
	for {
		final := false
		conn := c.Stream(ctx, url, after, func(e StreamEvent) bool {
			events = append(events, e)
			after, final = e.ID, e.Final()
			if each != nil {
				each(e)
			}
			return true
		})
		conns = append(conns, conn)
		if final || (conn.Status == http.StatusNoContent && conn.Err == nil) {
			return events, conns, nil
		}
		select {
		case <-ctx.Done():
			return events, conns, fmt.Errorf("the stream did not end: %w (last connection: %v)", ctx.Err(), conn.Err)
		case <-time.After(pause):
		}
	}
}

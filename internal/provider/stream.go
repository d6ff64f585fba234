package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Streamer is implemented by adapters that can read a provider's answer as
// it forms (OpenAI and Anthropic server-sent events, Bedrock's
// ConverseStream, a webhook receiver's text/event-stream answer). Stream
// is Call, whose answer arrives in pieces: it sends the same request, with
// the same identity and rules, hands each piece of the output text to
// sink as it arrives, in order, on the calling goroutine, and returns the
// whole answer exactly as Call would (the same Response, the same
// CallError classes: a stream cut before its end is ambiguous, as any
// answer lost after sending). An answer replayed whole (a receiver's
// Idempotent-Replayed) reaches sink as one piece.
type Streamer interface {
	Stream(ctx context.Context, req Request, sink Sink) (Response, error)
}

// Sink takes the next piece of an answer's output text: the provider's
// own fragments of the JSON it is writing (a structured answer is JSON
// text), never re-cut. It must not block for long: the provider's stream
// waits on it.
type Sink func(text string)

// ErrStreamCut: a streamed answer ended before its terminal event (the
// connection dropped, an event could not be read, the stream stopped
// short of [DONE] or message_stop). The provider may have finished the
// answer nobody read: ambiguous, as any answer lost after sending. The
// CallError carries the usage the stream reported up to the cut.
var ErrStreamCut = errors.New("provider stream cut before its end")

// ErrStreamTooLarge and ErrEventTooLarge: a streamed answer, or one of
// its events, outgrew what onejob reads (JSONClient.MaxResponseBytes,
// MaxEventBytes). Refused as Call refuses an oversize body: retryable.
var (
	ErrStreamTooLarge = errors.New("streamed answer too large")
	ErrEventTooLarge  = errors.New("stream event too large")
)

// DefaultMaxEventBytes bounds one event of a streamed answer (a delta is
// a few bytes): a quarter of what is read of an answer in all
// (JSONClient.MaxResponseBytes, DefaultMaxResponseBytes).
const DefaultMaxEventBytes = DefaultMaxResponseBytes / 4

// StreamAccept is the Accept header of a streamed call to an API that
// answers server-sent events.
const StreamAccept = "text/event-stream"

// StreamResponse is a 2xx answer whose body is read as it arrives; the
// caller closes Body.
type StreamResponse struct {
	Status    int
	Header    http.Header
	RequestID string
	Body      io.ReadCloser
}

// At is where the answer came from, for the errors built on it.
func (r StreamResponse) At() HTTPResponse {
	return HTTPResponse{Status: r.Status, Header: r.Header, RequestID: r.RequestID}
}

// EventStream reports whether the answer is server-sent events (else it
// came whole, as a JSON body).
func (r StreamResponse) EventStream() bool {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// PostStream is PostJSON for a streamed answer: the same request (no
// redirect, no transport re-send, the same headers) but for accept, and
// a 2xx answer returned unread. A refusal is read, bounded, and
// classified exactly as PostJSON classifies it.
func (c *JSONClient) PostStream(ctx context.Context, url string, header http.Header, body any, accept string) (StreamResponse, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return StreamResponse{}, c.fail(ClassNonRetryable, 0, "", "encode request", fmt.Errorf("%w: %w", ErrInvalidRequest, err))
	}
	resp, requestID, err := c.open(ctx, http.MethodPost, url, header, payload, accept)
	if err != nil {
		return StreamResponse{}, err
	}
	return StreamResponse{Status: resp.StatusCode, Header: resp.Header, RequestID: requestID, Body: resp.Body}, nil
}

// ReadWhole reads a streamed call's answer that came whole (not an event
// stream), bounded as PostJSON bounds it.
func (c *JSONClient) ReadWhole(r StreamResponse) (HTTPResponse, error) {
	data, err := c.read(&http.Response{StatusCode: r.Status, Body: r.Body}, r.RequestID)
	if err != nil {
		return HTTPResponse{}, err
	}
	at := r.At()
	at.Body = data
	return at, nil
}

// Events reads r's body as server-sent events, bounded by
// MaxResponseBytes in all and MaxEventBytes an event.
func (c *JSONClient) Events(r StreamResponse) *SSEReader {
	return NewSSEReader(r.Body, c.maxResponse(), c.maxEvent())
}

func (c *JSONClient) maxEvent() int64 {
	if c.MaxEventBytes > 0 {
		return min(c.MaxEventBytes, c.maxResponse())
	}
	return c.maxResponse() / 4
}

// StreamFailure is the error for a streamed answer that could not be read
// to its end: too large (retryable, as Call's oversize body), else cut
// (ambiguous, ErrStreamCut): the connection dropped, the caller's ctx
// ended, or the stream stopped short of its terminal event (io.EOF).
func (c *JSONClient) StreamFailure(at HTTPResponse, err error) *CallError {
	switch {
	case errors.Is(err, ErrStreamTooLarge), errors.Is(err, ErrEventTooLarge):
		return c.fail(ClassRetryable, at.Status, at.RequestID, err.Error(), fmt.Errorf("%w: %w", ErrMalformedResponse, err))
	case errors.Is(err, io.EOF):
		return c.Cut(at, "the stream ended before its terminal event", nil)
	}
	return c.Cut(at, "read stream", fmt.Errorf("%w: %w", ErrTransport, err))
}

// Cut is the error for a stream that stopped before its terminal event,
// or whose event could not be read (cause): ambiguous, ErrStreamCut.
func (c *JSONClient) Cut(at HTTPResponse, msg string, cause error) *CallError {
	err := ErrStreamCut
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrStreamCut, cause)
	}
	return c.fail(ClassAmbiguous, at.Status, at.RequestID, msg, err)
}

// SSEEvent is one server-sent event: its type ("" when the event named
// none: "message"), its data lines, joined by "\n", and the stream's last
// event ID when it was dispatched (the latest id field so far, in this
// event or an earlier one: what a client resumes after).
type SSEEvent struct {
	Type string
	Data string
	ID   string
}

// SSEReader reads server-sent events as the HTML standard's event stream
// parsing says (event, data and id fields, comments and other fields
// ignored, an event dispatched by a blank line; lines end in \n or \r\n),
// refusing a stream past maxTotal bytes or an event past maxEvent.
type SSEReader struct {
	r        *bufio.Reader
	maxTotal int64
	maxEvent int64
	total    int64
	lastID   string
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader, maxTotal, maxEvent int64) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 4096), maxTotal: maxTotal, maxEvent: maxEvent}
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (an event not finished by a blank line is dropped, as the standard
// says); a stream cut mid-transfer returns the transport's error;
// ErrStreamTooLarge or ErrEventTooLarge past the bounds.
func (s *SSEReader) Next() (SSEEvent, error) {
	var ev SSEEvent
	var data bytes.Buffer
	hasData := false
	size := int64(0)
	for {
		line, err := s.line(s.maxEvent - size)
		if err != nil {
			return SSEEvent{}, err
		}
		size += int64(len(line))
		if len(line) == 0 {
			if !hasData {
				// No data: nothing to dispatch (the standard); the type
				// resets with the event.
				ev, size = SSEEvent{}, 0
				continue
			}
			ev.Data, ev.ID = data.String(), s.lastID
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.Type = string(value)
		case "id":
			// The standard ignores an id holding NULL.
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		}
	}
}

// line reads one line without its end, at most room bytes.
func (s *SSEReader) line(room int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.total += int64(len(chunk))
		if s.total > s.maxTotal {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrStreamTooLarge, s.maxTotal)
		}
		line = append(line, chunk...)
		if int64(len(line)) > room+2 {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrEventTooLarge, s.maxEvent)
		}
		switch {
		case err == nil:
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			// A line the stream never finished: the stream was cut.
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// StreamError is the error a provider sent inside a stream that had
// started (an Anthropic error event, an OpenAI chunk carrying an error):
// classified as the same error answered with status, the HTTP status the
// API documents for it (the provider's failure is retryable, a spent
// quota exhausted). It carries the stream's own status, a 2xx: the model
// ran before it failed, so the attempt is paid for (the usage the stream
// reported, else its reservation: job.SpendOf), never taken for a
// refusal that cost nothing.
func (c *JSONClient) StreamError(at HTTPResponse, status int, body []byte) *CallError {
	ce := c.fail(ClassifyStatus(status), at.Status, at.RequestID, ErrorMessage(body), ErrHTTPStatus)
	ce.Detail, _ = ParseAPIError(body)
	if ce.Class == ClassExhausted {
		ce.Exhausted()
	}
	return ce
}

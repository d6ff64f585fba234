package job

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A streamed job (Job.Stream, asked at create) records its attempts'
// output as it forms, in an ordered, durable log beside the job: chunks
// of each attempt's text, written before any reader can see them, one
// conditional write per (attempt, seq), so a writer that retries never
// duplicates or reorders text. A reader is told, in order, that an
// attempt started, its text deltas, that an attempt's text is to be
// dropped (it failed, lost a race, was cut mid-stream or its job ended
// without it), and the job's end. Deltas are provisional: the final
// event carries the job as GET /v1/jobs/{id} shows it, and its result is
// the answer.

// Stream event types: what a reader is sent (StreamEvent.Type).
const (
	EventAttemptStarted   = "attempt.started"
	EventOutputDelta      = "output.delta"
	EventAttemptDiscarded = "attempt.discarded"
	// The final event is named for the job's status: job.succeeded,
	// job.failed or job.cancelled (FinalEventType).
)

// StreamEventTypes lists every type a stream may carry, final ones
// included (openapi.yaml's StreamEvent is held to it).
func StreamEventTypes() []string {
	return []string{EventAttemptStarted, EventOutputDelta, EventAttemptDiscarded,
		FinalEventType(StatusSucceeded), FinalEventType(StatusFailed), FinalEventType(StatusCancelled)}
}

// FinalEventType is the type of the event that ends a job's stream.
func FinalEventType(s Status) string { return "job." + string(s) }

// Why an attempt's text is dropped (StreamEvent.Reason).
const (
	DiscardFailed    = "failed"    // the attempt failed: a fallback may follow
	DiscardLostRace  = "lost_race" // another attempt's answer won
	DiscardCut       = "cut"       // its stream was cut: the attempt is unknown
	DiscardCancelled = "cancelled" // its job was cancelled
	DiscardJobEnded  = "job_ended" // its job ended while it was still open
)

// StreamChunk is one durable piece of an attempt's streamed text: the
// log's unit of writing and of reading.
type StreamChunk struct {
	JobID   string
	Attempt int
	// Seq numbers an attempt's chunks 1, 2, … with no gap: a chunk is
	// written only once its predecessor is.
	Seq  int
	Text string
	// Last: the attempt's stream ended with this chunk (its answer arrived
	// whole, or its call failed); no chunk of the attempt follows.
	Last bool
	// At is when the writer wrote it.
	At time.Time
}

// Bounds of the log.
const (
	// MaxChunkBytes bounds one chunk's text: a provider's fragment (a
	// webhook receiver may replay a whole answer as one) is split so that
	// no write is large; 8 KiB is at most 9 write units.
	MaxChunkBytes = 8 << 10
	// MaxStreamAttempts bounds the attempts a cursor may name: far past any
	// job's (MaxAttempts plus the forgiven rate-limited ones).
	MaxStreamAttempts = 64
	// MaxCursorBytes bounds a cursor's text (an event's id, Last-Event-ID).
	MaxCursorBytes = 1024
)

// StreamBatching decides when a writer writes what it has gathered: the
// first text of an attempt at once (a reader sees the first words as soon
// as the provider sent them), then at most every Every, or sooner once
// FlushBytes have gathered. Each write is one chunk, so Every bounds what
// a streamed attempt costs in writes: about its duration over Every.
type StreamBatching struct {
	Every      time.Duration
	FlushBytes int
}

// DefaultStreamBatching: a chunk at most every 200 ms, or at 1 KiB (one
// write unit's worth of text).
func DefaultStreamBatching() StreamBatching {
	return StreamBatching{Every: 200 * time.Millisecond, FlushBytes: 1 << 10}
}

// Flush reports whether a writer holding pending bytes of text, written
// chunks so far, the last of them since ago, writes a chunk now.
func (b StreamBatching) Flush(pending, written int, since time.Duration) bool {
	switch {
	case pending == 0:
		return false
	case written == 0:
		return true
	case b.FlushBytes > 0 && pending >= b.FlushBytes:
		return true
	}
	return since >= b.Every
}

// SplitChunkText cuts text into pieces of at most MaxChunkBytes, never
// inside a UTF-8 sequence, in order.
func SplitChunkText(text string) []string {
	var out []string
	for len(text) > MaxChunkBytes {
		cut := MaxChunkBytes
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}

// StreamCursor is how far a reader has read a job's stream: for each
// attempt it was told of, the last chunk it was sent and whether it was
// told the attempt's text is dropped; and whether it was sent the final
// event. Its text (String) is the event's opaque id; a reader resumes
// strictly after it.
type StreamCursor struct {
	Attempts []CursorAttempt // by number, ascending
	Final    bool
}

// CursorAttempt is one attempt's place in a cursor.
type CursorAttempt struct {
	Number    int
	Seq       int // the last chunk sent; 0: none yet
	Discarded bool
}

// ErrInvalidCursor: a cursor that no event of onejob's ever carried.
var ErrInvalidCursor = errors.New("invalid stream cursor")

// String is the cursor as an event id: "1.12,2.5d" (attempt 1 through its
// chunk 12; attempt 2 through chunk 5, dropped), with ",f" once final; "0"
// before any event. Clients treat it as opaque.
func (c StreamCursor) String() string {
	var b strings.Builder
	for i, a := range c.Attempts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(a.Number))
		b.WriteByte('.')
		b.WriteString(strconv.Itoa(a.Seq))
		if a.Discarded {
			b.WriteByte('d')
		}
	}
	if c.Final {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('f')
	}
	if b.Len() == 0 {
		return "0"
	}
	return b.String()
}

// ParseStreamCursor reads an event id back; "" and "0" are the start.
func ParseStreamCursor(s string) (StreamCursor, error) {
	var c StreamCursor
	if s == "" || s == "0" {
		return c, nil
	}
	if len(s) > MaxCursorBytes {
		return c, ErrInvalidCursor
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if p == "f" {
			if i != len(parts)-1 {
				return StreamCursor{}, ErrInvalidCursor
			}
			c.Final = true
			continue
		}
		a, ok := parseCursorAttempt(p)
		if !ok || len(c.Attempts) >= MaxStreamAttempts {
			return StreamCursor{}, ErrInvalidCursor
		}
		if n := len(c.Attempts); n > 0 && c.Attempts[n-1].Number >= a.Number {
			return StreamCursor{}, ErrInvalidCursor
		}
		c.Attempts = append(c.Attempts, a)
	}
	return c, nil
}

func parseCursorAttempt(p string) (CursorAttempt, bool) {
	var a CursorAttempt
	if strings.HasSuffix(p, "d") {
		a.Discarded, p = true, strings.TrimSuffix(p, "d")
	}
	num, seq, ok := strings.Cut(p, ".")
	if !ok {
		return a, false
	}
	var err error
	if a.Number, err = strictInt(num); err != nil || a.Number < 1 || a.Number > 1<<20 {
		return a, false
	}
	if a.Seq, err = strictInt(seq); err != nil || a.Seq < 0 || a.Seq > 1<<30 {
		return a, false
	}
	return a, true
}

// strictInt is a decimal without sign, leading zero or anything else.
func strictInt(s string) (int, error) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, ErrInvalidCursor
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrInvalidCursor
		}
	}
	return strconv.Atoi(s)
}

// Attempt is the cursor's place for attempt n (found false: not told of it).
func (c StreamCursor) Attempt(n int) (CursorAttempt, bool) {
	for _, a := range c.Attempts {
		if a.Number == n {
			return a, true
		}
	}
	return CursorAttempt{Number: n}, false
}

// with is the cursor with attempt a's place set.
func (c StreamCursor) with(a CursorAttempt) StreamCursor {
	out := StreamCursor{Attempts: slices.Clone(c.Attempts), Final: c.Final}
	for i := range out.Attempts {
		if out.Attempts[i].Number == a.Number {
			out.Attempts[i] = a
			return out
		}
	}
	out.Attempts = append(out.Attempts, a)
	slices.SortFunc(out.Attempts, func(x, y CursorAttempt) int { return x.Number - y.Number })
	return out
}

// StreamEvent is one event of a job's stream.
type StreamEvent struct {
	Type string
	// ID is the cursor after this event: a reader that has it resumes
	// after this event.
	ID      string
	Attempt int // every event but the final one
	// Provider and Hedge describe a started attempt; Fallback: it follows
	// an earlier attempt that did not win.
	Provider string
	Hedge    bool
	Fallback bool
	// Seq and Text: a delta (Text is the attempt's text that follows what
	// its earlier deltas carried).
	Seq  int
	Text string
	// Reason: why a discarded attempt's text is dropped (Discard*).
	Reason string
	// Status: the final event's job status (the event's data is the job
	// as its owner reads it).
	Status Status
}

// NextStreamEvents is what a reader who has read through c is sent next,
// in order, and the cursor after them, from j (read first) and the log's
// chunks after c (read after j, each attempt's in seq order). Reading the
// job first is what makes the final event come after every delta: an
// attempt's writer writes its last chunk before the write that ends the
// attempt, so a job read as finished has all its winner's text in the
// log read after it. Chunks of an attempt j does not show yet, beyond a
// gap, or of an attempt whose text is dropped are not sent (the first two
// are read again on the next read).
func NextStreamEvents(j Job, chunks []StreamChunk, c StreamCursor) ([]StreamEvent, StreamCursor) {
	if c.Final {
		return nil, c
	}
	var out []StreamEvent
	emit := func(e StreamEvent, next StreamCursor) {
		c = next
		e.ID = c.String()
		out = append(out, e)
	}
	byAttempt := map[int][]StreamChunk{}
	for _, ch := range chunks {
		byAttempt[ch.Attempt] = append(byAttempt[ch.Attempt], ch)
	}
	for i, a := range j.Attempts {
		pos, told := c.Attempt(a.Number)
		if !told {
			emit(StreamEvent{Type: EventAttemptStarted, Attempt: a.Number, Provider: a.Provider, Hedge: a.Hedge,
				Fallback: !a.Hedge && i > 0}, c.with(pos))
		}
		if pos.Discarded {
			continue
		}
		chs := byAttempt[a.Number]
		slices.SortFunc(chs, func(x, y StreamChunk) int { return x.Seq - y.Seq })
		for _, ch := range chs {
			if ch.Seq <= pos.Seq {
				continue
			}
			if ch.Seq != pos.Seq+1 {
				break // a gap: read again
			}
			pos.Seq = ch.Seq
			emit(StreamEvent{Type: EventOutputDelta, Attempt: a.Number, Seq: ch.Seq, Text: ch.Text}, c.with(pos))
		}
		if reason := DiscardReason(j, a); reason != "" {
			pos.Discarded = true
			emit(StreamEvent{Type: EventAttemptDiscarded, Attempt: a.Number, Reason: reason}, c.with(pos))
		}
	}
	if j.Status.Terminal() {
		next := c
		next.Final = true
		emit(StreamEvent{Type: FinalEventType(j.Status), Status: j.Status}, next)
	}
	return out, c
}

// DiscardReason says why a reader drops attempt a's text, "" while its
// text may still be (part of) the answer: a failed, cancelled or losing
// attempt, one cut mid-stream (unknown: if it is settled as the winner
// later, the final event carries its answer), and, once the job ended,
// every attempt but its winner.
func DiscardReason(j Job, a Attempt) string {
	switch a.State {
	case AttemptFailed:
		return DiscardFailed
	case AttemptDiscarded:
		return DiscardLostRace
	case AttemptCancelled:
		return DiscardCancelled
	case AttemptUnknown:
		return DiscardCut
	}
	if !j.Status.Terminal() || (a.State == AttemptSucceeded && j.CompletedBy == a.Number) {
		return ""
	}
	if j.Status == StatusCancelled {
		return DiscardCancelled
	}
	return DiscardJobEnded
}

// ChunkPos is a chunk's place in its job's log as the store sorts it:
// by attempt, then seq, as text ("0003#00000012").
func ChunkPos(attempt, seq int) string { return fmt.Sprintf("%04d#%08d", attempt, seq) }

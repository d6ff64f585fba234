package apigw

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Waiting for a job without hammering, with HTTP's own tools: GET
// /v1/jobs/{id} carries a strong ETag (a hash of the representation, so it
// changes exactly when the representation does); If-None-Match answers 304
// when nothing changed; Prefer: wait=N (RFC 7240) with If-None-Match holds
// the request until the job changes or N seconds pass.
const (
	// MaxWait caps Prefer: wait. With the reads around it, a held request
	// stays well inside the API function's 25 s timeout and API Gateway's
	// 30 s integration limit. A larger N is capped, never refused.
	MaxWait = 20 * time.Second
	// DefaultWaitPoll is how often a held request re-reads the job: each
	// read is one strongly consistent GetItem (1 RRU for a job under 4 KB),
	// so a wait of N seconds costs at most 1 + 2N reads, and a change is
	// seen at most half a second (plus one read) after it was written.
	DefaultWaitPoll = 500 * time.Millisecond
	// waitMargin is left between the end of a wait and the request's
	// deadline, to answer in time.
	waitMargin = 2 * time.Second
)

// Pacer spaces the re-reads of a held request. Tests pass one that moves a
// fake clock instead of sleeping.
type Pacer interface {
	// Pause returns after d, or early with ctx's error.
	Pause(ctx context.Context, d time.Duration) error
}

// timerPacer pauses on a real timer.
type timerPacer struct{}

func (timerPacer) Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (h *Handler) getJob(ctx context.Context, r *request) (reply, error) {
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	rep, err := h.jobReply(r, j)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	inm, conditional := r.headers["if-none-match"]
	if !conditional {
		return rep, nil
	}
	wait, asked := preferredWait(r.headers["prefer"])
	applied := func(rep reply) reply {
		if asked {
			rep.headers["Preference-Applied"] = "wait=" + strconv.Itoa(int(wait/time.Second))
		}
		return rep
	}
	if noneMatch(inm, rep.headers["ETag"]) {
		return applied(rep), nil
	}
	if wait > 0 && !r.admin {
		// A held request keeps a function busy: each owner holds a
		// bounded number at once (operators are not held to it).
		counted, err := h.jobs.AcquireHold(ctx, r.owner)
		if err != nil {
			return reply{jobID: j.ID}, err
		}
		defer h.jobs.ReleaseHold(context.WithoutCancel(ctx), r.owner, counted)
	}
	// Held: re-read until the representation changes or the wait is over.
	start := h.now()
	budget := wait
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-waitMargin)
	}
	for {
		left := budget - h.now().Sub(start)
		if left <= 0 {
			break
		}
		if h.pacer.Pause(ctx, min(h.waitPoll, left)) != nil {
			break
		}
		j, err = h.ownJob(ctx, r)
		if err != nil {
			return reply{jobID: j.ID}, err
		}
		if rep, err = h.jobReply(r, j); err != nil {
			return reply{jobID: j.ID}, err
		}
		if noneMatch(inm, rep.headers["ETag"]) {
			return applied(rep), nil
		}
	}
	return applied(notModified(rep)), nil
}

// jobReply is the 200 answer for a job: the representation, its strong
// ETag and, while the job is open, a Retry-After hint for plain pollers.
func (h *Handler) jobReply(r *request, j job.Job) (reply, error) {
	b, err := marshal(r.viewer().job(j))
	if err != nil {
		return reply{}, err
	}
	rep := reply{status: http.StatusOK, body: json.RawMessage(b), jobID: j.ID, headers: map[string]string{"ETag": etagOf(b)}}
	if s, ok := waitingRetryAfter(j, h.now()); ok {
		rep.headers["Retry-After"] = strconv.Itoa(s)
	} else if !j.Status.Terminal() {
		rep.headers["Retry-After"] = strconv.Itoa(h.retryAfter(j.Type))
	}
	return rep, nil
}

// notModified turns a 200 into its 304: the same validators and hints, no
// body (RFC 9110 §15.4.5).
func notModified(rep reply) reply {
	rep.status = http.StatusNotModified
	rep.body = nil
	return rep
}

// etagOf is a strong entity tag for a representation: 120 bits of its
// SHA-256, so equal tags mean byte-identical bodies.
func etagOf(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:15]) + `"`
}

// noneMatch evaluates If-None-Match against the current tag: true when
// none of the listed tags matches (weak comparison, RFC 9110 §13.1.2),
// i.e. when the client's copy is stale and the full answer is due.
func noneMatch(header, current string) bool {
	if strings.TrimSpace(header) == "*" {
		return false // a current representation exists
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t != "" && t == current {
			return false
		}
	}
	return true
}

// preferredWait reads the wait preference of a Prefer header (RFC 7240
// §4.3: wait=delta-seconds). Only its first occurrence counts; a value
// that is not a number is ignored, one above MaxWait is capped.
func preferredWait(header string) (time.Duration, bool) {
	for _, pref := range strings.Split(header, ",") {
		pref, _, _ = strings.Cut(pref, ";") // parameters do not matter here
		name, value, _ := strings.Cut(pref, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "wait") {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"`)
		if value == "" || strings.Trim(value, "0123456789") != "" {
			return 0, false
		}
		if len(value) > 6 {
			return MaxWait, true
		}
		n, _ := strconv.Atoi(value)
		return min(time.Duration(n)*time.Second, MaxWait), true
	}
	return 0, false
}

// defaultRetryAfter is the hint for a job whose type the catalog no longer
// knows.
const defaultRetryAfter = 5

// retryAfter is how long a plain poller should wait before asking about an
// open job again, in whole seconds: the type's hedge delay when it hedges
// (something happens then), else its attempt timeout (an attempt has
// answered or timed out by then), between 1 and 60 s.
func (h *Handler) retryAfter(jobType string) int {
	jt, ok := h.catalog.Lookup(jobType)
	if !ok {
		return defaultRetryAfter
	}
	d := jt.Timeout()
	if hedge, ok := jt.HedgeAfter(); ok {
		d = hedge
	}
	return int(min(max(math.Ceil(d.Seconds()), 1), 60))
}

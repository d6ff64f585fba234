package sim

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
)

// The webhook simulator serves the generic webhook format as the webhook
// package documents it: POST with a JSON body of exactly job_id, attempt,
// idempotency_key, job_type, input and prompt, the Idempotency-Key header
// equal to idempotency_key, a bearer token when one is configured. A
// request that breaks it is answered 4xx with {"error": "..."}.

var webhookMembers = []string{"job_id", "attempt", "idempotency_key", "job_type", "input", "prompt"}

func hookError(status int, msg string) *apiError {
	return &apiError{status: status, typ: http.StatusText(status), msg: msg}
}

// webhookRequest is what a valid webhook request carries.
type webhookRequest struct {
	jobID, key, jobType, prompt string
	attempt                     int
	input                       json.RawMessage
}

func validateWebhook(r *http.Request, body []byte) (webhookRequest, *apiError) {
	var req webhookRequest
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return req, hookError(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	o, ok := parseObject(body)
	if !ok {
		return req, hookError(http.StatusBadRequest, "body is not a JSON object")
	}
	if extra := o.unknown(webhookMembers...); len(extra) > 0 {
		return req, hookError(http.StatusBadRequest, "unknown field "+strings.Join(extra, ", "))
	}
	for _, k := range webhookMembers {
		if _, ok := o[k]; !ok {
			return req, hookError(http.StatusBadRequest, k+" is required")
		}
	}
	for _, k := range []string{"job_id", "idempotency_key", "job_type"} {
		v, ok := o.str(k)
		if !ok || v == "" {
			return req, hookError(http.StatusBadRequest, k+" must be a non-empty string")
		}
	}
	req.jobID, _ = o.str("job_id")
	req.key, _ = o.str("idempotency_key")
	req.jobType, _ = o.str("job_type")
	n, ok := o.integer("attempt")
	if !ok || n < 1 {
		return req, hookError(http.StatusBadRequest, "attempt must be an integer >= 1")
	}
	req.attempt = n
	prompt, ok := o.str("prompt")
	if !ok {
		return req, hookError(http.StatusBadRequest, "prompt must be a string")
	}
	req.prompt = prompt
	req.input = o["input"]
	if h := r.Header.Get("Idempotency-Key"); h == "" {
		return req, hookError(http.StatusBadRequest, "Idempotency-Key header is required")
	} else if h != req.key {
		return req, hookError(http.StatusBadRequest, "Idempotency-Key header must equal idempotency_key")
	}
	return req, nil
}

// Webhook serves POST on any path in the generic webhook format: the answer
// is {"output": {...}, "model": "...", "usage": {...}}; prose is a
// text/plain body. It honours onejob's webhook provider contract
// (docs/webhook-provider-contract.md): a repeat of an Idempotency-Key is
// never executed again; it gets 409 while the first request runs, the first
// answer (status and body) once it ended, and 422 if its body differs.
func (s *Simulator) Webhook() http.Handler {
	f := format{
		name:            "webhook",
		requestIDHeader: "X-Request-Id",
		authorized:      bearer,
		refuse: func(w http.ResponseWriter, _ Call, e *apiError) {
			writeJSON(w, e.status, map[string]any{"error": e.msg})
		},
		fail: func(kind failKind, status int) *apiError {
			switch kind {
			case failAuth:
				return hookError(http.StatusUnauthorized, "unauthorized")
			case failQuota:
				return hookError(http.StatusPaymentRequired, "payment required")
			}
			return hookError(status, http.StatusText(status))
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return map[string]any{"output": obj, "model": model, "usage": hookUsage(c)}
		},
		prose: func(Call, string) any { return Prose },
		// The contract's answer is an "output" object: these 2xx answers
		// have none, and report what the receiver's model was billed.
		filtered: func(c Call, model string) any {
			return map[string]any{"error": "the content filter stopped the answer", "model": model, "usage": hookUsage(c)}
		},
		truncated: func(c Call, model string, obj map[string]any) any {
			return map[string]any{"output": prefix(obj), "model": model, "usage": hookUsage(c)}
		},
		refused: func(c Call, model string) any {
			return map[string]any{"error": RefusalText, "model": model, "usage": hookUsage(c)}
		},
		idempotent: true,
		stream:     webhookStream,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			f.refuse(w, Call{}, hookError(http.StatusMethodNotAllowed, "method not allowed"))
			return
		}
		body, ok := readBody(r)
		if !ok {
			return
		}
		c := Call{IdempotencyKey: r.Header.Get("Idempotency-Key"), Stream: wantsStream(r)}
		if s.admit(w, r, body, &c, f, func(opts Options) (*apiError, func(*Call)) {
			req, e := validateWebhook(r, body)
			return e, func(c *Call) {
				c.JobID, c.Attempt, c.JobType, c.Prompt, c.Input = req.jobID, req.attempt, req.jobType, req.prompt, req.input
				c.Model = opts.Model
				if c.Model == "" {
					c.Model = "webhook-sim"
				}
				c.InputTokens = Tokens(req.prompt)
			}
		}) {
			s.serve(w, r, body, &c, f)
		}
	})
}

func hookUsage(c Call) map[string]any {
	return map[string]any{"input_tokens": c.InputTokens, "output_tokens": c.OutputTokens}
}

package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// Async runs attempts on the Responses API's background mode as
// provider.Async work: Submit creates a background response carrying the
// attempt's key in its metadata, in the completion window its tier names;
// Retrieve and Cancel read and cancel it by id; Event verifies OpenAI's
// signed response.* webhooks.
type Async struct {
	*Background
	secret string
}

// NewAsync validates cfg and the webhook signing secret ("whsec_…", the
// one OpenAI shows for the endpoint onejob registered).
func NewAsync(cfg Config, webhookSecret string) (*Async, error) {
	b, err := NewBackground(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := VerifyWebhook(webhookSecret, http.Header{}, nil, time.Time{}); errors.Is(err, ErrInvalidConfig) {
		return nil, err
	}
	return &Async{Background: b, secret: webhookSecret}, nil
}

// Call refuses: an asynchronous provider's attempts are submitted (the
// lifecycle asks provider.Async first), never held open.
func (a *Async) Call(context.Context, provider.Request) (provider.Response, error) {
	return provider.Response{}, &provider.CallError{Provider: a.Name(), Class: provider.ClassNonRetryable,
		Msg: "an asynchronous provider is submitted to, never called", Err: provider.ErrInvalidRequest}
}

// windows maps a job tier to its completion window.
var windows = map[string]CompletionWindow{"now": WindowSoonest, "": WindowSoonest, "2h": Window2h, "8h": Window8h}

// Submit creates the attempt's background response.
func (a *Async) Submit(ctx context.Context, req provider.Request, tier string) (provider.Work, error) {
	w, ok := windows[tier]
	if !ok {
		return provider.Work{}, &provider.CallError{Provider: a.Name(), Class: provider.ClassNonRetryable,
			Msg: fmt.Sprintf("tier %q has no completion window", tier), Err: provider.ErrInvalidRequest}
	}
	r, err := a.Background.Submit(ctx, req, w)
	if err != nil {
		return provider.Work{}, err
	}
	return a.work(r), nil
}

// Retrieve reads the response.
func (a *Async) Retrieve(ctx context.Context, id string) (provider.Work, error) {
	r, err := a.Background.Retrieve(ctx, id)
	if err != nil {
		return provider.Work{}, err
	}
	return a.work(r), nil
}

// Cancel cancels the response (idempotent at OpenAI).
func (a *Async) Cancel(ctx context.Context, id string) (provider.Work, error) {
	r, err := a.Background.Cancel(ctx, id)
	if err != nil {
		return provider.Work{}, err
	}
	return a.work(r), nil
}

// Event verifies a webhook delivery and names the response it reports.
func (a *Async) Event(header http.Header, body []byte, now time.Time) (provider.EventDelivery, error) {
	e, err := VerifyWebhook(a.secret, header, body, now)
	var we *WebhookError
	if errors.As(err, &we) {
		return provider.EventDelivery{}, &provider.EventError{Fault: string(we.Fault), Err: err}
	}
	if err != nil {
		return provider.EventDelivery{}, err
	}
	if _, ok := e.ResponseStatus(); !ok {
		return provider.EventDelivery{}, &provider.EventError{Fault: provider.FaultIgnored, Err: fmt.Errorf("event type %q is about no response's end", e.Type)}
	}
	return provider.SignedDelivery(header, e.Data.ID), nil
}

func (a *Async) work(r BackgroundResponse) provider.Work {
	return provider.NewWork(r.ID, string(r.Status), r.AttemptKey(), r.Status.Terminal(), r.Status == StatusCancelled,
		r.TokenUsage(), func(req provider.Request) (provider.Response, error) {
			if err := r.IsAttempts(req); err != nil {
				return provider.Response{}, fmt.Errorf("%w: %w", provider.ErrForeignWork, err)
			}
			return a.Result(req, r)
		})
}

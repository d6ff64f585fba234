package apigw

import (
	"context"
	"net/http"

	"github.com/onejob/onejob/internal/job"
)

// providerEvent takes one webhook delivery from an asynchronous provider:
// the exact body bytes and headers go to the use case, which verifies the
// provider's signature before anything else. Any 2xx tells the provider
// not to send it again; a refused delivery is a problem (nothing changed).
func (h *Handler) providerEvent(ctx context.Context, r *request) (reply, error) {
	name := r.params["provider"]
	if h.providerEvents == nil || !job.ValidName(name) {
		return reply{}, fail(CodeNotFound, "no asynchronous provider of that name takes events here")
	}
	body, err := rawBody(r.ev)
	if err != nil {
		return reply{}, err
	}
	header := http.Header{}
	for k, v := range r.headers {
		header.Set(k, v)
	}
	outcome, err := h.providerEvents.ProviderEvent(ctx, name, header, body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: http.StatusOK, body: map[string]string{"outcome": string(outcome)}}, nil
}

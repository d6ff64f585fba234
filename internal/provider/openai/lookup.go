package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// Lookup is an adapter configured with lookup: every call is stored at
// OpenAI with the attempt's key in its metadata, and Settle finds it again.
// Only NewProvider builds one, so a provider without lookup never satisfies
// provider.Settler.
type Lookup struct {
	*Adapter
}

// NewProvider builds the provider a registry holds: a *Lookup when
// cfg.Lookup is set, else the plain *Adapter (which cannot settle).
func NewProvider(cfg Config) (provider.Provider, error) {
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Lookup {
		return &Lookup{Adapter: a}, nil
	}
	return a, nil
}

// Settle implements provider.Settler by listing the stored completions whose
// metadata carries the attempt's key:
//
//	GET {base}/chat/completions?metadata[onejob_attempt]=<key>&order=asc&limit=1
//
// as OpenAI's published OpenAPI describes the list (openai/openai-openapi
// openapi.yaml at commit f85dbe22: paths "/chat/completions" get,
// operationId listChatCompletions, query parameters model, metadata
// ("metadata[key1]=value1&metadata[key2]=value2"), after, limit (default 20)
// and order (asc, the default, or desc); answer
// components.schemas.ChatCompletionList: object "list", data (chat
// completion objects), first_id, last_id, has_more). Only completions
// created with store: true are listed.
//
// A completion found is the attempt's answer, read as Call reads one, its id
// as the request id: EvidenceAnswered, or EvidenceRefused with Call's error
// when Call could not have used it (a refusal, truncation, the content
// filter, content that is not an object). None found is EvidenceAbsent:
// whether that proves the call produced nothing depends on how long ago it
// was sent, which package job decides. Any failure of the list itself is an
// error: ask again later.
func (l *Lookup) Settle(ctx context.Context, req provider.Request) (s provider.Settlement, err error) {
	start := l.Clock()()
	defer func() { provider.LogSettle(ctx, l.Logger(), l.cfg.Name, req, l.Clock()().Sub(start), s, err) }()
	if err := provider.CheckRequest(l.cfg.Name, req, false); err != nil {
		return provider.Settlement{}, err
	}
	q := url.Values{}
	q.Set("metadata["+MetadataKey+"]", req.IdempotencyKey)
	q.Set("order", "asc")
	q.Set("limit", "1")
	hresp, err := l.Client().GetJSON(ctx, l.url()+"?"+q.Encode(), l.header())
	if err != nil {
		return provider.Settlement{}, err
	}
	var list struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(hresp.Body, &list); err != nil || list.Object != "list" {
		return provider.Settlement{}, l.Client().Malformed(hresp, "decode chat completion list: "+provider.Excerpt(string(hresp.Body)), err)
	}
	by := fmt.Sprintf("metadata %s=%s", MetadataKey, req.IdempotencyKey)
	if len(list.Data) == 0 {
		return provider.Settlement{Evidence: provider.EvidenceAbsent,
			Detail: provider.Excerpt("no stored completion has " + by)}, nil
	}
	var c completion
	if err := json.Unmarshal(list.Data[0], &c); err != nil {
		return provider.Settlement{}, l.Client().Malformed(hresp, "decode the listed chat completion", err)
	}
	if err := isThisAttempts(list.Data[0], req); err != nil {
		// Not provably this attempt's: settle nothing, ask again later.
		return provider.Settlement{}, fmt.Errorf("completion %s found by %s is not this attempt's: %w", c.ID, by, err)
	}
	more := ""
	if list.HasMore {
		more = " (the first of several)"
	}
	found := provider.HTTPResponse{Status: http.StatusOK, RequestID: c.ID, Body: list.Data[0]}
	resp, aerr := l.answer(found, c)
	if aerr != nil {
		return provider.Settlement{Evidence: provider.EvidenceRefused, Err: aerr,
			Detail: provider.Excerpt(fmt.Sprintf("completion %s found by %s%s, an answer onejob cannot use: %v", c.ID, by, more, aerr))}, nil
	}
	resp.Output = restore(req, resp.Output)
	return provider.Settlement{Evidence: provider.EvidenceAnswered, Response: resp,
		Detail: provider.Excerpt(fmt.Sprintf("completion %s found by %s%s", c.ID, by, more))}, nil
}

// CreatedSkew is how far OpenAI's clock may be behind onejob's when a
// found completion's creation is compared with the attempt's send.
const CreatedSkew = 5 * time.Minute

// isThisAttempts checks that a listed completion is the attempt's before
// anything is settled on it: its metadata carries the attempt's key
// exactly (the key names the deployment, job.ProviderKeyIn), and it was
// created after the attempt was sent (less CreatedSkew).
func isThisAttempts(raw json.RawMessage, req provider.Request) error {
	var c struct {
		Created  int64             `json:"created"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	if got := c.Metadata[MetadataKey]; got != req.IdempotencyKey {
		return fmt.Errorf("its metadata %s is %q, not %q", MetadataKey, got, req.IdempotencyKey)
	}
	if !req.SentAt.IsZero() && time.Unix(c.Created, 0).Before(req.SentAt.Add(-CreatedSkew)) {
		return fmt.Errorf("it was created at %s, before the attempt was sent (%s)", time.Unix(c.Created, 0).UTC().Format(time.RFC3339), req.SentAt.UTC().Format(time.RFC3339))
	}
	return nil
}

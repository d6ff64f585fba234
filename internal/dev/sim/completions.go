package sim

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Stored chat completions, as OpenAI's published OpenAPI describes them
// (openai/openai-openapi openapi.yaml at commit f85dbe22, paths
// "/chat/completions" get, operationId listChatCompletions, and
// components.schemas.ChatCompletionList): a completion created with
// store: true is listed by GET /v1/chat/completions, filtered by model and
// by metadata[key]=value, paged by after and limit (default 20), ordered
// by creation with order asc (the default) or desc; the answer is
// {"object": "list", "data", "first_id", "last_id", "has_more"}. A
// completion is listed once its call completed, whether or not the caller
// waited for it; a call that never completes is never listed.

// storedCompletion is one completion kept for the list endpoint.
type storedCompletion struct {
	id       string
	model    string
	metadata map[string]string
	body     map[string]any
}

// listDefaultLimit is the list's documented default page size.
const listDefaultLimit = 20

// storeCompletion keeps the completion a call answered (the last MaxCalls).
func (s *Simulator) storeCompletion(c Call, answer any) {
	body, ok := answer.(map[string]any)
	if !ok {
		return
	}
	body = maps.Clone(body)
	md := maps.Clone(c.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	// The list's items carry the request's metadata and request id (the
	// API reference's example).
	body["metadata"] = md
	body["request_id"] = c.RequestID
	id, _ := body["id"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored = remember(s.stored, storedCompletion{id: id, model: c.Model, metadata: md, body: body})
}

// StoredCompletions returns the ids of the completions stored so far, in
// creation order.
func (s *Simulator) StoredCompletions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, c := range latest(s.stored) {
		ids = append(ids, c.id)
	}
	return ids
}

// listCompletions serves GET /v1/chat/completions.
func (s *Simulator) listCompletions(w http.ResponseWriter, r *http.Request, f format) {
	opts := s.options()
	if opts.APIKey != "" && !f.authorized(r, nil, opts.APIKey) {
		f.refuse(w, Call{}, f.fail(failAuth, http.StatusUnauthorized))
		return
	}
	q := r.URL.Query()
	limit := listDefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			f.refuse(w, Call{}, oaiInvalid("limit", "invalid_value",
				"Invalid 'limit': expected a positive integer, but got '"+v+"' instead."))
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "asc"
	}
	if order != "asc" && order != "desc" {
		f.refuse(w, Call{}, oaiEnum("order", order, []string{"asc", "desc"}))
		return
	}
	want := map[string]string{}
	for k, vs := range q {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") && len(vs) > 0 {
			want[strings.TrimSuffix(name, "]")] = vs[0]
		}
	}
	model := q.Get("model")

	s.mu.Lock()
	all := slices.Clone(latest(s.stored))
	s.mu.Unlock()
	if order == "desc" {
		slices.Reverse(all)
	}
	var matched []storedCompletion
	for _, c := range all {
		if model != "" && c.model != model {
			continue
		}
		if !hasMetadata(c.metadata, want) {
			continue
		}
		matched = append(matched, c)
	}
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(matched, func(c storedCompletion) bool { return c.id == after })
		matched = matched[i+1:] // an unknown cursor (i = -1) lists from the start
	}
	hasMore := len(matched) > limit
	matched = matched[:min(limit, len(matched))]
	data := make([]any, 0, len(matched))
	for _, c := range matched {
		data = append(data, c.body)
	}
	first, last := "", ""
	if len(matched) > 0 {
		first, last = matched[0].id, matched[len(matched)-1].id
	}
	w.Header().Set(f.requestIDHeader, "sim-list-"+strconv.Itoa(len(all)))
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": hasMore,
	})
}

func hasMetadata(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

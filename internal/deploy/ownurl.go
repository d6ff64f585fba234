package deploy

import (
	"net/http"
	"sync"
)

// OwnURL serves each request with the handler build makes for the
// function URL the request came to: "https://" and the request's host,
// which lambdaurl takes from Lambda's event (requestContext.domainName,
// the function URL's domain), not from the client's Host header. A
// function cannot be given its own URL in its environment (the URL
// refers to the function: a CloudFormation cycle), and a handler that
// names its own address needs it: the stream function's final event
// carries the job as GET /v1/jobs/{id} shows it, stream_url included. A
// function URL has one domain, so build runs once per sandbox; the
// composition root calls build once at init too, so a bad configuration
// fails the init, not a request.
func OwnURL(build func(base string) (http.Handler, error)) http.Handler {
	o := &ownURL{build: build, byHost: map[string]http.Handler{}}
	return http.HandlerFunc(o.serve)
}

// maxHosts bounds the handlers kept; a function URL has one domain.
const maxHosts = 4

type ownURL struct {
	build  func(base string) (http.Handler, error)
	mu     sync.Mutex
	byHost map[string]http.Handler
}

func (o *ownURL) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	h, ok := o.byHost[r.Host]
	o.mu.Unlock()
	if !ok {
		var err error
		if h, err = o.build("https://" + r.Host); err != nil {
			http.Error(w, "the function cannot serve this address", http.StatusInternalServerError)
			return
		}
		o.mu.Lock()
		if len(o.byHost) < maxHosts {
			o.byHost[r.Host] = h
		}
		o.mu.Unlock()
	}
	h.ServeHTTP(w, r)
}

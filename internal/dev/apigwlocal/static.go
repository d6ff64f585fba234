package apigwlocal

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/onejob/onejob/internal/apigw"
)

// Mount serves the files of a folder under a path prefix: the local pages
// (clients/web/<page>) and the client library they load. API Gateway serves
// no files; these exist only on this machine, for people and browser tests.
type Mount struct {
	// Prefix starts and ends with "/", e.g. "/demo/".
	Prefix string
	Dir    string
}

// validMount keeps mounts off the API's own paths.
func validMount(m Mount) error {
	switch {
	case !strings.HasPrefix(m.Prefix, "/") || !strings.HasSuffix(m.Prefix, "/") || len(m.Prefix) < 3:
		return errors.New("apigwlocal: a mount prefix looks like /name/")
	case strings.HasPrefix(m.Prefix, "/v1/") || hidesRoute(m.Prefix) || m.Prefix == "/openapi.yaml/":
		return errors.New("apigwlocal: mount " + m.Prefix + " would hide API paths")
	case m.Dir == "":
		return errors.New("apigwlocal: mount " + m.Prefix + " has no folder")
	}
	return nil
}

// hidesRoute reports whether a mount at prefix would answer paths of one
// of the API's routes (its own path, or paths below it).
func hidesRoute(prefix string) bool {
	for _, rt := range apigw.Routes() {
		if strings.HasPrefix(rt.Path+"/", prefix) {
			return true
		}
	}
	return false
}

// files serves GET and HEAD under the mounts, without directory listings
// and uncached (edits show on reload). It reports whether it answered.
type files struct {
	mounts  []Mount
	servers []http.Handler
}

func newFiles(mounts []Mount) (*files, error) {
	f := &files{}
	for _, m := range mounts {
		if err := validMount(m); err != nil {
			return nil, err
		}
		f.mounts = append(f.mounts, m)
		f.servers = append(f.servers, http.StripPrefix(strings.TrimSuffix(m.Prefix, "/"),
			http.FileServer(noListing{http.Dir(m.Dir)})))
	}
	return f, nil
}

func (f *files) serve(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	for i, m := range f.mounts {
		if r.URL.Path == strings.TrimSuffix(m.Prefix, "/") {
			http.Redirect(w, r, m.Prefix, http.StatusMovedPermanently)
			return true
		}
		if strings.HasPrefix(r.URL.Path, m.Prefix) {
			w.Header().Set("Cache-Control", "no-store")
			f.servers[i].ServeHTTP(w, r)
			return true
		}
	}
	return false
}

// noListing serves a folder only through its index.html.
type noListing struct{ fs http.FileSystem }

func (n noListing) Open(name string) (http.File, error) {
	f, err := n.fs.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if st.IsDir() {
		idx, err := n.fs.Open(strings.TrimSuffix(name, "/") + "/index.html")
		if err != nil {
			_ = f.Close()
			return nil, fs.ErrNotExist
		}
		_ = idx.Close()
	}
	return f, nil
}

// Pages lists the folders under dir that hold an index.html, each a page
// to mount at /<name>/.
func Pages(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "index.html")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

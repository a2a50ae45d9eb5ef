package server

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

// MinTokenLength is the shortest token a TCP admin listener accepts: the
// token is all that stands between the network and the load balancer's
// configuration.
const MinTokenLength = 16

// MaxTokenFile is the largest token file ReadToken reads.
const MaxTokenFile = 4095

// ReadToken reads the token of a TCP admin listener from path: its
// content, surrounding white space left out. The file must be readable by
// its owner only and hold at least MinTokenLength characters.
func ReadToken(path string) (string, error) {
	// Not os.ReadFile: opening a named pipe would wait for a writer.
	b, err := smallfile.ReadPrivate(path, MaxTokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case len(token) < MinTokenLength:
		return "", fmt.Errorf("reading the token: %s holds %d characters, fewer than %d (e.g. head -c 32 /dev/urandom | base64 > %s)", path, len(token), MinTokenLength, path)
	case strings.ContainsAny(token, " \t\r\n"):
		return "", fmt.Errorf("reading the token: %s holds white space inside the token", path)
	}
	return token, nil
}

// RequireToken returns h behind a bearer token: a request without
// "Authorization: Bearer TOKEN" is refused (401) before h sees it.
func RequireToken(h http.Handler, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dlbd"`)
			msg := "this admin API needs dlbd's token (Authorization: Bearer TOKEN; dlbctl --token-file)"
			if len(got) > 0 {
				msg = "the token is not dlbd's (dlbd --api-token-file)"
			}
			writeError(w, http.StatusUnauthorized, api.Error{Message: msg, Op: -1})
			return
		}
		h.ServeHTTP(w, r)
	})
}

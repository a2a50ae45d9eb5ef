package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
)

// TestRequireToken: only a request carrying exactly "Bearer TOKEN" reaches
// the API; the others get 401 with a message saying what is missing, and
// the API never sees them.
func TestRequireToken(t *testing.T) {
	const token = "0123456789abcdef-secret"
	tests := []struct {
		name   string
		header string
		want   int
		msg    string
	}{
		{"the token", "Bearer " + token, 200, ""},
		{"no header", "", 401, "needs dlbd's token"},
		{"another token", "Bearer 0123456789abcdef-secreT", 401, "not dlbd's"},
		{"a prefix of the token", "Bearer " + token[:10], 401, "not dlbd's"},
		{"the token and more", "Bearer " + token + "x", 401, "not dlbd's"},
		{"another scheme", "Basic " + token, 401, "not dlbd's"},
		{"the token alone", token, 401, "not dlbd's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reached := false
			h := RequireToken(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached = true }), token)
			req := httptest.NewRequest(http.MethodPost, api.PathOps, strings.NewReader("{}"))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want || reached != (tt.want == 200) {
				t.Fatalf("status %d, reached %v; want %d", rec.Code, reached, tt.want)
			}
			if tt.want == 200 {
				return
			}
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("body %q (%v), want a message with %q", rec.Body, err, tt.msg)
			}
			if rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("no WWW-Authenticate header")
			}
		})
	}
}

// TestReadToken: a token file must be the owner's alone and hold one
// token of at least MinTokenLength characters.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
		err     string
	}{
		{"a token and a newline", "0123456789abcdef\n", 0o600, "0123456789abcdef", ""},
		{"read-only", "  0123456789abcdefgh  ", 0o400, "0123456789abcdefgh", ""},
		{"readable by the group", "0123456789abcdef\n", 0o640, "", "chmod 600"},
		{"readable by others", "0123456789abcdef\n", 0o604, "", "group or others"},
		{"too short", "short\n", 0o600, "", "fewer than 16"},
		{"empty", "", 0o600, "", "fewer than 16"},
		{"two words", "0123456789 abcdef\n", 0o600, "", "white space"},
		{"too large", strings.Repeat("x", 5000), 0o600, "", "larger than"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, string(rune('a'+i)))
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			got, err := ReadToken(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := ReadToken(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := ReadToken(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

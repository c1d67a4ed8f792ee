package tlsconf_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/tlsconf"
)

func TestRedirectHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		port         int
		method, host string
		target, want string
	}{
		{443, "GET", "shop.example", "/a/b?c=d%20e", "https://shop.example/a/b?c=d%20e"},
		{443, "GET", "shop.example:80", "/", "https://shop.example/"},
		{8443, "POST", "shop.example:8080", "/pay", "https://shop.example:8443/pay"},
		{443, "GET", "[2001:db8::1]:80", "/x", "https://[2001:db8::1]/x"},
		{8443, "GET", "[2001:db8::1]", "/x", "https://[2001:db8::1]:8443/x"},
		{443, "GET", "shop.example", "/%2Fencoded", "https://shop.example/%2Fencoded"},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.target, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tt.method, "http://"+tt.host+tt.target, nil)
			r.Host = tt.host
			w := httptest.NewRecorder()
			tlsconf.RedirectHandler(tt.port).ServeHTTP(w, r)
			if w.Code != http.StatusPermanentRedirect {
				t.Errorf("status = %d; want 308", w.Code)
			}
			if got := w.Header().Get("Location"); got != tt.want {
				t.Errorf("Location = %q; want %q", got, tt.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = ""
	w := httptest.NewRecorder()
	tlsconf.RedirectHandler(443).ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Errorf("no Host: status = %d; want 400", w.Code)
	}
}

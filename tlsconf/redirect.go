package tlsconf

import (
	"net"
	"net/http"
	"strconv"
	"strings"
)

// RedirectHandler answers every request with 308 Permanent Redirect to the
// same host, path and query on https, at httpsPort (left out when 443).
// 308 keeps the method and body, so a POST sent to http by mistake is
// repeated on https rather than turned into a GET. A request without a
// Host gets 400.
func RedirectHandler(httpsPort int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		} else {
			host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		}
		if host == "" {
			http.Error(w, "Bad Request: missing Host", http.StatusBadRequest)
			return
		}
		if httpsPort != 443 && httpsPort != 0 {
			host = net.JoinHostPort(host, strconv.Itoa(httpsPort))
		} else if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
			host = "[" + host + "]" // an IPv6 literal
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

package webview

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

// TokenParam is the query parameter of a view's URL that carries its
// token on the first visit.
const TokenParam = "token"

// NewToken is a token for TokenGate: 32 random bytes, in hex.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// cookieName is the token's cookie for the view at host: one per port,
// since a browser sends a host's cookies to each of its ports and two
// views of one machine must not replace each other's.
func cookieName(host string) string {
	_, port, err := net.SplitHostPort(host)
	if err != nil {
		port = "80"
	}
	return "lardon3d-view-" + port
}

// TokenGate serves h to the requests that carry token, and 403 to the
// others: a loopback port cannot tell which user connects, the token
// can. The first visit brings it in the URL (?token=): the answer sets a
// cookie (HttpOnly, SameSite=Strict) and sends the browser to the same
// URL without it; then every request needs the cookie, or the token as
// "Authorization: Bearer" (scripts). The Host is checked first
// (CheckHost), so that a rebound name never reaches the token's check.
func TokenGate(token string, h http.Handler) http.Handler {
	want := []byte(token)
	ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !CheckHost(w, r) {
			return
		}
		q := r.URL.Query()
		if t := q.Get(TokenParam); t != "" {
			if !ok(t) {
				http.Error(w, "wrong token: open the URL `lardon3d-controller view` printed", http.StatusForbidden)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName(r.Host), Value: token, Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q.Del(TokenParam)
			u := *r.URL
			u.RawQuery = q.Encode()
			u.Scheme, u.Host = "", ""
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(cookieName(r.Host)); err == nil && ok(c.Value) {
			h.ServeHTTP(w, r)
			return
		}
		if a, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(a) {
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, "this view needs its token: open the URL `lardon3d-controller view` printed", http.StatusForbidden)
	})
}

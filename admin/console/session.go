package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// cookieName is the session cookie's name (Path=/ui/).
const cookieName = "idemgate_console"

// session is one operator's login.
type session struct {
	id, csrf        string
	created, used   time.Time
	flash, flashErr string // shown once by the next page
}

// sessions holds the server-side sessions, bounded and expiring.
type sessions struct {
	now          func() time.Time
	idle, maxAge time.Duration
	max          int
	mu           sync.Mutex // protects m
	m            map[string]*session
}

func newSessions(now func() time.Time, idle, maxAge time.Duration, max int) *sessions {
	return &sessions{now: now, idle: idle, maxAge: maxAge, max: max, m: map[string]*session{}}
}

// randomID returns 32 random bytes, base64url.
func randomID() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session, ending the least recently used one when full.
func (s *sessions) create() *session {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if len(s.m) >= s.max {
		var oldest *session
		for _, x := range s.m {
			if oldest == nil || x.used.Before(oldest.used) {
				oldest = x
			}
		}
		delete(s.m, oldest.id)
	}
	x := &session{id: randomID(), csrf: randomID(), created: now, used: now}
	s.m[x.id] = x
	return x
}

// get returns a copy of the live session of id and marks it used, or false.
func (s *sessions) get(id string) (session, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	x, ok := s.m[id]
	if !ok {
		return session{}, false
	}
	x.used = now
	return *x, true
}

// takeFlash returns and clears the session's one-time messages.
func (s *sessions) takeFlash(id string) (msg, errMsg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.m[id]; ok {
		msg, errMsg, x.flash, x.flashErr = x.flash, x.flashErr, "", ""
	}
	return msg, errMsg
}

func (s *sessions) setFlash(id, msg, errMsg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.m[id]; ok {
		x.flash, x.flashErr = msg, errMsg
	}
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func (s *sessions) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.m)
}

func (s *sessions) expireLocked(now time.Time) {
	for id, x := range s.m {
		if now.Sub(x.used) >= s.idle || now.Sub(x.created) >= s.maxAge {
			delete(s.m, id)
		}
	}
}

// csrfOK compares a form's CSRF token with the session's in constant time.
func csrfOK(x session, got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(x.csrf)) == 1
}

func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     "/ui/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

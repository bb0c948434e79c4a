package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// Content security policies: pages load nothing from elsewhere, run no
// script but the gateway's own files (no inline script), submit forms only
// here, and are never framed.
const (
	cspPage = "default-src 'none'; script-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; " +
		"base-uri 'none'"
	cspInbox = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

// guard puts the security headers on every response and refuses
// cross-origin requests that change state (CSRF), login included.
func (g *Gateway) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.refused(r, subjects.CodeCrossOrigin, "", "")
		writeError(w, http.StatusForbidden, subjects.CodeCrossOrigin,
			"cross-origin requests that change state are refused; use the gateway's own pages or an API token")
	}))
	protected := cop.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", cspPage)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		// The server's read deadline bounds the request body; once the body
		// is read (or there is none), it is lifted so streams can last.
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &liftDeadline{ReadCloser: r.Body, rc: rc}
		}
		protected.ServeHTTP(w, r)
	})
}

// liftDeadline lifts the connection's read deadline once the body is read.
type liftDeadline struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *liftDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Server returns an HTTP server for the gateway with its timeouts: headers
// and body must arrive within Config.ReadTimeout, and an idle connection is
// closed after Config.IdleTimeout.
func (g *Gateway) Server() *http.Server {
	return &http.Server{Handler: g, ReadHeaderTimeout: min(5*time.Second, g.cfg.ReadTimeout),
		ReadTimeout: g.cfg.ReadTimeout, IdleTimeout: g.cfg.IdleTimeout}
}

// Limit is a budget of failures: Burst at once, then one more every Every.
type Limit struct {
	Burst int
	Every time.Duration
}

// limiter counts failures by key (an identity or a network address) in
// token buckets: each failure takes a token, and a key with none left is
// refused until one grows back.
type limiter struct {
	mu    sync.Mutex
	limit Limit
	keys  map[string]*bucket
}

type bucket struct {
	*rate.Limiter
	// reported: this blocking episode is already in the audit trail.
	reported bool
}

const maxLimiterKeys = 100_000

func newLimiter(l Limit) *limiter { return &limiter{limit: l, keys: map[string]*bucket{}} }

func (l *limiter) bucket(key string) *bucket {
	b, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= maxLimiterKeys {
			for k, old := range l.keys {
				if old.Tokens() >= float64(l.limit.Burst) {
					delete(l.keys, k)
				}
			}
		}
		b = &bucket{Limiter: rate.NewLimiter(rate.Every(l.limit.Every), l.limit.Burst)}
		l.keys[key] = b
	}
	return b
}

// blocked reports whether any of keys has no failure left, and whether
// this is the first refusal of its blocking episode (to be audited).
func (l *limiter) blocked(keys ...string) (blocked, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		b := l.bucket(k)
		if b.Tokens() >= 1 {
			b.reported = false
			continue
		}
		blocked = true
		first = first || !b.reported
		b.reported = true
	}
	return blocked, first
}

// fail takes a failure from each of keys.
func (l *limiter) fail(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if k != "" {
			l.bucket(k).Allow()
		}
	}
}

// addressOf is the caller's network address, without the port. Behind a
// proxy it is the proxy's: the gateway trusts no forwarding header.
func addressOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// requestOf names a request for the audit trail; a link's token, a bearer
// credential, is replaced by its id.
func requestOf(r *http.Request) string {
	path := r.URL.Path
	if token, ok := strings.CutPrefix(path, "/l/"); ok {
		path = "/l/" + links.ID(token)
	}
	return r.Method + " " + path
}

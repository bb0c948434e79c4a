// Package mcphttp is what stands in front of Interlock's MCP servers over
// streamable HTTP: where they may listen, which browser origins may call
// them, and the bearer token they require.
//
// The rules: a server listens on a loopback address unless the operator
// names another, and then only with a bearer token (CheckListen). A request
// carrying an Origin header (a browser page) is refused unless that origin
// is allowed by name: a web page must not drive a local server (DNS
// rebinding, cross-site requests). With a token set, every request must
// carry it (Authorization: Bearer TOKEN), compared in constant time.
package mcphttp

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Errors, each matchable with errors.Is.
var (
	// ErrExposedWithoutToken: an address other than loopback was named
	// without a bearer token.
	ErrExposedWithoutToken = errors.New("an MCP server listening beyond loopback needs a bearer token")
	// ErrBadAddress: the listen address is not host:port.
	ErrBadAddress = errors.New("bad listen address")
	// ErrBadOrigin: an allowed origin is not scheme://host[:port].
	ErrBadOrigin = errors.New("bad allowed origin")
)

// The refusal codes a Guard answers with (in the body, and logged).
const (
	CodeOriginRefused = "origin_refused"
	CodeUnauthorized  = "unauthorized"
)

// Loopback reports whether host (a name or an address) is a loopback one.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// CheckListen checks that addr (host:port) is loopback, or that a token is
// set.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrBadAddress, addr, err)
	}
	if !Loopback(host) && token == "" {
		where := host
		if where == "" {
			where = "every interface"
		}
		return fmt.Errorf("%w: %s is not loopback (set a token, or listen on 127.0.0.1)", ErrExposedWithoutToken, where)
	}
	return nil
}

// Config is what a Guard allows.
type Config struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// Origins are the browser origins (scheme://host[:port]) allowed to
	// call; a request with any other Origin header is refused.
	Origins []string
	Logger  *slog.Logger
}

// CheckOrigins checks that every allowed origin is scheme://host[:port].
func CheckOrigins(origins []string) error {
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("%w %q: write scheme://host[:port]", ErrBadOrigin, o)
		}
	}
	return nil
}

// Guard wraps next with the origin and token checks.
func Guard(next http.Handler, cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !slices.Contains(cfg.Origins, o) {
			log.Warn("MCP request refused", "code", CodeOriginRefused, "origin", o, "remote", r.RemoteAddr)
			http.Error(w, CodeOriginRefused+": origin "+o+" may not call this server", http.StatusForbidden)
			return
		}
		if cfg.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
				log.Warn("MCP request refused", "code", CodeUnauthorized, "remote", r.RemoteAddr)
				w.Header().Set("WWW-Authenticate", `Bearer realm="interlock-mcp"`)
				http.Error(w, CodeUnauthorized+": a bearer token is required", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/subjects"
)

// sessionCookie holds the id of an inbox session: random, and kept by the
// gateways (in the sessions bucket, under its digest) with the identity and
// the digest of the token it was opened with. The token itself never leaves
// the login request. The cookie is Secure, HttpOnly and SameSite=Strict,
// and a __Host- cookie (no Domain, Path /), so that no sibling subdomain
// can set one the browser would send instead;
// requests it authenticates that are not GET must also carry
// X-Interlock-Request, which no cross-site form can send.
const sessionCookie = "__Host-interlock_session"

// requestHeader is the header the inbox's own requests carry.
const requestHeader = "X-Interlock-Request"

// ErrUnauthenticated is matched by Authenticate's refusals: no credentials,
// or ones that are not valid.
var ErrUnauthenticated = errors.New("unauthenticated")

// errNoCredentials: the request carries none (not a failed login).
var errNoCredentials = fmt.Errorf("%w: send an API token: Authorization: Bearer <token>", ErrUnauthenticated)

// session is what the sessions bucket keeps under a session's digest.
type session struct {
	Identity string `json:"identity"`
	Token    string `json:"token"` // hex SHA-256 of the API token
}

// Authenticate returns the identity a request carries: an API token
// (Authorization: Bearer) or an inbox session (its cookie). Errors match
// ErrUnauthenticated when the credentials are missing or not valid; others
// mean the session store could not be read. The AG-UI bridge and any other
// endpoint of the gateway identify callers with it.
func (g *Gateway) Authenticate(r *http.Request) (approvers.Identity, error) {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		id, known := g.cfg.Directory.Authenticate(strings.TrimSpace(token))
		if !known {
			return id, fmt.Errorf("%w: that API token is not valid", ErrUnauthenticated)
		}
		return id, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return approvers.Identity{}, errNoCredentials
	}
	if r.Method != http.MethodGet && r.Header.Get(requestHeader) == "" {
		return approvers.Identity{}, fmt.Errorf("%w: a session request that changes state needs the %s header",
			ErrUnauthenticated, requestHeader)
	}
	e, err := g.sessions.Last(r.Context(), sessionKey(c.Value))
	if err == nil && jetstream.CheckPublished(e.Header) != nil {
		// Not the session a gateway wrote (every one carries a message id)
		// but an answer the server stored under its key for another user,
		// with a body of that user's choosing.
		err = fmt.Errorf("%w: %w", jetstream.ErrNotFound, jetstream.CheckPublished(e.Header))
	}
	if errors.Is(err, jetstream.ErrNotFound) {
		return approvers.Identity{}, fmt.Errorf("%w: the session has ended; log in again", ErrUnauthenticated)
	}
	if err != nil {
		return approvers.Identity{}, err
	}
	var s session
	var sum [32]byte
	_ = json.Unmarshal(e.Value, &s)
	digest, _ := hex.DecodeString(s.Token)
	copy(sum[:], digest)
	id, ok := g.cfg.Directory.AuthenticateDigest(sum)
	if !ok || len(digest) != len(sum) || id.Name != s.Identity {
		return approvers.Identity{}, fmt.Errorf("%w: the session's token is no longer valid; log in again", ErrUnauthenticated)
	}
	return id, nil
}

// sessionKey is the bucket key of a session id: its digest, so the store
// holds nothing a cookie could be made from.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

type identityKey struct{}

func identityOf(r *http.Request) approvers.Identity {
	id, _ := r.Context().Value(identityKey{}).(approvers.Identity)
	return id
}

// auth admits authenticated requests. Failed logins count against the
// caller's address; an address out of failures is refused for a while.
func (g *Gateway) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.limited(w, r, g.logins, "", addressOf(r)) {
			return
		}
		id, err := g.Authenticate(r)
		switch {
		case errors.Is(err, errNoCredentials):
			w.Header().Set("WWW-Authenticate", `Bearer realm="interlock"`)
			writeError(w, http.StatusUnauthorized, subjects.CodeUnauthenticated, "%v", err)
			return
		case errors.Is(err, ErrUnauthenticated):
			g.logins.fail(addressOf(r))
			g.refused(r, subjects.CodeUnauthenticated, "", err.Error())
			w.Header().Set("WWW-Authenticate", `Bearer realm="interlock"`)
			writeError(w, http.StatusUnauthorized, subjects.CodeUnauthenticated, "%v", err)
			return
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

// limited refuses (429, audited once per episode) a request whose identity
// or address has no failures left in l.
func (g *Gateway) limited(w http.ResponseWriter, r *http.Request, l *limiter, identity, addr string) bool {
	blocked, first := l.blocked(limitKey(identity), addr)
	if !blocked {
		return false
	}
	if first {
		g.refused(r, subjects.CodeRateLimited, identity, "too many failures; refused for a while")
	}
	w.Header().Set("Retry-After", fmt.Sprint(int(l.limit.Every.Seconds())+1))
	writeError(w, http.StatusTooManyRequests, subjects.CodeRateLimited,
		"too many failed attempts from this identity or address; try again later")
	return true
}

// limitKey keeps identities and addresses apart in one limiter.
func limitKey(name string) string {
	if name == "" {
		return ""
	}
	return "id:" + name
}

// login opens an inbox session for an API token.
func (g *Gateway) login(w http.ResponseWriter, r *http.Request) {
	addr := addressOf(r)
	if r.Header.Get(requestHeader) == "" {
		g.refused(r, subjects.CodeCrossOrigin, "", "login without the "+requestHeader+" header")
		writeError(w, http.StatusForbidden, subjects.CodeCrossOrigin, "log in from the inbox page")
		return
	}
	if g.limited(w, r, g.logins, "", addr) {
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, subjects.CodeInvalidJSON, "send {\"token\": \"...\"}")
		return
	}
	id, ok := g.cfg.Directory.Authenticate(body.Token)
	if !ok {
		g.logins.fail(addr)
		g.refused(r, subjects.CodeUnauthenticated, "", "login with a token that is not valid")
		writeError(w, http.StatusUnauthorized, subjects.CodeUnauthenticated, "that token is not valid")
		return
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	sid := base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(body.Token))
	value, _ := json.Marshal(session{Identity: id.Name, Token: hex.EncodeToString(sum[:])})
	if _, err := g.sessions.Mark(r.Context(), sessionKey(sid), value); err != nil {
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "the session could not be stored: %v", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(g.cfg.SessionTTL.Seconds())})
	whoAmI(w, id)
}

// whoAmI answers with who id is: the login's answer and GET /v1/me.
func whoAmI(w http.ResponseWriter, id approvers.Identity) {
	writeJSON(w, http.StatusOK, map[string]any{"identity": id.Name, "groups": id.Groups, "auditor": id.Auditor})
}

// logout ends the caller's inbox session: it is removed from the sessions
// bucket, so the cookie is worth nothing even if it was copied.
func (g *Gateway) logout(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(requestHeader) == "" {
		writeError(w, http.StatusForbidden, subjects.CodeCrossOrigin, "log out from the inbox page")
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := g.sessions.Delete(r.Context(), sessionKey(c.Value)); err != nil {
			writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "the session could not be ended: %v", err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]string{"status": "logged out"})
}

// refused reports a refused request as an access_refused observation about
// run (or no run), which the coordinator records in the audit trail, and
// logs it. Neither holds a secret: no
// token, no link, no value sent.
func (g *Gateway) refused(r *http.Request, code subjects.Code, identity, detail string) {
	g.refusedRun(r, subjects.NoRun, code, identity, detail)
}

func (g *Gateway) refusedRun(r *http.Request, run string, code subjects.Code, identity, detail string) {
	g.audit(r.Context(), run, code, identity, detail, addressOf(r), requestOf(r))
}

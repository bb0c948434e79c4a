package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// sessionCookie holds the API token of an inbox session. It is HttpOnly and
// SameSite=Strict, and requests authenticated by it must carry the
// X-Interlock-Request header, which a cross-site form cannot send.
const sessionCookie = "interlock_session"

func (g *Gateway) inbox(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	page, _ := web.ReadFile("web/inbox.html")
	_, _ = w.Write(page)
}

func (g *Gateway) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "send {\"token\": \"...\"}")
		return
	}
	id, ok := g.cfg.Directory.Authenticate(body.Token)
	if !ok {
		writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "that token is not valid")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: body.Token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int((12 * time.Hour).Seconds())})
	writeJSON(w, http.StatusOK, map[string]any{"identity": id.Name, "groups": id.Groups})
}

// stream sends every lifecycle and audit event as server-sent events, so
// the inbox updates when interrupts arrive or are decided elsewhere.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, CodeUnavailable, "streaming unsupported")
		return
	}
	events := make(chan []byte, 64)
	sub, err := g.nc.Subscribe(g.nc.Namespace().All(subjects.KindEvents), func(_ string, data []byte) {
		select {
		case events <- data:
		default: // a slow client misses a refresh hint, not data: it re-reads the list
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
		return
	}
	defer sub.Unsubscribe()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	flusher.Flush()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case data := <-events:
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
		}
		flusher.Flush()
	}
}

// Package gateway is Interlock's HTTP gateway for approvers: JSON over HTTP
// to list pending interrupts, read runs and their audit trail, and decide.
// Callers authenticate with API tokens from an approvers directory; the
// gateway publishes each decision as the caller's identity, and the
// coordinator enforces who may decide, as it does on every path.
package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/agui"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// Config is what a gateway is.
type Config struct {
	// Directory authenticates API tokens. Required.
	Directory *approvers.Directory
	// MaxBody bounds a request body; default 64 KiB.
	MaxBody int64
	// Timeout bounds the wait for a decision's verdict; default 10s.
	Timeout time.Duration
	// Links, when set, serves one-click decision links signed with it.
	Links  *links.Signer
	Logger *slog.Logger
	// Registry, when set, receives request counts and latencies.
	Registry prometheus.Registerer
}

// Gateway is an http.Handler.
type Gateway struct {
	requests  *prometheus.HistogramVec
	cfg       Config
	nc        *jetstream.Client
	client    *processor.Client
	mux       *http.ServeMux
	usedLinks *jetstream.Bucket
}

// linkTTL bounds how long a used link is remembered; links should not be
// made to last longer.
const linkTTL = 30 * 24 * time.Hour

// Provision creates the buckets a gateway uses (used links, AG-UI threads)
// through a client that has provisioned: `interlock provision`, so that
// gateways need no right to create them.
func Provision(ctx context.Context, c *jetstream.Client) error {
	if _, err := linksBucket(ctx, c); err != nil {
		return err
	}
	return agui.Provision(ctx, c)
}

func linksBucket(ctx context.Context, c *jetstream.Client) (*jetstream.Bucket, error) {
	return c.Bucket(ctx, "links", "Interlock decision links used", linkTTL)
}

// New returns a gateway working through c; it opens the bucket of used
// links (a client that has provisioned creates it).
func New(ctx context.Context, c *jetstream.Client, cfg Config) (*Gateway, error) {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = subjects.MaxDecisionSize
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	used, err := linksBucket(ctx, c)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, nc: c, client: processor.NewClient(c), mux: http.NewServeMux(), usedLinks: used}
	if cfg.Registry != nil {
		g.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "interlock_gateway_request_seconds",
			Help: "Gateway requests by route and status, with their latency."}, []string{"route", "status"})
		_ = cfg.Registry.Register(g.requests)
	}
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	g.mux.HandleFunc("GET /v1/interrupts", g.auth(g.listInterrupts))
	g.mux.HandleFunc("GET /v1/runs/{run}", g.auth(g.getRun))
	g.mux.HandleFunc("GET /v1/runs/{run}/history", g.auth(g.history))
	g.mux.HandleFunc("POST /v1/runs/{run}/interrupts/{interrupt}/decision", g.auth(g.decide))
	bridge, err := agui.New(ctx, c, cfg.Logger)
	if err != nil {
		return nil, err
	}
	bridge.Identity = func(r *http.Request) string {
		// Optional: AG-UI clients that send a token resume as its identity.
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		id, _ := cfg.Directory.Authenticate(strings.TrimSpace(token))
		return id.Name
	}
	g.mux.Handle("POST /agui/{agent}", bridge)
	g.mux.HandleFunc("GET /v1/stream", g.auth(g.stream))
	g.mux.HandleFunc("GET /inbox", g.inbox)
	g.mux.HandleFunc("POST /inbox/login", g.login)
	g.mux.HandleFunc("GET /l/{token}", g.confirmLink)
	g.mux.HandleFunc("POST /l/{token}", g.useLink)
	return g, nil
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.requests == nil {
		g.mux.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	g.mux.ServeHTTP(sw, r)
	_, pattern := g.mux.Handler(r)
	g.requests.WithLabelValues(pattern, strconv.Itoa(sw.status)).Observe(time.Since(start).Seconds())
}

// statusWriter remembers the status a handler wrote; it passes Flush on
// for the event streams.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Error is every error body: a stable code and a message for people.
type Error struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Verdict *subjects.Verdict `json:"verdict,omitempty"`
}

// Error codes the gateway adds to the coordinator's rejection codes.
const (
	CodeUnauthenticated = "unauthenticated"
	CodeInvalidJSON     = "invalid_json"
	CodeTooLarge        = "too_large"
	CodeBadRequest      = "bad_request"
	CodeNotFound        = "not_found"
	CodeUnavailable     = "unavailable"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, Error{Code: code, Message: fmt.Sprintf(format, args...)})
}

type identityKey struct{}

func identityOf(r *http.Request) approvers.Identity {
	id, _ := r.Context().Value(identityKey{}).(approvers.Identity)
	return id
}

// auth admits requests with a valid "Authorization: Bearer <token>".
func (g *Gateway) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			// An inbox session: the cookie, plus a header no cross-site form
			// can send (CSRF).
			if c, err := r.Cookie(sessionCookie); err == nil && (r.Method == http.MethodGet || r.Header.Get("X-Interlock-Request") != "") {
				token, ok = c.Value, true
			}
		}
		id, known := g.cfg.Directory.Authenticate(strings.TrimSpace(token))
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="interlock"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "send an API token: Authorization: Bearer <token>")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

// Item is one pending interrupt in a listing.
type Item struct {
	processor.PendingInterrupt
	// ExpiresInSeconds is the time left, when the interrupt has a deadline.
	ExpiresInSeconds *int64 `json:"expiresInSeconds,omitempty"`
	// CanDecide says whether the caller may decide it.
	CanDecide bool `json:"canDecide"`
}

// List is a page of pending interrupts.
type List struct {
	Interrupts []Item `json:"interrupts"`
	// NextCursor fetches the next page; empty on the last.
	NextCursor string `json:"nextCursor,omitempty"`
}

func mayDecide(in subjects.InterruptState, id approvers.Identity) bool {
	if len(in.Approvers) == 0 && len(in.ApproverGroups) == 0 {
		return true
	}
	if slices.Contains(in.Approvers, id.Name) {
		return true
	}
	for _, g := range id.Groups {
		if slices.Contains(in.ApproverGroups, g) {
			return true
		}
	}
	return false
}

func cursorOf(p processor.PendingInterrupt) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.SuspendedAt.UnixNano(), 10) + "|" + p.RunID + "|" + p.ID))
}

func (g *Gateway) listInterrupts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "limit %q is not a number from 1 to 500", s)
			return
		}
		limit = n
	}
	var olderThan time.Duration
	if s := q.Get("olderThan"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "olderThan %q is not a duration such as 10m", s)
			return
		}
		olderThan = d
	}
	var after string
	if c := q.Get("cursor"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "cursor is not one this gateway returned")
			return
		}
		after = string(raw)
	}
	all, err := g.client.Pending(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
		return
	}
	me := identityOf(r)
	subject := me
	if a := q.Get("approver"); a != "" {
		subject = approvers.Identity{Name: a, Groups: g.cfg.Directory.Groups(a)}
	}
	out := List{Interrupts: []Item{}}
	now := time.Now()
	for _, p := range all {
		key := strconv.FormatInt(p.SuspendedAt.UnixNano(), 10) + "|" + p.RunID + "|" + p.ID
		switch {
		case after != "" && key <= after,
			q.Get("agent") != "" && p.Agent != q.Get("agent"),
			q.Get("reason") != "" && p.Reason != q.Get("reason"),
			olderThan > 0 && now.Sub(p.SuspendedAt) < olderThan,
			(q.Get("mine") == "true" || q.Get("approver") != "") && !mayDecide(p.InterruptState, subject):
			continue
		}
		if len(out.Interrupts) == limit {
			out.NextCursor = cursorOf(out.Interrupts[limit-1].PendingInterrupt)
			break
		}
		item := Item{PendingInterrupt: p, CanDecide: mayDecide(p.InterruptState, me)}
		if p.ExpiresAt != nil {
			left := int64(p.ExpiresAt.Sub(now) / time.Second)
			item.ExpiresInSeconds = &left
		}
		out.Interrupts = append(out.Interrupts, item)
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) getRun(w http.ResponseWriter, r *http.Request) {
	rec, err := g.client.Run(r.Context(), r.PathValue("run"))
	if g.lookupFailed(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": rec})
}

// history returns the run's audit trail: every transition and every
// decision attempt, accepted or rejected, with who, when, what and why.
func (g *Gateway) history(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	if err := subjects.ValidateToken("run id", run); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "%v", err)
		return
	}
	evs, err := g.client.Events(r.Context(), run)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
		return
	}
	if evs == nil {
		evs = []subjects.Event{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"runId": run, "events": evs})
}

func (g *Gateway) lookupFailed(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, subjects.ErrInvalidToken):
		writeError(w, http.StatusBadRequest, CodeBadRequest, "%v", err)
	case errors.Is(err, processor.ErrRunNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, "%v", err)
	default:
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
	}
	return true
}

// DecisionBody is what POST .../decision takes. Approve with edited
// arguments by resolving with the edited arguments as the payload.
type DecisionBody struct {
	Status     subjects.Status `json:"status"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	Comment    string          `json:"comment,omitempty"`
	Metadata   map[string]any  `json:"metadata,omitempty"`
	DecisionID string          `json:"decisionId,omitempty"`
}

// statusOf maps a rejection code to an HTTP status.
var statusOf = map[subjects.Code]int{
	subjects.CodeMalformed:          http.StatusBadRequest,
	subjects.CodeUnsupportedVersion: http.StatusBadRequest,
	subjects.CodeInvalidSubject:     http.StatusBadRequest,
	subjects.CodeTooLarge:           http.StatusRequestEntityTooLarge,
	subjects.CodeUnknownRun:         http.StatusNotFound,
	subjects.CodeUnknownInterrupt:   http.StatusNotFound,
	subjects.CodeAlreadyDecided:     http.StatusConflict,
	subjects.CodeExpired:            http.StatusGone,
	subjects.CodeNotAllowed:         http.StatusForbidden,
	subjects.CodeSchemaMismatch:     http.StatusUnprocessableEntity,
}

func (g *Gateway) decide(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "the body is over %d bytes", g.cfg.MaxBody)
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "reading the body: %v", err)
		return
	}
	var b DecisionBody
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "the body is not a decision: %v", err)
		return
	}
	req := processor.DecisionRequest{RunID: r.PathValue("run"), InterruptID: r.PathValue("interrupt"), Status: b.Status,
		Comment: b.Comment, Metadata: b.Metadata, DecisionID: b.DecisionID, Approver: identityOf(r).Name, Via: "gateway"}
	if len(b.Payload) > 0 {
		req.Payload = b.Payload
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.Timeout)
	defer cancel()
	v, err := g.client.Decide(ctx, req)
	var rej *processor.RejectionError
	var pe *subjects.ProtocolError
	switch {
	case errors.As(err, &rej):
		status, ok := statusOf[v.Code]
		if !ok {
			status = http.StatusBadRequest
		}
		writeJSON(w, status, Error{Code: string(v.Code), Message: v.Detail, Verdict: &v})
	case errors.As(err, &pe):
		writeJSON(w, statusOf[pe.Code], Error{Code: string(pe.Code), Message: pe.Detail})
	case errors.Is(err, subjects.ErrInvalidToken):
		writeError(w, http.StatusBadRequest, CodeBadRequest, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "%v", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"verdict": v})
	}
}

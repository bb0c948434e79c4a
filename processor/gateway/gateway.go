// Package gateway is Interlock's HTTP gateway for approvers: JSON over HTTP
// to list pending interrupts, read runs and their audit trail, and decide.
// Callers authenticate with API tokens from an approvers directory; the
// gateway publishes each decision as the caller's identity, and the
// coordinator enforces who may decide, as it does on every path.
package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/promreg"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/agui"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/processor/store"
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
	// Links, when set, signs one-click decision links: the gateway mints
	// them for notifiers that ask on the link service (subjects.LinkMint),
	// for the sinks Directory lists under an identity's links, and serves
	// them under /l/. Only the gateway holds this secret.
	Links *links.Signer
	// LinkTTL is how long a minted link lasts (never past its interrupt's
	// deadline); default 24h, at most 30 days (as long as used links are
	// remembered).
	LinkTTL time.Duration
	Logger  *slog.Logger
	// ReadTimeout bounds the arrival of a request's headers and body;
	// IdleTimeout closes a kept-alive connection with no request. Defaults
	// 30s and 2m; see Server.
	ReadTimeout, IdleTimeout time.Duration
	// SessionTTL is how long an inbox session lasts; default 12h.
	SessionTTL time.Duration
	// LoginFailures bounds failed logins (bad tokens, bad links) per
	// address; DecisionRefusals bounds refused decisions and reads per
	// identity and per address. Default for both: 10 at once, then one per
	// 6s.
	LoginFailures, DecisionRefusals Limit
	// Registry, when set, receives request counts and latencies.
	Registry prometheus.Registerer
	// Slack, when set, serves Slack's interactivity requests (decisions
	// from Slack messages) at POST /v1/slack/interactions.
	Slack *SlackConfig
}

// Gateway is an http.Handler.
type Gateway struct {
	requests  *prometheus.HistogramVec
	cfg       Config
	nc        *jetstream.Client
	client    *processor.Client
	mux       *http.ServeMux
	handler   http.Handler
	usedLinks *jetstream.Bucket
	sessions  *jetstream.Bucket
	logins    *limiter
	refusals  *limiter
	// foreignReads bounds the audits of reads that meet an answer stored
	// over a run's record: one per run every foreignReadEvery (readRun).
	foreignReads *limiter
	stopMint     func()
	// stopChat stops the chat card service (nil without Slack cards).
	stopChat func()
	// seal signs the buttons of the Slack cards the gateway draws.
	seal slack.Seal
	// crash, in tests, abandons work at a named point (a crash).
	crash atomic.Pointer[func(point string) bool]
	// lease is how long a Slack post's intent is its gateway's (postLease;
	// tests shorten it to take over after a crash).
	lease atomic.Int64
	// stopFollow stops following Slack messages (nil without Slack).
	stopFollow func(context.Context) error
	// bridge serves AG-UI; Stop and Close stop it.
	bridge *agui.Bridge
	// stopSocket closes the Slack Socket Mode connections (nil without an
	// app token).
	stopSocket func()
	// base ends the work the gateway does after answering (Slack clicks);
	// Close cancels it and waits for background.
	base       context.Context
	stop       context.CancelFunc
	background sync.WaitGroup
	// stopped is closed once Stop or Close has returned.
	stopped     chan struct{}
	stoppedOnce sync.Once
	// schemas checks answers from Slack forms, as the coordinator does.
	schemas schema.Cache
	// emails maps Slack users by e-mail (SlackConfig.EmailLookup).
	emails emailIndex
}

// linkTTL bounds how long a used link is remembered; links should not be
// made to last longer.
const linkTTL = 30 * 24 * time.Hour

// MaxLinkTTL is the longest Config.LinkTTL: as long as used links are
// remembered, so that no link works twice.
const MaxLinkTTL = linkTTL

// Provision creates the buckets a gateway uses (used links, inbox sessions,
// AG-UI threads) and the consumer it follows decided interrupts' Slack
// messages with (SlackDurable) through a client that has provisioned:
// `interlock provision`, so that gateways need no right to create them.
func Provision(ctx context.Context, c *jetstream.Client) error {
	if _, err := linksBucket(ctx, c); err != nil {
		return err
	}
	if _, err := sessionsBucket(ctx, c, defaultSessionTTL); err != nil {
		return err
	}
	if err := c.CreateConsumer(ctx, slackConsumer(c.Namespace())); err != nil {
		return err
	}
	return agui.Provision(ctx, c)
}

func linksBucket(ctx context.Context, c *jetstream.Client) (*jetstream.Bucket, error) {
	return c.Bucket(ctx, "links", "Interlock decision links used", linkTTL)
}

// defaultSessionTTL is how long an inbox session lasts unless
// Config.SessionTTL says otherwise.
const defaultSessionTTL = 12 * time.Hour

func sessionsBucket(ctx context.Context, c *jetstream.Client, ttl time.Duration) (*jetstream.Bucket, error) {
	return c.Bucket(ctx, "sessions", "Interlock inbox sessions", ttl)
}

// New returns a gateway working through c; it opens the buckets of used
// links and of inbox sessions (a client that has provisioned creates them).
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
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 30*time.Second)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, 2*time.Minute)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, defaultSessionTTL)
	cfg.LinkTTL = cmp.Or(cfg.LinkTTL, defaultLinkTTL)
	if cfg.LinkTTL > linkTTL {
		return nil, fmt.Errorf("link TTL %s: at most %s, as long as used links are remembered", cfg.LinkTTL, linkTTL)
	}
	defaultLimit := Limit{Burst: 10, Every: 6 * time.Second}
	cfg.LoginFailures = cmp.Or(cfg.LoginFailures, defaultLimit)
	cfg.DecisionRefusals = cmp.Or(cfg.DecisionRefusals, defaultLimit)
	used, err := linksBucket(ctx, c)
	if err != nil {
		return nil, err
	}
	sessions, err := sessionsBucket(ctx, c, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, nc: c, client: processor.NewClient(c), mux: http.NewServeMux(), usedLinks: used,
		sessions: sessions, logins: newLimiter(cfg.LoginFailures), refusals: newLimiter(cfg.DecisionRefusals),
		foreignReads: newLimiter(Limit{Burst: 1, Every: foreignReadEvery}), stopped: make(chan struct{})}
	g.lease.Store(int64(postLease))
	g.base, g.stop = context.WithCancel(context.Background())
	if cfg.Slack != nil {
		if err := cfg.Slack.check(); err != nil {
			return nil, err
		}
		g.seal = slack.NewSeal(cfg.Slack.SigningSecret)
		g.mux.HandleFunc("POST /v1/slack/interactions", g.slackInteraction)
	}
	g.handler = g.guard(g.mux)
	if cfg.Registry != nil {
		g.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "interlock_gateway_request_seconds",
			Help: "Gateway requests by route and status, with their latency."}, []string{"route", "status"})
		var err error
		if g.requests, err = promreg.Register(cfg.Registry, g.requests); err != nil {
			g.stop()
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	g.mux.HandleFunc("GET /v1/interrupts", g.auth(g.listInterrupts))
	g.mux.HandleFunc("GET /v1/runs/{run}", g.auth(g.getRun))
	g.mux.HandleFunc("GET /v1/runs/{run}/history", g.auth(g.history))
	g.mux.HandleFunc("POST /v1/runs/{run}/interrupts/{interrupt}/decision", g.auth(g.decide))
	bridge, err := agui.New(ctx, c, agui.Config{Logger: cfg.Logger, Identity: identityOf, Audit: g.refused})
	if err != nil {
		return nil, err
	}
	g.bridge = bridge
	g.mux.HandleFunc("POST /agui/{agent}", g.auth(bridge.ServeHTTP))
	g.mux.HandleFunc("GET /v1/stream", g.auth(g.stream))
	g.mux.HandleFunc("GET /v1/me", g.auth(func(w http.ResponseWriter, r *http.Request) { whoAmI(w, identityOf(r)) }))
	g.mux.HandleFunc("GET /inbox", g.inbox)
	g.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/inbox", http.StatusFound) })
	g.mux.HandleFunc("GET /static/{file}", static)
	g.mux.HandleFunc("POST /inbox/login", g.login)
	g.mux.HandleFunc("POST /inbox/logout", g.logout)
	g.mux.HandleFunc("GET /l/{token}", g.confirmLink)
	g.mux.HandleFunc("POST /l/{token}", g.useLink)
	if cfg.Links != nil {
		if err := g.serveLinks(); err != nil {
			return nil, err
		}
	}
	if cfg.Slack != nil && cfg.Slack.BotToken != "" {
		if err := g.followSlack(); err != nil {
			g.Close()
			return nil, err
		}
		if len(cfg.Slack.Channels) > 0 {
			if err := g.serveChat(); err != nil {
				g.Close()
				return nil, err
			}
		}
	}
	if cfg.Slack != nil && cfg.Slack.AppToken != "" {
		if err := g.serveSlackSocket(); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.requests == nil {
		g.handler.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	g.handler.ServeHTTP(sw, r)
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

// Unwrap gives http.ResponseController the connection's writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Error is every error body: a stable code and a message for people.
type Error struct {
	Code    subjects.Code     `json:"code"`
	Message string            `json:"message"`
	Verdict *subjects.Verdict `json:"verdict,omitempty"`
}

// writeJSON answers with v. No answer of the API may be stored by a
// browser or a shared cache: most carry what only their caller may read.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code subjects.Code, format string, args ...any) {
	writeJSON(w, status, Error{Code: code, Message: fmt.Sprintf(format, args...)})
}

// Item is one pending interrupt in a listing.
type Item struct {
	processor.PendingInterrupt
	// ExpiresInSeconds is the time left, when the interrupt has a deadline.
	ExpiresInSeconds *int64 `json:"expiresInSeconds,omitempty"`
	// CanDecide says whether the caller may decide it.
	CanDecide bool `json:"canDecide"`
	// Tally says where the votes stand on an interrupt with a policy
	// (protocol version 2): approvals and denials so far and needed, and
	// who is still waited on. The item's votes are the record's.
	Tally *subjects.Tally `json:"tally,omitempty"`
	// Refusal, when canDecide is false only because of the interrupt's
	// policy, is the refusal a vote of the caller would get:
	// requester_excluded for the run's requester.
	Refusal subjects.Code `json:"refusal,omitempty"`
}

// List is a page of pending interrupts.
type List struct {
	Interrupts []Item `json:"interrupts"`
	// NextCursor fetches the next page; empty on the last.
	NextCursor string `json:"nextCursor,omitempty"`
}

// cursorOf is the listing's cursor for a position in the pending index.
func cursorOf(after uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(after, 10)))
}

// errCursor: a cursor this gateway did not return.
var errCursor = errors.New("cursor is not one this gateway returned")

// parseCursor is the position in the pending index a cursor names.
func parseCursor(c string) (uint64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, errCursor
	}
	after, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || after == 0 || after == math.MaxUint64 || cursorOf(after) != c {
		return 0, errCursor
	}
	return after, nil
}

func (g *Gateway) listInterrupts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			writeError(w, http.StatusBadRequest, subjects.CodeBadRequest, "limit %q is not a number from 1 to 500", s)
			return
		}
		limit = n
	}
	var olderThan time.Duration
	if s := q.Get("olderThan"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, subjects.CodeBadRequest, "olderThan %q is not a duration such as 10m", s)
			return
		}
		olderThan = d
	}
	var after uint64
	if c := q.Get("cursor"); c != "" {
		var err error
		if after, err = parseCursor(c); err != nil {
			writeError(w, http.StatusBadRequest, subjects.CodeBadRequest, "%v", err)
			return
		}
	}
	me := identityOf(r)
	subject := me
	if a := q.Get("approver"); a != "" && a != me.Name {
		// Another's view tells which groups they are in: an auditor's
		// question only.
		if !me.Auditor {
			g.refused(r, subjects.CodeNotAllowed, me.Name, fmt.Sprintf("listing with approver=%q: only an auditor lists for another identity", a))
			writeError(w, http.StatusForbidden, subjects.CodeNotAllowed, "only an auditor lists interrupts for another identity; leave approver out, or name yourself")
			return
		}
		subject, _ = g.cfg.Directory.Identity(a)
		subject.Name = a
	}
	out := List{Interrupts: []Item{}}
	now := time.Now()
	// Read the index page by page, each asking only for what the listing
	// still lacks, so a listing costs what it returns plus what the
	// caller's filters leave out (all of the index, when they match
	// nothing).
	for len(out.Interrupts) < limit {
		page, next, err := g.client.PendingPage(r.Context(), after, limit-len(out.Interrupts))
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
			return
		}
		for _, p := range page {
			switch {
			case !authz.MayRead(p.Interrupt, me),
				q.Get("agent") != "" && p.Agent != q.Get("agent"),
				q.Get("reason") != "" && p.Reason != q.Get("reason"),
				olderThan > 0 && now.Sub(p.SuspendedAt) < olderThan,
				(q.Get("mine") == "true" || q.Get("approver") != "") && !authz.MayDecide(p.Interrupt, subject):
				continue
			}
			canDecide := authz.MayDecide(p.Interrupt, me)
			tally, requester := g.withVotes(r.Context(), &p)
			var refusal subjects.Code
			if canDecide && errors.Is(authz.Vote(p.Interrupt, me, requester), authz.ErrRequesterExcluded) {
				canDecide, refusal = false, subjects.CodeRequesterExcluded
			}
			p.InterruptState, _ = authz.ViewInterrupt(p.InterruptState, me)
			item := Item{PendingInterrupt: p, CanDecide: canDecide, Tally: tally, Refusal: refusal}
			if p.ExpiresAt != nil {
				left := int64(p.ExpiresAt.Sub(now) / time.Second)
				item.ExpiresInSeconds = &left
			}
			out.Interrupts = append(out.Interrupts, item)
		}
		if after = next; next == 0 {
			break
		}
	}
	if after != 0 {
		out.NextCursor = cursorOf(after)
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) getRun(w http.ResponseWriter, r *http.Request) {
	rec, ok := g.readableRun(w, r)
	if !ok {
		return
	}
	view, _ := authz.View(identityOf(r), rec, nil)
	out := map[string]any{"run": view}
	if t := talliesOf(rec, identityOf(r)); len(t) > 0 {
		out["tallies"] = t
	}
	writeJSON(w, http.StatusOK, out)
}

// readableRun returns the run the path names if the caller may read it;
// otherwise it answers, and a refusal is audited. Refused reads count
// against the caller like refused decisions.
func (g *Gateway) readableRun(w http.ResponseWriter, r *http.Request) (*subjects.Run, bool) {
	me, addr := identityOf(r), addressOf(r)
	if g.limited(w, r, g.refusals, me.Name, addr) {
		return nil, false
	}
	rec, err := g.readRun(r.Context(), r.PathValue("run"), me.Name, addr, requestOf(r))
	if g.lookupFailed(w, err) {
		return nil, false
	}
	if !authz.MayReadRun(rec, me) {
		g.refusals.fail(limitKey(me.Name), addr)
		g.refusedRun(r, rec.RunID, subjects.CodeNotAllowed, me.Name, "read of a run the identity may not decide")
		writeError(w, http.StatusForbidden, subjects.CodeNotAllowed,
			"%s may not read run %s: it asks nothing %s may decide", me.Name, rec.RunID, me.Name)
		return nil, false
	}
	return rec, true
}

// readRun reads run's record for identity. When the run's key holds an
// answer the server stored there for another user (store.ErrForeignRecord)
// the read is audited on the run: filing that observation has the
// coordinator read the record, which puts back its latest sealed copy
// (docs/protocol.md, "Record copies on disk"), so the page asked for again
// finds the run.
func (g *Gateway) readRun(ctx context.Context, run, identity, address, request string) (*subjects.Run, error) {
	rec, err := g.client.Run(ctx, run)
	if errors.Is(err, store.ErrForeignRecord) {
		// Once per run every foreignReadEvery: each observation has the
		// coordinator read the run's whole trail, and adds to it.
		if blocked, _ := g.foreignReads.blocked(run); !blocked {
			g.foreignReads.fail(run)
			g.audit(ctx, run, subjects.CodeNotAllowed, identity,
				"the run's record is not a write of the coordinator's (an answer the server stored over it): read refused",
				address, request)
		}
	}
	return rec, err
}

// foreignReadEvery is how often readRun audits reads of one run that meet
// an answer.
const foreignReadEvery = 5 * time.Second

// history returns the run's audit trail: every transition and every
// decision attempt, accepted or rejected, with who, when, what and why.
func (g *Gateway) history(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	if err := subjects.ValidateToken("run id", run); err != nil {
		writeError(w, http.StatusBadRequest, subjects.CodeBadRequest, "%v", err)
		return
	}
	// Auditors read the trail of any run id, recorded or not (rejected
	// input names runs that never were); anyone else that of a run they
	// may read, and of it what authz.View shows them.
	var rec *subjects.Run
	if me := identityOf(r); !me.Auditor {
		var ok bool
		if rec, ok = g.readableRun(w, r); !ok {
			return
		}
	}
	evs, err := g.client.Events(r.Context(), run)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
		return
	}
	if evs == nil {
		evs = []subjects.Event{}
	}
	if rec != nil {
		_, evs = authz.View(identityOf(r), rec, evs)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runId": run, "events": evs})
}

func (g *Gateway) lookupFailed(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, subjects.ErrInvalidToken):
		writeError(w, http.StatusBadRequest, subjects.CodeBadRequest, "%v", err)
	case errors.Is(err, processor.ErrRunNotFound):
		writeError(w, http.StatusNotFound, subjects.CodeNotFound, "%v", err)
	default:
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
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
	// CallDigest is the digest of the call the approver saw (protocol
	// version 2): a vote on a call other than the interrupt's is refused
	// (call_mismatch), so an approval holds only for the arguments shown.
	CallDigest string `json:"callDigest,omitempty"`
	// Arguments are edited arguments: the vote approves the interrupt's
	// tool with these (their own digest).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Withdraw takes back the caller's open vote, where the interrupt's
	// policy allows changes; Status is ignored.
	Withdraw bool `json:"withdraw,omitempty"`
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
	subjects.CodeDecisionIDReused:   http.StatusConflict,
	subjects.CodeExpired:            http.StatusGone,
	subjects.CodeNotAllowed:         http.StatusForbidden,
	subjects.CodeSchemaMismatch:     http.StatusUnprocessableEntity,
	subjects.CodeSchemaBudget:       http.StatusUnprocessableEntity,
	subjects.CodeRecordTooLarge:     http.StatusRequestEntityTooLarge,
	subjects.CodeRequesterExcluded:  http.StatusForbidden,
	subjects.CodeAlreadyVoted:       http.StatusConflict,
	subjects.CodeNoVote:             http.StatusConflict,
	subjects.CodeCallMismatch:       http.StatusConflict,
	subjects.CodeVoteLimit:          http.StatusConflict,
}

func (g *Gateway) decide(w http.ResponseWriter, r *http.Request) {
	me, addr := identityOf(r), addressOf(r)
	if g.limited(w, r, g.refusals, me.Name, addr) {
		return
	}
	// refuse answers bad input the coordinator never sees: audited, and
	// counted against the caller like a refused decision.
	refuse := func(status int, code subjects.Code, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		g.refusals.fail(limitKey(me.Name), addr)
		g.refusedRun(r, r.PathValue("run"), code, me.Name, msg)
		writeError(w, status, code, "%s", msg)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		refuse(http.StatusRequestEntityTooLarge, subjects.CodeTooLarge, "the body is over %d bytes", g.cfg.MaxBody)
		return
	}
	if err != nil {
		refuse(http.StatusBadRequest, subjects.CodeBadRequest, "reading the body: %v", err)
		return
	}
	var b DecisionBody
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		refuse(http.StatusBadRequest, subjects.CodeInvalidJSON, "the body is not a decision: %v", err)
		return
	}
	req := processor.DecisionRequest{RunID: r.PathValue("run"), InterruptID: r.PathValue("interrupt"), Status: b.Status,
		Comment: b.Comment, Metadata: b.Metadata, DecisionID: b.DecisionID, Approver: identityOf(r).Name, Via: "gateway",
		CallDigest: b.CallDigest, Withdraw: b.Withdraw}
	if len(b.Payload) > 0 {
		req.Payload = b.Payload
	}
	if len(b.Arguments) > 0 {
		req.Arguments = b.Arguments
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.Timeout)
	defer cancel()
	v, err := g.client.Decide(ctx, req)
	var rej *processor.RejectionError
	var pe *subjects.ProtocolError
	switch {
	case errors.As(err, &rej):
		g.refusals.fail(limitKey(me.Name), addr)
		status, ok := statusOf[v.Code]
		if !ok {
			status = http.StatusBadRequest
		}
		writeJSON(w, status, Error{Code: v.Code, Message: v.Detail, Verdict: &v})
	case errors.As(err, &pe):
		refuse(statusOf[pe.Code], pe.Code, "%s", pe.Detail)
	case errors.Is(err, subjects.ErrInvalidToken):
		refuse(http.StatusBadRequest, subjects.CodeBadRequest, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"verdict": v})
	}
}

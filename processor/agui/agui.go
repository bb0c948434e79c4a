// Package agui bridges Interlock runs to AG-UI 1.0 clients (CopilotKit, the
// @ag-ui/client HttpAgent): a POST of a RunAgentInput answers with an AG-UI
// event stream over server-sent events, and a run that suspends finishes
// with an "interrupt" outcome that the next RunAgentInput on the thread
// resumes. Callers are the gateway's authenticated identities, each
// starting only its own agents; a thread belongs to its creator, and the
// bridge mints the run ids. All state is in JetStream (thread records, run
// records, the events runs emit), so any gateway process can take any
// request, build the thread's transcript and send the events a client
// missed.
package agui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/interlockhq/interlock/internal/lifecycle"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// RunAgentInput is the AG-UI request body. Fields Interlock does not use are
// passed to the agent untouched in its input.
type RunAgentInput struct {
	ThreadID       string          `json:"threadId"`
	RunID          string          `json:"runId"`
	State          json.RawMessage `json:"state,omitempty"`
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	ForwardedProps json.RawMessage `json:"forwardedProps,omitempty"`
	Resume         []ResumeEntry   `json:"resume,omitempty"`
}

// ResumeEntry answers one interrupt.
type ResumeEntry struct {
	InterruptID string          `json:"interruptId"`
	Status      subjects.Status `json:"status"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Metadata    map[string]any  `json:"metadata,omitempty"`
	// CallDigest is the digest of the call the client was shown
	// (metadata "interlock.call" of the interrupt, protocol version 2):
	// the vote counts only for that call; another is refused
	// (call_mismatch). Empty: the interrupt's call.
	CallDigest string `json:"callDigest,omitempty"`
}

// payload is the answer the bridge sends for e: none when it is absent or
// null.
func (e ResumeEntry) payload() json.RawMessage {
	if len(e.Payload) == 0 || string(e.Payload) == "null" {
		return nil
	}
	return e.Payload
}

// VoteRecordedEvent names the CUSTOM event a resume sends when an entry
// was a vote that left its interrupt waiting for others (protocol version
// 2); its value has interruptId, tally (approvals and denials so far and
// needed, waitingOn) and detail in words.
const VoteRecordedEvent = "interlock.vote_recorded"

// Bridge serves POST /agui/{agent} until Stop.
type Bridge struct {
	nc      *jetstream.Client
	client  *processor.Client
	threads *jetstream.Bucket
	rules   rules.Set
	cfg     Config

	// mu guards stopping; requests counts the requests under way, each
	// of whose contexts ends when base does (Stop's deadline, cause
	// ErrStopped).
	mu       sync.Mutex
	stopping bool
	requests sync.WaitGroup
	base     context.Context
	abort    context.CancelCauseFunc
	stopped  lifecycle.Stopped
}

// Config is what a bridge is: who its callers are, where refusals are
// audited, how long a request waits.
type Config struct {
	Logger *slog.Logger
	// Identity returns the authenticated caller; a request without one is
	// refused. The gateway passes its own authentication.
	Identity func(r *http.Request) approvers.Identity
	// Audit, when set, records a refusal of who may do what (codes
	// agent_not_allowed, not_owner, not_allowed) in the audit trail; the
	// gateway passes its access_refused events.
	Audit func(r *http.Request, code subjects.Code, identity, detail string)
	// Wait bounds how long one request waits for its pass; default 5 minutes.
	Wait time.Duration
}

// maxRequests bounds the client runIds a thread remembers.
const maxRequests = 64

// threadRecord is the thread index's value: who owns the thread, its
// latest run, how far a client has been sent that run's AG-UI events, and
// the Interlock run each recent client runId was answered with.
type threadRecord struct {
	ThreadID string `json:"threadId"`
	Owner    string `json:"owner"`
	Agent    string `json:"agent"`
	RunID    string `json:"runId"`
	// Delivered is the AGUI stream sequence of the last event of RunID a
	// client was sent.
	Delivered uint64    `json:"delivered,omitempty"`
	Requests  []request `json:"requests,omitempty"`
}

type request struct {
	ClientRunID string `json:"clientRunId"`
	RunID       string `json:"runId"`
}

// answered returns the Interlock run a client runId was answered with.
func (t *threadRecord) answered(clientRunID string) string {
	for _, r := range t.Requests {
		if r.ClientRunID == clientRunID {
			return r.RunID
		}
	}
	return ""
}

func (t *threadRecord) remember(clientRunID, run string) {
	if t.answered(clientRunID) != "" {
		return
	}
	t.Requests = append(t.Requests, request{ClientRunID: clientRunID, RunID: run})
	if len(t.Requests) > maxRequests {
		t.Requests = slices.Clone(t.Requests[len(t.Requests)-maxRequests:])
	}
}

// Provision creates the threads bucket through a client that has
// provisioned (`interlock provision`).
func Provision(ctx context.Context, nc *jetstream.Client) error {
	_, err := threadsBucket(ctx, nc)
	return err
}

func threadsBucket(ctx context.Context, nc *jetstream.Client) (*jetstream.Bucket, error) {
	return nc.Bucket(ctx, "threads", "Interlock AG-UI threads: owner, latest run, delivered events", 0)
}

// New returns a bridge; it opens the threads bucket (a client that has
// provisioned creates it).
func New(ctx context.Context, nc *jetstream.Client, cfg Config) (*Bridge, error) {
	threads, err := threadsBucket(ctx, nc)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Minute
	}
	base, abort := context.WithCancelCause(context.Background())
	return &Bridge{nc: nc, client: processor.NewClient(nc), threads: threads, cfg: cfg, rules: rules.Set{},
		base: base, abort: abort}, nil
}

// ErrStopped is the cause the requests still under way are cancelled with
// when Stop's context ends before they finish: each ends with a RUN_ERROR
// (code unavailable), and its run goes on; the next request on the thread
// shows it.
var ErrStopped = errors.New("AG-UI bridge stopped")

// Stop refuses new requests (503, code unavailable: a load balancer sends
// them to another gateway) and waits for the requests under way while ctx
// lasts; when ctx ends first, they are cancelled (cause ErrStopped) and
// Stop returns an error wrapping ctx's, without waiting any longer
// (lifecycle.Wait). Stop again is harmless.
func (b *Bridge) Stop(ctx context.Context) error {
	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	defer b.stopped.Close()
	done := make(chan struct{})
	go func() { b.requests.Wait(); close(done) }()
	if err := lifecycle.Wait(ctx, done, func() { b.abort(ErrStopped) }); err != nil {
		return fmt.Errorf("agui: %w", err)
	}
	return nil
}

// Stopped returns a channel closed once Stop has returned.
func (b *Bridge) Stopped() <-chan struct{} { return b.stopped.C() }

// enter counts a request in, unless the bridge is stopping.
func (b *Bridge) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping {
		return false
	}
	b.requests.Add(1)
	return true
}

func threadKey(thread string) string {
	sum := sha256.Sum256([]byte(thread))
	return hex.EncodeToString(sum[:16])
}

// stream writes AG-UI events as server-sent events.
type stream struct {
	w     http.ResponseWriter
	f     http.Flusher
	input RunAgentInput
	gone  bool // a write failed: the client left
}

func (s *stream) send(ev map[string]any) bool {
	if s.gone {
		return false
	}
	if _, ok := ev["timestamp"]; !ok {
		ev["timestamp"] = time.Now().UnixMilli()
	}
	data, _ := json.Marshal(ev)
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
		s.gone = true
		return false
	}
	s.f.Flush()
	return true
}

func (s *stream) started() {
	s.send(map[string]any{"type": "RUN_STARTED", "threadId": s.input.ThreadID, "runId": s.input.RunID})
}

func (s *stream) fail(code subjects.Code, format string, args ...any) {
	s.send(map[string]any{"type": "RUN_ERROR", "message": fmt.Sprintf(format, args...), "code": code})
}

// session is one request on a thread.
type session struct {
	*stream
	id     approvers.Identity
	agent  string
	thread *threadRecord
	// rev is the thread record's revision and loaded its latest run, as
	// this request last read or wrote them.
	rev    uint64
	loaded string
	// audit records an authorization refusal (nil: none).
	audit func(code subjects.Code, detail string)
	// caught are events of the thread's earlier run sent in this request,
	// for the transcript.
	caught []map[string]any
	log    *slog.Logger
}

// fail ends the request with RUN_ERROR and records why in the log: who
// asked what on which thread, and the code.
func (s *session) fail(code subjects.Code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("AG-UI request refused", "code", code, "identity", s.id.Name, "agent", s.agent,
		"thread", s.input.ThreadID, "clientRunId", s.input.RunID, "reason", msg)
	if s.audit != nil && (code == subjects.CodeAgentNotAllowed || code == subjects.CodeNotOwner || code == subjects.CodeNotAllowed) {
		s.audit(code, msg)
	}
	s.stream.fail(code, "%s", msg)
}

// ServeHTTP answers one RunAgentInput with an AG-UI event stream.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !b.enter() {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"code":"unavailable","message":"this gateway is stopping; send the request again"}` + "\n"))
		return
	}
	defer b.requests.Done()
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	var id approvers.Identity
	if b.cfg.Identity != nil {
		id = b.cfg.Identity(r)
	}
	if id.Name == "" {
		// Fail closed: the gateway authenticates before this.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":"unauthenticated","message":"send an API token: Authorization: Bearer <token>"}` + "\n"))
		return
	}
	var in RunAgentInput
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, subjects.MaxMessageSize)).Decode(&in)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	s := &session{stream: &stream{w: w, f: flusher, input: in}, id: id, agent: r.PathValue("agent"), log: b.cfg.Logger}
	if b.cfg.Audit != nil {
		s.audit = func(code subjects.Code, detail string) { b.cfg.Audit(r, code, id.Name, detail) }
	}
	switch {
	case err != nil:
		s.fail(subjects.CodeBadInput, "the body is not a RunAgentInput: %v", err)
		return
	case in.ThreadID == "" || in.RunID == "":
		s.fail(subjects.CodeBadInput, "threadId and runId are required")
		return
	}
	if err := subjects.ValidateToken("agent", s.agent); err != nil {
		s.fail(subjects.CodeBadInput, "%v", err)
		return
	}
	if !authz.MayStart(s.agent, id) {
		s.fail(subjects.CodeAgentNotAllowed, "%s may not run agent %s (the identities file lists the agents each identity may start)", id.Name, s.agent)
		return
	}
	ctx, stop := context.WithCancelCause(r.Context())
	defer stop(nil)
	defer context.AfterFunc(b.base, func() { stop(context.Cause(b.base)) })()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Wait)
	defer cancel()
	b.serve(ctx, s)
}

// serve answers a request of the thread's owner: the same request again,
// a resume, a look at the run under way, or a new run.
func (b *Bridge) serve(ctx context.Context, s *session) {
	t, rev, err := b.loadThread(ctx, s.input.ThreadID)
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	s.thread, s.rev = t, rev
	if t != nil {
		s.loaded = t.RunID
		switch {
		case t.Owner != s.id.Name:
			s.fail(subjects.CodeNotOwner, "thread %q belongs to another identity; start a thread of your own", t.ThreadID)
			return
		case t.Agent != s.agent:
			s.fail(subjects.CodeBadInput, "thread %q runs agent %s, not %s", t.ThreadID, t.Agent, s.agent)
			return
		}
		if run := t.answered(s.input.RunID); run != "" {
			// The same request again (a retry, a reload): answer with where
			// its run stands; nothing is decided or started twice.
			b.follow(ctx, s, run)
			return
		}
	}
	if len(s.input.Resume) > 0 {
		b.resume(ctx, s)
		return
	}
	if t != nil && t.RunID != "" {
		rec, err := b.client.Run(ctx, t.RunID)
		if err != nil && !errors.Is(err, processor.ErrRunNotFound) {
			s.fail(subjects.CodeUnavailable, "%v", err)
			return
		}
		if rec == nil || !rec.Status.Terminal() {
			// Never abandon an open interrupt or a pass under way: a run
			// without resume on a thread that waits shows where it stands.
			t.remember(s.input.RunID, t.RunID)
			b.follow(ctx, s, t.RunID)
			return
		}
	}
	b.start(ctx, s)
}

// loadThread returns the thread's record and its revision (nil when the
// thread is new, with the revision its first record is written over). An
// answer the server stored under the thread's key for another user is no
// record (jetstream.ErrForeign): the thread is new, and nobody follows a
// run of another's through it.
func (b *Bridge) loadThread(ctx context.Context, thread string) (*threadRecord, uint64, error) {
	raw, rev, err := b.threads.Entry(ctx, threadKey(thread))
	if errors.Is(err, jetstream.ErrForeign) {
		b.cfg.Logger.Warn("AG-UI thread record refused: not the bridge's write", "thread", thread, "error", err)
	}
	if errors.Is(err, jetstream.ErrNotFound) {
		return nil, rev, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var t threadRecord
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, 0, fmt.Errorf("thread %q: %w", thread, err)
	}
	return &t, rev, nil
}

// saveThread writes the session's thread record with compare-and-set,
// merging what concurrent requests on the thread wrote meanwhile. It runs
// even when the request's context has ended, so what was delivered is not
// sent again.
func (b *Bridge) saveThread(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := threadKey(s.thread.ThreadID)
	for range 16 {
		raw, _ := json.Marshal(s.thread)
		rev, err := b.threads.Update(ctx, key, raw, s.rev)
		if err == nil {
			s.rev, s.loaded = rev, s.thread.RunID
			return nil
		}
		if !errors.Is(err, jetstream.ErrConflict) {
			return err
		}
		cur, rev, err := b.loadThread(ctx, s.thread.ThreadID)
		if err != nil {
			return err
		}
		if cur != nil {
			s.thread = merge(cur, s.thread, s.loaded)
		}
		s.rev = rev
	}
	return fmt.Errorf("thread %q: compare-and-set kept losing", s.thread.ThreadID)
}

// merge is cur, written by another request, with what mine (read when the
// thread's latest run was loaded) adds: its answered runIds, how far it
// delivered, and the run it started if nobody else moved the thread on.
func merge(cur, mine *threadRecord, loaded string) *threadRecord {
	out := *cur
	out.Requests = slices.Clone(cur.Requests)
	for _, r := range mine.Requests {
		out.remember(r.ClientRunID, r.RunID)
	}
	switch {
	case mine.RunID == cur.RunID:
		out.Delivered = max(cur.Delivered, mine.Delivered)
	case cur.RunID == loaded:
		out.RunID, out.Delivered = mine.RunID, mine.Delivered
	}
	return &out
}

// start mints a run for the request and streams its first pass. A new
// thread is bound to the caller.
func (b *Bridge) start(ctx context.Context, s *session) {
	run := uuid.Must(uuid.NewV7()).String()
	if s.thread == nil {
		s.thread = &threadRecord{ThreadID: s.input.ThreadID, Owner: s.id.Name, Agent: s.agent}
		if err := b.saveThread(s); err != nil {
			s.fail(subjects.CodeUnavailable, "%v", err)
			return
		}
		if s.thread.Owner != s.id.Name || s.thread.Agent != s.agent { // a concurrent request created it
			s.fail(subjects.CodeNotOwner, "thread %q belongs to another identity or agent; start a thread of your own", s.input.ThreadID)
			return
		}
	}
	f, err := b.subscribe(s.agent, run)
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	// What the thread's last run emitted while no client listened comes
	// first.
	if s.thread.RunID != "" {
		if !b.pump(ctx, s, s.thread.RunID, true) {
			return
		}
	}
	input, _ := json.Marshal(s.input)
	// Started as the session's identity (start.<agent>.<identity>): the
	// run's requester, whom a decision policy can exclude from approving.
	if _, err := b.client.Start(ctx, s.agent, json.RawMessage(input), processor.WithRunID(run),
		processor.WithThreadID(s.input.ThreadID), processor.WithRequester(s.id.Name)); err != nil {
		code := subjects.CodeUnavailable
		if errors.Is(err, processor.ErrRunExists) {
			code = subjects.CodeRunExists
		}
		_ = b.saveThread(s) // what was caught up was delivered
		s.fail(code, "%v", err)
		return
	}
	// The thread names only a run that was started, so no request on it
	// waits for a run that never will.
	s.thread.RunID, s.thread.Delivered = run, 0
	s.thread.remember(s.input.RunID, run)
	if err := b.saveThread(s); err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	b.relay(ctx, s, f, run, 0)
}

// resume validates and authorizes the whole batch against the thread's
// latest run, then decides every entry and streams the replay. Nothing is
// decided unless every entry passes.
func (b *Bridge) resume(ctx context.Context, s *session) {
	if s.thread == nil || s.thread.RunID == "" {
		s.fail(subjects.CodeLostState, "no interrupted run is known for thread %q", s.input.ThreadID)
		return
	}
	rec, err := b.client.Run(ctx, s.thread.RunID)
	if errors.Is(err, processor.ErrRunNotFound) {
		s.fail(subjects.CodeLostState, "no interrupted run is known for thread %q", s.input.ThreadID)
		return
	}
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	if code, msg := b.check(rec, s.input.Resume, s.id); code != "" {
		s.fail(code, "%s", msg)
		return
	}
	f, err := b.subscribe(s.agent, rec.RunID)
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	target := rec.Pass + 1
	for _, e := range s.input.Resume {
		req := processor.DecisionRequest{RunID: rec.RunID, InterruptID: e.InterruptID, Status: e.Status,
			Metadata: e.Metadata, Approver: s.id.Name, Via: "agui", CallDigest: e.CallDigest,
			DecisionID: "agui-" + threadKey(s.input.ThreadID+"\x00"+s.input.RunID+"\x00"+e.InterruptID)}
		if p := e.payload(); p != nil {
			req.Payload = p
		}
		v, err := b.client.Decide(ctx, req)
		if err != nil {
			s.fail(subjects.CodeRejected, "interrupt %s: %v", e.InterruptID, err)
			return
		}
		if v.Outcome == subjects.OutcomeVoteRecorded {
			// A vote that leaves its interrupt waiting for others
			// (protocol version 2): the run stays suspended at this pass,
			// so the stream ends with its interrupts, each with its tally,
			// after a CUSTOM event saying what remains.
			target = rec.Pass
			if !s.send(map[string]any{"type": "CUSTOM", "name": VoteRecordedEvent, "value": map[string]any{
				"interruptId": e.InterruptID, "tally": v.Tally, "detail": v.Detail}}) {
				return
			}
		}
	}
	s.thread.remember(s.input.RunID, rec.RunID)
	b.relay(ctx, s, f, rec.RunID, target)
}

// check applies the resume rules to a batch: the first broken rule's code
// and message, or "" when every entry may be decided.
func (b *Bridge) check(rec *subjects.Run, entries []ResumeEntry, id approvers.Identity) (code subjects.Code, msg string) {
	seen := map[string]bool{}
	now := time.Now()
	for _, e := range entries {
		switch {
		case seen[e.InterruptID]:
			return subjects.CodeDuplicateEntry, fmt.Sprintf("interrupt %s is answered twice", e.InterruptID)
		case rules.Find(rec, e.InterruptID) < 0:
			return subjects.CodeUnknownInterrupt, fmt.Sprintf("interrupt %s is not an interrupt of the thread's latest run", e.InterruptID)
		case e.Status != subjects.StatusResolved && e.Status != subjects.StatusCancelled:
			return subjects.CodeBadInput, fmt.Sprintf("interrupt %s: status %q is not resolved or cancelled", e.InterruptID, e.Status)
		}
		// The coordinator's own rules, on the decision the bridge will send.
		d := subjects.Decision{Version: subjects.Version, InterruptID: e.InterruptID, Status: e.Status,
			Payload: e.payload(), Approver: id.Name, CallDigest: e.CallDigest}
		switch _, rej := b.rules.CheckDecision(rec, d, id, now); {
		case rej == nil, rej.IsNoop():
			// Decidable, or a cancel of an expired interrupt: it changes
			// nothing and lets the thread go on.
		case rej.Code == subjects.CodeAlreadyDecided:
			return subjects.CodeNotInterrupted, fmt.Sprintf("interrupt %s no longer waits (the run is %s; it was decided on another path?); "+
				"send a run without resume to see where the thread stands", e.InterruptID, rec.Status)
		default:
			return rej.Code, fmt.Sprintf("interrupt %s: %s", e.InterruptID, rej.Detail)
		}
		seen[e.InterruptID] = true
	}
	for _, p := range rec.Pending() {
		if !seen[p.ID] {
			return subjects.CodeMissingEntry, fmt.Sprintf("interrupt %s is open and not answered: every open interrupt needs an entry", p.ID)
		}
	}
	return "", ""
}

// follow streams where run stands: the events no client was sent yet,
// then its current interrupts or outcome, or the pass under way until it
// reports.
func (b *Bridge) follow(ctx context.Context, s *session, run string) {
	f, err := b.subscribe(s.agent, run)
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	rec, err := b.client.Run(ctx, run)
	if err != nil && !errors.Is(err, processor.ErrRunNotFound) {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	target := 0
	if rec != nil {
		target = rec.Pass + 1
		if rec.Status == subjects.RunSuspended {
			target = rec.Pass
		}
	}
	b.relay(ctx, s, f, run, target)
}

// feed wakes a relay when a run emits or reports.
type feed struct {
	subs []*jetstream.Subscription
	wake chan struct{}
	once sync.Once
}

func (f *feed) close() {
	f.once.Do(func() {
		for _, s := range f.subs {
			s.Unsubscribe()
		}
	})
}

func (b *Bridge) subscribe(agent, run string) (*feed, error) {
	f := &feed{wake: make(chan struct{}, 1)}
	poke := func(string, []byte) {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	aguiSubject, err := b.nc.Namespace().AGUI(agent, run)
	if err != nil {
		return nil, err
	}
	evSubject, err := b.nc.Namespace().RunEvents(run)
	if err != nil {
		return nil, err
	}
	for _, subject := range []string{aguiSubject, evSubject} {
		sub, err := b.nc.Subscribe(subject, poke)
		if err != nil {
			f.close()
			return nil, err
		}
		f.subs = append(f.subs, sub)
	}
	return f, nil
}

// pollEvery bounds how long a relay goes without looking, should a wake-up
// be lost.
const pollEvery = time.Second

// relay sends run's AG-UI events from the stream, from the first one no
// client of the thread was sent, until the run has reported pass target
// (or a later one), then ends the request from the run's record.
func (b *Bridge) relay(ctx context.Context, s *session, f *feed, run string, target int) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if !b.pump(ctx, s, run, false) {
			return
		}
		rec, err := b.client.Run(ctx, run)
		if err != nil && !errors.Is(err, processor.ErrRunNotFound) {
			s.fail(subjects.CodeUnavailable, "%v", err)
			return
		}
		if rec != nil && (rec.Status.Terminal() || rec.Status == subjects.RunSuspended && rec.Pass >= target) {
			// The outcome is stored after the pass's events: fetch the last.
			if b.pump(ctx, s, run, false) {
				b.finish(ctx, s, rec)
			}
			return
		}
		select {
		case <-ctx.Done():
			_ = b.saveThread(s)
			if errors.Is(context.Cause(ctx), ErrStopped) {
				s.fail(subjects.CodeUnavailable, "this gateway is stopping; the run goes on, and the next request on the thread shows it")
				return
			}
			s.fail(subjects.CodeUnavailable, "the run did not report back in time; it goes on, and the next request on the thread shows it")
			return
		case <-f.wake:
		case <-tick.C:
		}
	}
}

// pump sends the events of run kept in the stream that no client of the
// thread was sent, when run is the thread's latest run. caught keeps them
// for the transcript of a later run.
func (b *Bridge) pump(ctx context.Context, s *session, run string, caught bool) bool {
	if run != s.thread.RunID {
		return true
	}
	subject, err := b.nc.Namespace().AGUI(s.agent, run)
	if err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return false
	}
	for {
		msgs, err := b.nc.Messages(ctx, jetstream.StreamAGUI, subject, s.thread.Delivered+1, 256)
		if err != nil {
			s.fail(subjects.CodeUnavailable, "%v", err)
			return false
		}
		for _, m := range msgs {
			var ev map[string]any
			if json.Unmarshal(m.Data, &ev) != nil {
				b.cfg.Logger.Warn("AG-UI event is not a JSON object; skipped", "run", run, "seq", m.Sequence)
			} else if !s.send(ev) {
				return false
			}
			if caught && ev != nil {
				s.caught = append(s.caught, ev)
			}
			s.thread.Delivered = m.Sequence
		}
		if len(msgs) < 256 {
			return true
		}
	}
}

// finish ends the stream from the run's record.
func (b *Bridge) finish(ctx context.Context, s *session, rec *subjects.Run) {
	done := map[string]any{"type": "RUN_FINISHED", "threadId": s.input.ThreadID, "runId": s.input.RunID}
	var final []map[string]any
	switch rec.Status {
	case subjects.RunSuspended:
		if len(s.input.State) > 0 {
			final = append(final, map[string]any{"type": "STATE_SNAPSHOT", "snapshot": json.RawMessage(s.input.State)})
		}
		messages, err := b.transcript(ctx, s, rec.RunID)
		if err != nil {
			s.fail(subjects.CodeUnavailable, "%v", err)
			return
		}
		final = append(final, map[string]any{"type": "MESSAGES_SNAPSHOT", "messages": messages})
		interrupts := []map[string]any{}
		for _, in := range rec.Pending() {
			view, _ := authz.ViewInterrupt(in, s.id)
			out := toAGUI(view)
			if t := b.rules.Tally(rec, rules.Find(rec, in.ID), subjects.Decision{Status: subjects.StatusWithdrawn}); t != nil && !view.Withheld {
				meta, _ := out["metadata"].(map[string]any)
				if meta == nil {
					meta = map[string]any{}
				}
				meta["interlock.tally"] = t
				meta["interlock.votes"] = view.Votes
				out["metadata"] = meta
			}
			interrupts = append(interrupts, out)
		}
		done["outcome"] = map[string]any{"type": "interrupt", "interrupts": interrupts}
	case subjects.RunCompleted:
		if len(rec.Result) > 0 {
			done["result"] = json.RawMessage(rec.Result)
		}
		done["outcome"] = map[string]any{"type": "success"}
	default:
		done = map[string]any{"type": "RUN_ERROR", "message": rec.Error, "code": subjects.CodeRunFailed}
	}
	if err := b.saveThread(s); err != nil {
		s.fail(subjects.CodeUnavailable, "%v", err)
		return
	}
	for _, ev := range append(final, done) {
		s.send(ev)
	}
}

// transcript is the client's messages with everything the thread's runs
// emitted folded in: this request's catch-up and every event run kept.
func (b *Bridge) transcript(ctx context.Context, s *session, run string) ([]map[string]any, error) {
	subject, err := b.nc.Namespace().AGUI(s.agent, run)
	if err != nil {
		return nil, err
	}
	events := slices.Clone(s.caught)
	for from := uint64(0); ; {
		msgs, err := b.nc.Messages(ctx, jetstream.StreamAGUI, subject, from, 256)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			var ev map[string]any
			if json.Unmarshal(m.Data, &ev) == nil {
				events = append(events, ev)
			}
			from = m.Sequence + 1
		}
		if len(msgs) < 256 {
			break
		}
	}
	var base []map[string]any
	_ = json.Unmarshal(s.input.Messages, &base)
	return fold(base, events), nil
}

// toAGUI maps an interrupt, as authz.ViewInterrupt shows it to the caller,
// to an AG-UI Interrupt; the interrupt's approvers travel in its metadata.
// One withheld from the caller keeps only its id, reason and tool call, and
// says it is withheld: the run waits on it, and what it asks is its
// approvers' to see.
func toAGUI(in subjects.InterruptState) map[string]any {
	out := map[string]any{"id": in.ID, "reason": in.Reason}
	if in.ToolCallID != "" {
		out["toolCallId"] = in.ToolCallID
	}
	if in.Withheld {
		out["metadata"] = map[string]any{"interlock.withheld": true}
		return out
	}
	if in.Message != "" {
		out["message"] = in.Message
	}
	if len(in.ResponseSchema) > 0 {
		out["responseSchema"] = json.RawMessage(in.ResponseSchema)
	}
	if in.ExpiresAt != nil {
		out["expiresAt"] = in.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	meta := map[string]any{}
	if len(in.Metadata) > 0 {
		_ = json.Unmarshal(in.Metadata, &meta)
	}
	if len(in.Approvers) > 0 {
		meta["interlock.approvers"] = slices.Clone(in.Approvers)
	}
	if in.Call != nil {
		// The gated call (protocol version 2): a resume entry sends its
		// digest back as callDigest.
		meta["interlock.call"] = in.Call
	}
	if len(meta) > 0 {
		out["metadata"] = meta
	}
	return out
}

// Package agui bridges Interlock runs to AG-UI 1.0 clients (CopilotKit, the
// @ag-ui/client HttpAgent): a POST of a RunAgentInput answers with an AG-UI
// event stream over server-sent events, and a run that suspends finishes
// with an "interrupt" outcome that the next RunAgentInput on the thread
// resumes. All state is in JetStream, so any gateway process can take any
// request.
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

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
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
}

// Error codes of RUN_ERROR events the bridge sends before a run starts.
const (
	CodeBadInput         = "bad_input"
	CodeDuplicateEntry   = "duplicate_entry"
	CodeUnknownInterrupt = "unknown_interrupt"
	CodeMissingEntry     = "missing_entry"
	CodeExpired          = "expired"
	CodeSchemaMismatch   = "schema_mismatch"
	CodeLostState        = "lost_state"
	CodeNotInterrupted   = "not_interrupted"
	CodeRejected         = "rejected"
	CodeRunFailed        = "run_failed"
	CodeUnavailable      = "unavailable"
)

// Bridge serves POST /agui/{agent}.
type Bridge struct {
	nc      *jetstream.Client
	client  *processor.Client
	threads *jetstream.Bucket
	log     *slog.Logger
	// Identity returns the approver a request decides as ("" anonymous).
	Identity func(r *http.Request) string
	// Wait bounds how long one request waits for its pass; default 5 minutes.
	Wait time.Duration
}

// threadRecord is the thread index's value: the thread's latest run.
type threadRecord struct {
	ThreadID string `json:"threadId"`
	RunID    string `json:"runId"`
	Agent    string `json:"agent"`
}

// Provision creates the threads bucket through a client that has
// provisioned (`interlock provision`).
func Provision(ctx context.Context, nc *jetstream.Client) error {
	_, err := threadsBucket(ctx, nc)
	return err
}

func threadsBucket(ctx context.Context, nc *jetstream.Client) (*jetstream.Bucket, error) {
	return nc.Bucket(ctx, "threads", "Interlock AG-UI threads: the latest run of each", 0)
}

// New returns a bridge; it opens the threads bucket (a client that has
// provisioned creates it).
func New(ctx context.Context, nc *jetstream.Client, log *slog.Logger) (*Bridge, error) {
	threads, err := threadsBucket(ctx, nc)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Bridge{nc: nc, client: processor.NewClient(nc), threads: threads, log: log, Wait: 5 * time.Minute}, nil
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
}

func (s *stream) send(ev map[string]any) {
	if _, ok := ev["timestamp"]; !ok {
		ev["timestamp"] = time.Now().UnixMilli()
	}
	data, _ := json.Marshal(ev)
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.f.Flush()
}

func (s *stream) started() {
	s.send(map[string]any{"type": "RUN_STARTED", "threadId": s.input.ThreadID, "runId": s.input.RunID})
}

func (s *stream) fail(code, format string, args ...any) {
	s.send(map[string]any{"type": "RUN_ERROR", "message": fmt.Sprintf(format, args...), "code": code})
}

func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	var in RunAgentInput
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, subjects.MaxMessageSize)).Decode(&in)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, f: flusher, input: in}
	switch {
	case err != nil:
		s.fail(CodeBadInput, "the body is not a RunAgentInput: %v", err)
		return
	case in.ThreadID == "" || in.RunID == "":
		s.fail(CodeBadInput, "threadId and runId are required")
		return
	}
	agent := r.PathValue("agent")
	if err := subjects.ValidateToken("agent", agent); err != nil {
		s.fail(CodeBadInput, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), b.Wait)
	defer cancel()
	identity := ""
	if b.Identity != nil {
		identity = b.Identity(r)
	}
	thread, rec, err := b.latest(ctx, in.ThreadID)
	if err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	if len(in.Resume) > 0 {
		b.resume(ctx, s, thread, rec, identity)
		return
	}
	if rec != nil && !rec.Status.Terminal() {
		// Never abandon an open interrupt: a run without resume on a thread
		// that waits shows where the thread stands.
		b.follow(ctx, s, rec.RunID, rec.Pass, false)
		return
	}
	b.start(ctx, s, agent)
}

// latest returns the thread's latest run and its record (nil when none).
func (b *Bridge) latest(ctx context.Context, thread string) (*threadRecord, *subjects.Run, error) {
	raw, err := b.threads.Get(ctx, threadKey(thread))
	if errors.Is(err, jetstream.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var t threadRecord
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, nil, err
	}
	rec, err := b.client.Run(ctx, t.RunID)
	if errors.Is(err, processor.ErrRunNotFound) {
		return &t, nil, nil
	}
	return &t, rec, err
}

func (b *Bridge) start(ctx context.Context, s *stream, agent string) {
	run := s.input.RunID
	if subjects.ValidateToken("run id", run) != nil {
		run = uuid.Must(uuid.NewV7()).String()
	}
	t, _ := json.Marshal(threadRecord{ThreadID: s.input.ThreadID, RunID: run, Agent: agent})
	if err := b.threads.Put(ctx, threadKey(s.input.ThreadID), t); err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	input, _ := json.Marshal(s.input)
	f, err := b.subscribe(run)
	if err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	if _, err := b.client.Start(ctx, agent, json.RawMessage(input), processor.WithRunID(run),
		processor.WithThreadID(s.input.ThreadID)); err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	b.relay(ctx, s, f, run, 0)
}

// resume validates the whole batch against the thread's interrupted run,
// then decides every entry and streams the replay.
func (b *Bridge) resume(ctx context.Context, s *stream, thread *threadRecord, rec *subjects.Run, identity string) {
	if thread == nil || rec == nil {
		s.fail(CodeLostState, "no interrupted run is known for thread %q", s.input.ThreadID)
		return
	}
	pending := rec.Pending()
	if len(pending) == 0 {
		s.fail(CodeNotInterrupted, "the thread's latest run is %s and waits for nothing (decided elsewhere?); send a run without resume to see it", rec.Status)
		return
	}
	open := map[string]subjects.InterruptState{}
	for _, p := range pending {
		open[p.ID] = p
	}
	seen := map[string]bool{}
	now := time.Now()
	for _, e := range s.input.Resume {
		st, ok := open[e.InterruptID]
		switch {
		case seen[e.InterruptID]:
			s.fail(CodeDuplicateEntry, "interrupt %s is answered twice", e.InterruptID)
			return
		case !ok:
			s.fail(CodeUnknownInterrupt, "interrupt %s is not an open interrupt of the thread's latest run", e.InterruptID)
			return
		case e.Status != subjects.StatusResolved && e.Status != subjects.StatusCancelled:
			s.fail(CodeBadInput, "interrupt %s: status %q is not resolved or cancelled", e.InterruptID, e.Status)
			return
		case e.Status == subjects.StatusResolved && st.ExpiresAt != nil && !now.Before(*st.ExpiresAt):
			s.fail(CodeExpired, "interrupt %s expired at %s; it can be cancelled, not resolved", e.InterruptID, st.ExpiresAt.Format(time.RFC3339))
			return
		case e.Status == subjects.StatusResolved && len(st.ResponseSchema) > 0:
			payload := e.Payload
			if len(payload) == 0 {
				payload = []byte("null")
			}
			if err := processor.ValidatePayload(st.ResponseSchema, payload); err != nil {
				s.fail(CodeSchemaMismatch, "interrupt %s: payload does not satisfy responseSchema: %v", e.InterruptID, err)
				return
			}
		}
		seen[e.InterruptID] = true
	}
	for id := range open {
		if !seen[id] {
			s.fail(CodeMissingEntry, "interrupt %s is open and not answered: every open interrupt needs an entry", id)
			return
		}
	}
	f, err := b.subscribe(rec.RunID)
	if err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	for _, e := range s.input.Resume {
		req := processor.DecisionRequest{RunID: rec.RunID, InterruptID: e.InterruptID, Status: e.Status,
			Metadata: e.Metadata, Approver: identity, Via: "agui",
			DecisionID: "agui-" + threadKey(s.input.RunID+"\x00"+e.InterruptID)}
		if len(e.Payload) > 0 && string(e.Payload) != "null" {
			req.Payload = e.Payload
		}
		if _, err := b.client.Decide(ctx, req); err != nil {
			s.fail(CodeRejected, "interrupt %s: %v", e.InterruptID, err)
			return
		}
	}
	b.relay(ctx, s, f, rec.RunID, rec.Pass+1)
}

// follow streams a run that is already going: its current interrupts, or
// the pass under way.
func (b *Bridge) follow(ctx context.Context, s *stream, run string, pass int, _ bool) {
	f, err := b.subscribe(run)
	if err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	defer f.close()
	s.started()
	rec, err := b.client.Run(ctx, run)
	if err != nil {
		s.fail(CodeUnavailable, "%v", err)
		return
	}
	if rec.Status == subjects.RunSuspended {
		b.finish(s, rec)
		return
	}
	f.skipEvents = true // the pass under way already emitted; send its end
	b.relay(ctx, s, f, run, pass+1)
}

// feed gathers a run's AG-UI events and lifecycle events.
type feed struct {
	subs       []*jetstream.Subscription
	ch         chan feedItem
	once       sync.Once
	skipEvents bool
}

type feedItem struct {
	agui  map[string]any
	event *subjects.Event
}

func (f *feed) close() {
	f.once.Do(func() {
		for _, s := range f.subs {
			s.Unsubscribe()
		}
	})
}

func (b *Bridge) subscribe(run string) (*feed, error) {
	f := &feed{ch: make(chan feedItem, 1024)}
	aguiSubject, err := b.nc.Namespace().AGUI(run)
	if err != nil {
		return nil, err
	}
	sub, err := b.nc.Subscribe(aguiSubject, func(_ string, data []byte) {
		var ev map[string]any
		if json.Unmarshal(data, &ev) == nil {
			f.ch <- feedItem{agui: ev}
		}
	})
	if err != nil {
		return nil, err
	}
	f.subs = append(f.subs, sub)
	evSubject, _ := b.nc.Namespace().RunEvents(run)
	sub, err = b.nc.Subscribe(evSubject, func(_ string, data []byte) {
		var ev subjects.Event
		if json.Unmarshal(data, &ev) == nil {
			f.ch <- feedItem{event: &ev}
		}
	})
	if err != nil {
		f.close()
		return nil, err
	}
	f.subs = append(f.subs, sub)
	return f, nil
}

// relay sends the AG-UI events of pass (and later passes, if it ends
// before anyone is asked) until the run suspends, completes or fails.
func (b *Bridge) relay(ctx context.Context, s *stream, f *feed, run string, pass int) {
	ended := -1 // the last pass whose events are all sent
	outcome := map[int]subjects.EventType{}
	for {
		for p := pass; p <= ended; p++ {
			if t, ok := outcome[p]; ok && t != subjects.EventResumed {
				rec, err := b.client.Run(ctx, run)
				if err != nil {
					s.fail(CodeUnavailable, "%v", err)
					return
				}
				b.finish(s, rec)
				return
			}
		}
		select {
		case <-ctx.Done():
			s.fail(CodeUnavailable, "the run did not report back in time; it goes on, and the next request on the thread shows it")
			return
		case it := <-f.ch:
			switch {
			case it.agui != nil && it.agui["type"] == processor.PassEndEvent:
				if p, ok := it.agui["pass"].(float64); ok && int(p) > ended {
					ended = int(p)
				}
			case it.agui != nil && !f.skipEvents:
				s.send(it.agui)
			case it.event != nil:
				switch it.event.Type {
				case subjects.EventSuspended, subjects.EventCompleted, subjects.EventFailed:
					outcome[it.event.Pass] = it.event.Type
					if f.skipEvents && it.event.Pass >= pass {
						ended = max(ended, it.event.Pass)
					}
				}
			}
		}
	}
}

// finish ends the stream from the run's record.
func (b *Bridge) finish(s *stream, rec *subjects.Run) {
	done := map[string]any{"type": "RUN_FINISHED", "threadId": s.input.ThreadID, "runId": s.input.RunID}
	switch rec.Status {
	case subjects.RunSuspended:
		if len(s.input.State) > 0 {
			s.send(map[string]any{"type": "STATE_SNAPSHOT", "snapshot": json.RawMessage(s.input.State)})
		}
		if len(s.input.Messages) > 0 {
			s.send(map[string]any{"type": "MESSAGES_SNAPSHOT", "messages": json.RawMessage(s.input.Messages)})
		}
		var interrupts []map[string]any
		for _, in := range rec.Pending() {
			interrupts = append(interrupts, toAGUI(in))
		}
		done["outcome"] = map[string]any{"type": "interrupt", "interrupts": interrupts}
	case subjects.RunCompleted:
		if len(rec.Result) > 0 {
			done["result"] = json.RawMessage(rec.Result)
		}
		done["outcome"] = map[string]any{"type": "success"}
	default:
		s.fail(CodeRunFailed, "%s", rec.Error)
		return
	}
	s.send(done)
}

// toAGUI maps an interrupt to an AG-UI Interrupt; the interrupt's approvers
// and Interlock's run id travel in its metadata.
func toAGUI(in subjects.InterruptState) map[string]any {
	out := map[string]any{"id": in.ID, "reason": in.Reason}
	if in.Message != "" {
		out["message"] = in.Message
	}
	if in.ToolCallID != "" {
		out["toolCallId"] = in.ToolCallID
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
	if len(meta) > 0 {
		out["metadata"] = meta
	}
	return out
}

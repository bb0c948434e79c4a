package processor

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Client starts runs, decides interrupts and reads run records. It needs no
// coordinator or worker in the same process.
type Client struct {
	c       *jetstream.Client
	store   store.Store
	replies replies
	// decideTimeout and waitTimeout bound Decide and Wait when their
	// context has no deadline.
	decideTimeout, waitTimeout time.Duration
	// onDiskAt is when the runs bucket was last found on disk (unix ns),
	// where a record missing is one never written (startable).
	onDiskAt atomic.Int64
}

// onDiskFor is how long a Client takes the runs bucket for on disk once it
// found it there: a deployment may move its records to memory.
const onDiskFor = 10 * time.Second

// Default deadlines of the Client calls that wait, applied when the
// caller's context has none.
const (
	// DefaultDecideTimeout bounds Decide: publishing the decision and
	// waiting for the coordinator's verdict.
	DefaultDecideTimeout = 30 * time.Second
	// DefaultWaitTimeout bounds Wait. A run that waits for a person can
	// wait far longer: give Wait a context with the deadline you mean.
	DefaultWaitTimeout = 10 * time.Minute
)

// ClientOption adjusts a Client.
type ClientOption func(*Client)

// WithDecideTimeout replaces DefaultDecideTimeout; zero or less keeps it.
func WithDecideTimeout(d time.Duration) ClientOption {
	return func(cl *Client) {
		if d > 0 {
			cl.decideTimeout = d
		}
	}
}

// WithWaitTimeout replaces DefaultWaitTimeout; zero or less keeps it.
func WithWaitTimeout(d time.Duration) ClientOption {
	return func(cl *Client) {
		if d > 0 {
			cl.waitTimeout = d
		}
	}
}

// withDefault bounds ctx by d unless it has a deadline already.
func withDefault(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// replies is one subscription shared by every Decide of a client: a
// verdict's reply subject ends in its decision id's digest.
type replies struct {
	mu      sync.Mutex
	prefix  string
	sub     *jetstream.Subscription
	waiting map[string]chan subjects.Verdict
}

func replyToken(decisionID string) string {
	sum := sha256.Sum256([]byte(decisionID))
	return hex.EncodeToString(sum[:12])
}

// await returns the reply subject for decisionID and where its verdict
// arrives; the first call subscribes.
func (r *replies) await(c *jetstream.Client, decisionID string) (string, chan subjects.Verdict, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		prefix := c.NewInbox()
		sub, err := c.Subscribe(prefix+".*", func(subject string, data []byte) {
			var v subjects.Verdict
			if json.Unmarshal(data, &v) != nil {
				return
			}
			r.mu.Lock()
			ch := r.waiting[subject[len(prefix)+1:]]
			r.mu.Unlock()
			if ch != nil {
				select {
				case ch <- v:
				default:
				}
			}
		})
		if err != nil {
			return "", nil, err
		}
		r.prefix, r.sub, r.waiting = prefix, sub, map[string]chan subjects.Verdict{}
	}
	ch := make(chan subjects.Verdict, 1)
	r.waiting[replyToken(decisionID)] = ch
	return r.prefix + "." + replyToken(decisionID), ch, nil
}

func (r *replies) forget(decisionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, replyToken(decisionID))
}

// NewClient returns a client working through c.
func NewClient(c *jetstream.Client, opts ...ClientOption) *Client {
	cl := &Client{c: c, store: store.NewJetStream(c), decideTimeout: DefaultDecideTimeout, waitTimeout: DefaultWaitTimeout}
	for _, o := range opts {
		o(cl)
	}
	return cl
}

// Close releases the client's reply subscription.
func (cl *Client) Close() {
	cl.replies.mu.Lock()
	defer cl.replies.mu.Unlock()
	if cl.replies.sub != nil {
		cl.replies.sub.Unsubscribe()
		cl.replies.sub = nil
	}
}

// StartOption adjusts one Start call.
type StartOption func(*startCall) error

type startCall struct {
	subjects.Work
	traceParent string
	requester   string
}

// WithRequester starts the run as requester, on
// <prefix>.start.<agent>.<requester>: the publishing NATS user must be
// allowed that subject (a user starting as itself, or the gateway for its
// session's identity). The run records requester, whom a decision policy
// can exclude from approving it.
func WithRequester(requester string) StartOption {
	return func(s *startCall) error {
		if err := subjects.ValidateToken("requester", requester); err != nil {
			return err
		}
		s.requester = requester
		return nil
	}
}

// WithTraceParent continues a W3C trace: the run's messages carry it.
func WithTraceParent(tp string) StartOption {
	return func(s *startCall) error { s.traceParent = tp; return nil }
}

// WithRunID sets the run id instead of a fresh UUIDv7. It must be a valid
// subject token.
func WithRunID(id string) StartOption {
	return func(s *startCall) error {
		if err := subjects.ValidateToken("run id", id); err != nil {
			return err
		}
		s.RunID = id
		return nil
	}
}

// WithThreadID groups the run into a conversation thread.
func WithThreadID(id string) StartOption {
	return func(s *startCall) error { s.ThreadID = id; return nil }
}

// Start queues the first pass of a run of agent with input (any value that
// marshals to JSON) and returns the run id. The call's own retries (through
// a leader election) queue it once; once the run has a record, a start for
// its id fails with ErrRunExists (so a retried Start whose first attempt
// went through may see it: the run is under way). Two Start calls for one
// run id before it has a record queue two first passes: the first outcome
// recorded is the run's, the other is ignored as stale (and audited).
func (cl *Client) Start(ctx context.Context, agent string, input any, opts ...StartOption) (string, error) {
	call := startCall{Work: subjects.Work{PassRef: subjects.PassRef{Version: subjects.Version, Agent: agent}}}
	for _, o := range opts {
		if err := o(&call); err != nil {
			return "", err
		}
	}
	w := call.Work
	if w.RunID != "" {
		// A run is started once: a start for an existing run would run its
		// first pass again with other input.
		if err := cl.startable(ctx, w.RunID); err != nil {
			return "", err
		}
	}
	if w.RunID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return "", err
		}
		w.RunID = id.String()
	}
	if input != nil {
		raw, err := json.Marshal(input)
		if err != nil {
			return "", fmt.Errorf("input: %w", err)
		}
		w.Input = raw
	}
	data, err := json.Marshal(w)
	if err != nil {
		return "", err
	}
	if _, err := subjects.DecodeWork(data); err != nil {
		return "", err
	}
	subject, err := cl.c.Namespace().Start(w.Agent)
	if call.requester != "" {
		subject, err = cl.c.Namespace().StartAs(w.Agent, call.requester)
	}
	if err != nil {
		return "", err
	}
	// The id has a nonce of this call's: nobody can store a message with it
	// first and have this start dropped as a duplicate.
	m := jetstream.OutMsg{Subject: subject, Data: data, MsgID: subjects.StartMsgID(w.RunID, subjects.Nonce()),
		Header: jetstream.Header{trace.Header: {trace.Child(call.traceParent)}}}
	// Deduplicated by its message id, so safe to repeat through an election.
	return w.RunID, jetstream.RetryUnavailable(ctx, func(ctx context.Context) error { return cl.c.PublishAll(ctx, m) })
}

// DecisionRequest is what an approver decides.
type DecisionRequest struct {
	RunID       string
	InterruptID string
	Status      subjects.Status
	// Payload is any value that marshals to JSON but null; a json.RawMessage
	// is sent as is.
	Payload  any
	Metadata map[string]any
	// Approver is who decides, a token ([A-Za-z0-9_-]); the decision is
	// published on the resume subject for that identity. Empty: anonymous,
	// which can decide only interrupts that name no approvers.
	Approver string
	Comment  string
	// DecisionID is the dedup key; default a fresh UUIDv7. Send a decision
	// again with the same id and it is applied once.
	DecisionID string
	// Via names the path for the audit trail; default "sdk".
	Via string
	// CallDigest is the digest of the call this decision approves, as the
	// approver saw it (protocol version 2): a vote cast on other arguments
	// than the interrupt's is refused (call_mismatch).
	CallDigest string
	// Arguments are edited arguments (protocol version 2): the decision
	// approves the interrupt's tool with these.
	Arguments any
	// Withdraw takes back the approver's open vote (status withdrawn),
	// where the interrupt's policy allows changes; Status is ignored.
	Withdraw bool
}

// Decide publishes a decision on the resume subject and waits for the
// coordinator's verdict. A rejected decision returns the verdict and an
// error matching ErrRejected (a *RejectionError).
//
// When ctx has no deadline, the whole call is bounded by DefaultDecideTimeout
// (or WithDecideTimeout). A decision already published when time runs out
// stays stored and is still applied once a coordinator handles it.
func (cl *Client) Decide(ctx context.Context, req DecisionRequest) (subjects.Verdict, error) {
	ctx, cancel := withDefault(ctx, cl.decideTimeout)
	defer cancel()
	d := subjects.Decision{Version: subjects.Version, DecisionID: req.DecisionID, InterruptID: req.InterruptID,
		Status: req.Status, Approver: req.Approver, Comment: req.Comment, CallDigest: req.CallDigest}
	if req.Withdraw {
		d.Status = subjects.StatusWithdrawn
	}
	if req.Arguments != nil {
		raw, err := json.Marshal(req.Arguments)
		if err != nil {
			return subjects.Verdict{}, fmt.Errorf("arguments: %w", err)
		}
		d.Arguments = raw
	}
	if d.DecisionID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return subjects.Verdict{}, err
		}
		d.DecisionID = id.String()
	}
	if req.Payload != nil {
		raw, err := json.Marshal(req.Payload)
		if err != nil {
			return subjects.Verdict{}, fmt.Errorf("payload: %w", err)
		}
		d.Payload = raw
	}
	if req.Metadata != nil {
		raw, err := json.Marshal(req.Metadata)
		if err != nil {
			return subjects.Verdict{}, fmt.Errorf("metadata: %w", err)
		}
		d.Metadata = raw
	}
	subject, err := cl.c.Namespace().Resume(req.RunID)
	if req.Approver != "" {
		subject, err = cl.c.Namespace().ResumeAs(req.RunID, req.Approver)
	}
	if err != nil {
		return subjects.Verdict{}, err
	}
	data, err := json.Marshal(subjects.Versioned(&d))
	if err != nil {
		return subjects.Verdict{}, err
	}
	if _, err := subjects.DecodeDecision(data); err != nil {
		return subjects.Verdict{}, err
	}
	via := req.Via
	if via == "" {
		via = "sdk"
	}
	h := jetstream.Header{jetstream.HeaderVia: {via}}
	verdicts, stop, err := cl.awaitVerdict(req.RunID, req.Approver, d.DecisionID, h)
	if err != nil {
		return subjects.Verdict{}, err
	}
	defer stop()
	for rejected := 0; ; rejected++ {
		var ack jetstream.PubAck
		err := jetstream.RetryUnavailable(ctx, func(ctx context.Context) error { // deduplicated by the attempt's id
			var err error
			ack, err = cl.c.Publish(ctx, subject, data, subjects.DecisionAttemptMsgID(req.Approver, d.DecisionID, rejected, data), h)
			return err
		})
		if err != nil {
			return subjects.Verdict{}, err
		}
		if !ack.Duplicate {
			break
		}
		// The stream already holds this attempt (this very body), so the
		// coordinator will not see this copy: answer with what became of
		// the one it holds, which the ack names. If it was rejected, this
		// is a new attempt, which no rejection may swallow.
		v, err := cl.earlierVerdict(ctx, req.RunID, ack.Sequence)
		if v.Outcome != subjects.OutcomeRejected {
			return v, err
		}
	}
	select {
	case v := <-verdicts:
		return v, verdictErr(v)
	case <-ctx.Done():
		return subjects.Verdict{}, fmt.Errorf("decision %s is stored; no verdict yet (is a coordinator running?): %w",
			d.DecisionID, ctx.Err())
	}
}

// awaitVerdict arranges for the verdict of decision id, published as
// approver, to arrive on the returned channel until stop. The coordinator
// replies only under the approver's own inbox prefix: a client connected
// with that prefix names a reply subject in h; any other (the gateway,
// deciding for its users) watches the run's verdict events instead.
func (cl *Client) awaitVerdict(run, approver, id string, h jetstream.Header) (<-chan subjects.Verdict, func(), error) {
	if strings.HasPrefix(cl.c.NewInbox(), subjects.InboxPrefix(approver)+".") {
		inbox, ch, err := cl.replies.await(cl.c, id)
		if err != nil {
			return nil, nil, err
		}
		h[jetstream.HeaderReplyTo] = []string{inbox}
		return ch, func() { cl.replies.forget(id) }, nil
	}
	filter, err := cl.c.Namespace().RunEvents(run)
	if err != nil {
		return nil, nil, err
	}
	// A decision for a run that does not exist is rejected under the
	// no-run token, its verdict naming the run it claimed.
	noRun, err := cl.c.Namespace().Events(subjects.NoRun, subjects.EventDecisionRejected)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan subjects.Verdict, 1)
	deliver := func(subject string, data []byte) {
		ev, err := subjects.StoredEvent(cl.c.Namespace(), subject, data)
		if err != nil || ev.Verdict == nil || ev.Verdict.DecisionID != id || ev.Verdict.Approver != approver ||
			ev.Verdict.RunID != run {
			return
		}
		select {
		case ch <- *ev.Verdict:
		default:
		}
	}
	sub, err := cl.c.Subscribe(filter, deliver)
	if err != nil {
		return nil, nil, err
	}
	subNoRun, err := cl.c.Subscribe(noRun, deliver)
	if err != nil {
		sub.Unsubscribe()
		return nil, nil, err
	}
	return ch, func() { sub.Unsubscribe(); subNoRun.Unsubscribe() }, nil
}

func verdictErr(v subjects.Verdict) error {
	if v.Outcome == subjects.OutcomeRejected {
		return &RejectionError{Verdict: v}
	}
	return nil
}

// earlierVerdict is the verdict on the decision message the decisions
// stream holds at seq (a publish answered as a duplicate names it), as
// the coordinator recorded it: the events of run, or those of the no-run
// token for a run that does not exist. The coordinator files each under a
// message id naming the decision's sequence, and only it writes there. It
// waits until the verdict is recorded. An accepted (or duplicate) verdict
// is returned as a duplicate: this copy changed nothing.
func (cl *Client) earlierVerdict(ctx context.Context, run string, seq uint64) (subjects.Verdict, error) {
	ns := cl.c.Namespace()
	runEvents, err := ns.RunEvents(run)
	if err != nil {
		return subjects.Verdict{}, err
	}
	noRun, err := ns.Events(subjects.NoRun, subjects.EventDecisionRejected)
	if err != nil {
		return subjects.Verdict{}, err
	}
	seqMark := ":seq" + strconv.FormatUint(seq, 10) + ":"
	// Each wake reads only the events recorded since the last one.
	cursors := map[string]uint64{runEvents: 0, noRun: 0}
	for {
		for _, filter := range []string{runEvents, noRun} {
			for {
				msgs, err := cl.c.Messages(ctx, jetstream.StreamEvents, filter, cursors[filter]+1, 1024)
				if err != nil {
					return subjects.Verdict{}, err
				}
				for _, m := range msgs {
					cursors[filter] = m.Sequence
					if jetstream.CheckPublished(m.Header) != nil {
						continue // an answer the server stored here for another user
					}
					// decision_<outcome>, or vote_recorded for a vote.
					if id := m.Header.Get(jetstream.HeaderMsgID); !strings.Contains(id, seqMark+"decision_") &&
						!strings.Contains(id, seqMark+string(subjects.EventVoteRecorded)) {
						continue
					}
					ev, err := subjects.StoredEvent(ns, m.Subject, m.Data)
					if err != nil || ev.Verdict == nil {
						continue
					}
					v := *ev.Verdict
					if v.Outcome != subjects.OutcomeRejected {
						v.Outcome, v.Replay, v.At = subjects.OutcomeDuplicate, false, time.Now().UTC()
						v.Detail = "this decision was already accepted; nothing changed"
					}
					return v, verdictErr(v)
				}
				if len(msgs) < 1024 {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return subjects.Verdict{}, fmt.Errorf("this decision was sent before (stream sequence %d); its verdict is not recorded yet: %w",
				seq, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Run returns run's record, or an error matching ErrRunNotFound.
func (cl *Client) Run(ctx context.Context, run string) (*subjects.Run, error) {
	if err := subjects.ValidateToken("run id", run); err != nil {
		return nil, err
	}
	r, _, err := cl.store.Run(ctx, run)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s (a run has a record once its first pass ends)", ErrRunNotFound, run)
	}
	return r, err
}

// Pending lists every interrupt waiting for a decision, oldest first. It
// reads the pending index, so it costs what is pending, not every run.
func (cl *Client) Pending(ctx context.Context) ([]subjects.PendingInterrupt, error) {
	return store.AllPending(ctx, cl.store)
}

// PendingPage returns up to limit interrupts waiting for a decision after
// cursor after (0: from the start), in the order they entered the pending
// index, and the cursor of the next page (0: none follows). Entries added
// meanwhile come on later pages, removed ones are left out, none is
// skipped; an escalated entry moves to the end. It costs what it returns,
// however many are pending.
func (cl *Client) PendingPage(ctx context.Context, after uint64, limit int) ([]subjects.PendingInterrupt, uint64, error) {
	return cl.store.PendingPage(ctx, after, limit)
}

// Events returns run's lifecycle and audit events, oldest first.
func (cl *Client) Events(ctx context.Context, run string) ([]subjects.Event, error) {
	evs, _, err := cl.store.Events(ctx, run, 0)
	return evs, err
}

// Runs returns every run record, least recently updated first. It reads
// every record: an operator's tool, not a hot path.
func (cl *Client) Runs(ctx context.Context) ([]*subjects.Run, error) { return cl.store.Runs(ctx) }

// WorkBacklog lists, by agent name, the agents with work waiting.
func (cl *Client) WorkBacklog(ctx context.Context) ([]AgentWork, error) {
	return store.WorkBacklog(ctx, cl.c)
}

// startable says whether a start may name run: it has no record and had
// none, as far as its trail tells.
func (cl *Client) startable(ctx context.Context, run string) error {
	trail, _ := cl.store.(store.Trail)
	_, err := cl.Run(ctx, run)
	switch {
	case err == nil:
		return fmt.Errorf("run %s: %w", run, ErrRunExists)
	case errors.Is(err, ErrRunNotFound) && trail != nil && !cl.onDisk(ctx):
		// Records kept in memory are missing from the bucket after a
		// server restart until the coordinator puts them back.
		if recorded, rerr := trail.Recorded(ctx, run); rerr != nil || recorded {
			return cmp.Or(rerr, fmt.Errorf("run %s: %w (its record is being put back)", run, ErrRunExists))
		}
		return nil
	case errors.Is(err, ErrRunNotFound):
		return nil
	case errors.Is(err, store.ErrForeignRecord) && trail != nil:
		// Its key holds what the coordinator did not write: an answer
		// stored there before the run's first record, which that record
		// replaces, unless the run was recorded (and the answer replaced
		// its record), or may have been.
		if recorded, rerr := trail.MayHaveRecord(ctx, run); rerr != nil || recorded {
			return cmp.Or(rerr, err)
		}
		return nil
	}
	return err
}

// onDisk reports whether the runs bucket keeps its records on disk, read
// at most every onDiskFor: a bucket in memory, or one this client may not
// read the configuration of, is not.
func (cl *Client) onDisk(ctx context.Context) bool {
	if time.Since(time.Unix(0, cl.onDiskAt.Load())) < onDiskFor {
		return true
	}
	mem, err := cl.c.BucketInMemory(ctx, jetstream.RunsBucket)
	if err != nil || mem {
		return false
	}
	cl.onDiskAt.Store(time.Now().UnixNano())
	return true
}

// Wait returns run's record once done reports true for it, re-reading the
// record whenever an event of the run is published. When ctx has no
// deadline it gives up after DefaultWaitTimeout (or WithWaitTimeout),
// returning the last record read and an error wrapping
// context.DeadlineExceeded.
func (cl *Client) Wait(ctx context.Context, run string, done func(*subjects.Run) bool) (*subjects.Run, error) {
	ctx, cancel := withDefault(ctx, cl.waitTimeout)
	defer cancel()
	filter, err := cl.c.Namespace().RunEvents(run)
	if err != nil {
		return nil, err
	}
	changed := make(chan struct{}, 1)
	sub, err := cl.c.Subscribe(filter, func(string, []byte) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	// Events are published after the record is written, and a missed event
	// is covered by the periodic re-read.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// last is the last record read; refused, why the last read found none.
	var last *subjects.Run
	var refused error
	waited := func() error {
		if refused != nil {
			return fmt.Errorf("run %s: waited long enough: %w (last read: %w)", run, ctx.Err(), refused)
		}
		return fmt.Errorf("run %s: waited long enough: %w", run, ctx.Err())
	}
	for {
		r, err := cl.Run(ctx, run)
		switch {
		case err == nil:
			if last, refused = r, nil; done(r) {
				return r, nil
			}
		case errors.Is(err, ErrRunNotFound), errors.Is(err, store.ErrForeignRecord):
			// A key holding what the coordinator did not write may be a
			// run's before its first record, which replaces it: waited on
			// as none.
			refused = err
		case ctx.Err() != nil:
			return last, waited() // the deadline ended the read
		default:
			return nil, err
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return last, waited()
		}
	}
}

// Finished reports whether r completed or failed; for Wait.
func Finished(r *subjects.Run) bool { return r.Status.Terminal() }

// Suspended reports whether r waits for decisions; for Wait.
func Suspended(r *subjects.Run) bool { return r.Status == subjects.RunSuspended }

package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/processor/store/memstore"
	"github.com/interlockhq/interlock/subjects"
)

// The coordinator's table tests run its handlers on deliveries built here,
// over memstore and a fake of its NATS side: no server, each case in
// milliseconds. What needs a server (consuming, the topology watch,
// processes, clusters, real timers, the SDK round trip) is tested in
// package processor.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the tests' clock at the start.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fakeNATS is the coordinator's NATS side in memory: it keeps the verdict
// replies and counts the connection drops of fault points.
type fakeNATS struct {
	mu      sync.Mutex
	replies map[string][]subjects.Verdict
	closed  int
}

func (f *fakeNATS) Namespace() subjects.Namespace { return subjects.Default() }

func (f *fakeNATS) Notify(subject string, data []byte) error {
	var v subjects.Verdict
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replies == nil {
		f.replies = map[string][]subjects.Verdict{}
	}
	f.replies[subject] = append(f.replies[subject], v)
	return nil
}

func (f *fakeNATS) IDSigner(context.Context) (*jetstream.IDSigner, error) {
	return jetstream.NewIDSigner([]byte("table-test-key")), nil
}

func (f *fakeNATS) Close() {
	f.mu.Lock()
	f.closed++
	f.mu.Unlock()
}

func (f *fakeNATS) repliesTo(subject string) []subjects.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.replies[subject])
}

// env is one coordinator over a fresh memstore.
type env struct {
	t    *testing.T
	co   *Coordinator
	st   *memstore.Store
	nats *fakeNATS
	ns   subjects.Namespace
	now  time.Time
	seq  uint64
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{t: t, st: memstore.New(), nats: &fakeNATS{}, ns: subjects.Default(), now: t0}
	cfg.Store, cfg.NATS = e.st, e.nats
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Now = func() time.Time { return e.now }
	e.co = New(nil, cfg)
	ids, err := e.nats.IDSigner(context.Background())
	require.NoError(t, err)
	e.co.ids = ids
	return e
}

// withFault makes the coordinator abandon its message at the points h
// picks.
func (e *env) withFault(h fault.Hook) *env { e.co.fault = h; return e }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// msg is a delivery of body (JSON-encoded unless it is []byte) on subject,
// at the next stream sequence.
func (e *env) msg(subject string, body any, h jetstream.Header) *jetstream.Delivery {
	e.t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(body)
		require.NoError(e.t, err)
	}
	e.seq++
	if h == nil {
		h = jetstream.Header{}
	}
	if _, ok := h[jetstream.HeaderMsgID]; !ok {
		h[jetstream.HeaderMsgID] = []string{fmt.Sprintf("test:%d", e.seq)} // a client's publish carries one
	}
	return &jetstream.Delivery{Subject: subject, Data: data, Header: h, Sequence: e.seq, Deliveries: 1, Time: e.now}
}

// again is m delivered once more.
func again(m *jetstream.Delivery) *jetstream.Delivery {
	cp := *m
	cp.Deliveries++
	return &cp
}

func (e *env) must(s string, err error) string {
	e.t.Helper()
	require.NoError(e.t, err)
	return s
}

const agent = "refunds"

func ref(run string, pass int) subjects.PassRef {
	return subjects.PassRef{Version: subjects.Version, RunID: run, Agent: agent, Pass: pass}
}

// suspension is the delivery of run's pass suspending on ins; it is in
// the runs stream from now on (the store's LastSuspension).
func (e *env) suspension(run string, pass int, ins ...subjects.Interrupt) *jetstream.Delivery {
	m := e.msg(e.must(e.ns.Suspended(agent, run)), subjects.Suspension{PassRef: ref(run, pass), Interrupts: ins}, nil)
	e.st.Suspended(run, m.Sequence)
	return m
}

// suspend records run's suspension on ins.
func (e *env) suspend(run string, pass int, ins ...subjects.Interrupt) {
	e.t.Helper()
	require.NoError(e.t, e.co.handleOutcome(ctx(e.t), e.suspension(run, pass, ins...)))
}

func (e *env) completion(run string, pass int) *jetstream.Delivery {
	return e.msg(e.must(e.ns.Completed(agent, run)), subjects.Completion{PassRef: ref(run, pass), Result: json.RawMessage(`{"ok":true}`)}, nil)
}

// decision is the delivery of d on run's resume subject as approver (""
// anonymous), asking for the verdict on replyTo when it is set.
func (e *env) decision(run, approver string, d subjects.Decision, replyTo string) *jetstream.Delivery {
	subject := e.must(e.ns.Resume(run))
	if approver != "" {
		subject = e.must(e.ns.ResumeAs(run, approver))
	}
	if d.Version == 0 {
		d.Version = subjects.Version
	}
	h := jetstream.Header{}
	if replyTo != "" {
		h[jetstream.HeaderReplyTo] = []string{replyTo}
	}
	return e.msg(subject, d, h)
}

func resolve(id, interrupt string, payload string) subjects.Decision {
	d := subjects.Decision{DecisionID: id, InterruptID: interrupt, Status: subjects.StatusResolved}
	if payload != "" {
		d.Payload = json.RawMessage(payload)
	}
	return d
}

func cancelled(id, interrupt string) subjects.Decision {
	return subjects.Decision{DecisionID: id, InterruptID: interrupt, Status: subjects.StatusCancelled}
}

// decide handles d and requires that it was handled to the end.
func (e *env) decide(run, approver string, d subjects.Decision) {
	e.t.Helper()
	require.NoError(e.t, e.co.handleDecision(ctx(e.t), e.decision(run, approver, d, "")))
}

// events are run's events.
func (e *env) events(run string) []subjects.Event {
	e.t.Helper()
	evs, _, err := e.st.Events(ctx(e.t), run, 0)
	require.NoError(e.t, err)
	return evs
}

// eventsOf are run's events of type typ.
func (e *env) eventsOf(run string, typ subjects.EventType) []subjects.Event {
	e.t.Helper()
	var out []subjects.Event
	for _, ev := range e.events(run) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// about returns the events of run and of no run recorded about the input
// on subject.
func (e *env) about(run, subject string) []subjects.Event {
	var out []subjects.Event
	for _, r := range slices.Compact([]string{run, subjects.NoRun}) {
		for _, ev := range e.events(r) {
			if ev.Subject == subject {
				out = append(out, ev)
			}
		}
	}
	return out
}

// verdictOf is the verdict recorded last for a decision on m's subject.
func (e *env) verdictOf(run string, m *jetstream.Delivery) *subjects.Verdict {
	e.t.Helper()
	var last *subjects.Verdict
	for _, ev := range e.about(run, m.Subject) {
		if ev.Verdict != nil && strings.HasPrefix(string(ev.Type), "decision_") {
			last = ev.Verdict
		}
	}
	require.NotNil(e.t, last, "no verdict recorded for the decision on %s", m.Subject)
	return last
}

func (e *env) record(run string) *subjects.Run {
	e.t.Helper()
	rec, _, err := e.st.Run(ctx(e.t), run)
	require.NoError(e.t, err)
	return rec
}

// messages are the committed messages outside the store on subjects
// starting with the namespace's kind.
func (e *env) messages(kind subjects.Kind) []jetstream.OutMsg {
	prefix := strings.TrimSuffix(e.ns.All(kind), ">")
	var out []jetstream.OutMsg
	for _, m := range e.st.Messages() {
		if strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// timer is the due delivery of the timer of kind scheduled for run's
// interrupt.
func (e *env) timer(run, interrupt string, kind subjects.TimerKind) *jetstream.Delivery {
	e.t.Helper()
	for _, m := range e.messages(subjects.KindTimers) {
		var t subjects.Timer
		require.NoError(e.t, json.Unmarshal(m.Data, &t))
		if t.RunID == run && t.InterruptID == interrupt && t.Kind == kind {
			// As the server's scheduler fires it: onto its target, naming
			// the schedule.
			return e.msg(m.Header["Nats-Schedule-Target"][0], m.Data, jetstream.Header{jetstream.HeaderScheduler: {m.Subject}})
		}
	}
	e.t.Fatalf("no %s timer scheduled for %s/%s", kind, run, interrupt)
	return nil
}

// state is what a coordinator leaves behind, for comparing a run with
// crashes against one without: the records, the pending index, every
// event (with its detail) and every message, each by what it is.
type state struct {
	Runs     []string
	Pending  []string
	Events   []string
	Messages []string
}

func (e *env) state(runs ...string) state {
	e.t.Helper()
	var s state
	for _, run := range runs {
		rec := e.record(run)
		var decided []string
		for _, in := range rec.Interrupts {
			if in.Decision != nil {
				decided = append(decided, in.ID+"="+string(in.Decision.Status))
			}
		}
		s.Runs = append(s.Runs, run+" "+string(rec.Status)+" pass "+strconv.Itoa(rec.Pass)+" "+strings.Join(decided, ","))
		for _, ev := range e.events(run) {
			s.Events = append(s.Events, run+" "+string(ev.Type)+" "+string(ev.Code)+" "+strings.Join(ev.InterruptIDs, ",")+" "+ev.Detail)
		}
	}
	pending, err := store.AllPending(ctx(e.t), e.st)
	require.NoError(e.t, err)
	for _, p := range pending {
		s.Pending = append(s.Pending, p.RunID+"/"+p.ID+" escalations "+strconv.Itoa(p.Escalations))
	}
	for _, m := range e.st.Messages() {
		s.Messages = append(s.Messages, m.Subject+" "+m.MsgID)
	}
	sort.Strings(s.Events)
	sort.Strings(s.Messages)
	return s
}

// handleUntilDone delivers m to handle again while the coordinator
// abandons it at a fault point (a redelivery after the crash), and
// returns the handler's last answer.
func handleUntilDone(t *testing.T, handle jetstream.Handler, m *jetstream.Delivery) error {
	t.Helper()
	for range 10 {
		err := handle(ctx(t), m)
		if !errors.Is(err, errAbandoned) {
			return err
		}
		m = again(m)
	}
	t.Fatal("still abandoned after 10 deliveries")
	return nil
}

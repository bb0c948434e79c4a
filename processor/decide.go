package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// rejection is a decision refused by a rule.
type rejection struct {
	code   subjects.Code
	detail string
}

func (r *rejection) Error() string { return string(r.code) + ": " + r.detail }

func reject(code subjects.Code, format string, args ...any) *rejection {
	return &rejection{code: code, detail: fmt.Sprintf(format, args...)}
}

// origin is the input a verdict answers: its subject, the dedup key of the
// events about it, and where to send the reply.
type origin struct {
	subject  string
	key      string
	replyTo  string
	via      string
	approver string
}

func originOf(m *jetstream.Msg) origin {
	return origin{subject: m.Subject, key: "seq" + strconv.FormatUint(m.Sequence, 10),
		replyTo: m.Header.Get(jetstream.HeaderReplyTo), via: truncate(m.Header.Get(jetstream.HeaderVia), 32)}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (co *Coordinator) handleDecision(ctx context.Context, m *jetstream.Msg) error {
	defer co.metrics.timed("decision", time.Now())
	o := originOf(m)
	addr, err := co.ns.Parse(m.Subject)
	if err == nil && addr.Kind != subjects.KindResume {
		err = fmt.Errorf("%w: %s is not a resume subject", subjects.ErrInvalidSubject, m.Subject)
	}
	if err != nil {
		// Audited under the run the subject names, when there is such a run.
		run := subjects.NoRun
		if r, ok := co.ns.ResumeRun(m.Subject); ok {
			if rec, _, lerr := co.load(ctx, r); lerr != nil {
				return lerr
			} else if rec != nil {
				run = r
			}
		}
		return co.verdict(ctx, o, subjects.Decision{}, run, reject(subjects.CodeInvalidSubject, "%v", err), false)
	}
	o.approver = addr.Approver
	d, err := subjects.DecodeDecision(m.Data)
	if err != nil {
		return co.verdict(ctx, o, d, addr.Run, reject(subjects.CodeOf(err), "%v", err), false)
	}
	// The identity is the subject's approver token, which NATS permissions
	// bind to the publishing user; the body cannot claim another.
	identity := addr.Approver
	if identity != "" && d.Approver != "" && d.Approver != identity {
		return co.verdict(ctx, o, d, addr.Run, reject(subjects.CodeNotAllowed,
			"published as %s but the body names approver %s", identity, d.Approver), false)
	}
	if identity != "" {
		d.Approver = identity
	}
	for range maxCASAttempts {
		rec, rev, err := co.load(ctx, addr.Run)
		if err != nil {
			return err
		}
		i, rej := co.check(rec, d, identity)
		if rej == errNoop {
			return co.publishVerdict(ctx, o, rec.Agent, rec.Interrupts[i].Pass, subjects.Verdict{Version: subjects.Version,
				DecisionID: d.DecisionID, RunID: rec.RunID, InterruptID: d.InterruptID, Outcome: subjects.OutcomeAccepted,
				Detail: rej.detail, At: co.now()})
		}
		if rej != nil {
			if rej.code == subjects.CodeUnknownRun || rej.code == subjects.CodeUnknownInterrupt {
				if wait, err := co.suspensionPending(ctx, addr.Run, rec); err != nil {
					return err
				} else if wait {
					co.crash("decision-wait")
					// The suspension this decision answers is in the stream but not
					// yet recorded: come back once it is.
					return jetstream.RetryAfter(retryDelay(m.Deliveries), rej)
				}
			}
			return co.verdict(ctx, o, d, addr.Run, rej, false)
		}
		st := rec.Interrupts[i]
		if st.Decision != nil {
			// Same decision id as the accepted one: a no-op. If this is the very
			// message that was accepted, redelivered after a crash, finish its
			// side effects and answer as the first time.
			if st.DecisionSeq == m.Sequence {
				return co.accepted(ctx, o, rec, d)
			}
			return co.verdict(ctx, o, d, addr.Run, nil, true)
		}
		next := co.applyDecision(rec, i, d, m.Sequence)
		if err := co.store(ctx, next, rev); errors.Is(err, jetstream.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		if co.crash("decision-after-record") {
			return errAbandoned
		}
		if next.Status == subjects.RunResuming {
			co.metrics.runs.WithLabelValues(string(subjects.RunResuming)).Inc()
		}
		return co.accepted(ctx, o, next, d)
	}
	return fmt.Errorf("run %s: compare-and-set kept losing", addr.Run)
}

// errNoop is check's answer for a decision accepted without change.
var errNoop = &rejection{code: "noop", detail: "the interrupt had already expired and was closed; nothing changed"}

func retryDelay(deliveries uint64) time.Duration {
	d := 50 * time.Millisecond << min(deliveries, 6)
	return min(d, 2*time.Second)
}

// check applies the decision rules. It returns the interrupt's index, or why
// the decision is refused. An interrupt decided with the same decision id is
// not refused: that is a duplicate.
func (co *Coordinator) check(rec *subjects.Run, d subjects.Decision, identity string) (int, *rejection) {
	if rec == nil {
		return -1, reject(subjects.CodeUnknownRun, "no run with this id")
	}
	i := findInterrupt(rec, d.InterruptID)
	if i < 0 {
		return -1, reject(subjects.CodeUnknownInterrupt, "run %s has no interrupt %s", rec.RunID, d.InterruptID)
	}
	st := rec.Interrupts[i]
	// A duplicate only from whoever made the decision: reusing another
	// identity's decision id is refused, and so recorded.
	if st.Decision != nil && st.Decision.DecisionID == d.DecisionID && st.Decision.Approver != d.Approver {
		return -1, reject(subjects.CodeNotAllowed, "decision id %s is another identity's decision on interrupt %s; "+
			"send your own decision with a fresh id", d.DecisionID, st.ID)
	}
	// Authorized before anything else is said about the interrupt: even the
	// no-op cancel of an expired one is accepted only from who may decide it.
	if rej := co.authorize(st, identity); rej != nil {
		return -1, rej
	}
	if st.Decision != nil {
		if st.Decision.DecisionID == d.DecisionID {
			return i, nil
		}
		if st.Decision.Approver == subjects.ExpiryApprover {
			// After expiry a resolve is refused and a cancel accepted (it
			// changes nothing: the interrupt is closed).
			if d.Status == subjects.StatusResolved {
				return -1, reject(subjects.CodeExpired, "interrupt %s expired at %s and was %s; it can still be cancelled",
					st.ID, st.ExpiresAt.Format(time.RFC3339), st.Decision.Status)
			}
			return i, errNoop
		}
		return -1, reject(subjects.CodeAlreadyDecided, "interrupt %s was %s by decision %s",
			st.ID, st.Decision.Status, st.Decision.DecisionID)
	}
	if rec.Status != subjects.RunSuspended || st.Pass != rec.Pass {
		return -1, reject(subjects.CodeAlreadyDecided, "run %s is %s; interrupt %s no longer waits", rec.RunID, rec.Status, st.ID)
	}
	if st.ExpiresAt != nil && !co.now().Before(*st.ExpiresAt) && d.Status == subjects.StatusResolved {
		return -1, reject(subjects.CodeExpired, "interrupt %s expired at %s; it can still be cancelled",
			st.ID, st.ExpiresAt.Format(time.RFC3339))
	}
	// The error names the rule and where it failed, never the value.
	if err := checkAnswer(&co.schemas, st.Interrupt, d.Status, d.Payload); errors.Is(err, schema.ErrBudget) {
		return -1, reject(subjects.CodeSchemaBudget, "%v", err)
	} else if err != nil {
		return -1, reject(subjects.CodeSchemaMismatch, "%v", err)
	}
	return i, nil
}

// authorize asks the one authorization rule whether identity (empty: an
// anonymous decision) may decide st.
func (co *Coordinator) authorize(st subjects.InterruptState, identity string) *rejection {
	p := authz.Principal{Name: identity}
	if co.cfg.Groups != nil && identity != "" {
		p.Groups = co.cfg.Groups(identity)
	}
	if err := authz.Decide(st.Interrupt, p); err != nil {
		return reject(subjects.CodeNotAllowed, "%v", err)
	}
	return nil
}

// suspensionPending reports whether the runs stream holds a suspension of
// run newer than the record knows.
func (co *Coordinator) suspensionPending(ctx context.Context, run string, rec *subjects.Run) (bool, error) {
	filter, err := co.ns.RunSuspensions(run)
	if err != nil {
		return false, nil
	}
	last, err := co.client.LastMsg(ctx, jetstream.StreamRuns, filter)
	if errors.Is(err, jetstream.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return rec == nil || last.Sequence > rec.SuspensionSeq, nil
}

func (co *Coordinator) applyDecision(rec *subjects.Run, i int, d subjects.Decision, seq uint64) *subjects.Run {
	now := co.now()
	cp := *rec
	cp.Interrupts = slices.Clone(rec.Interrupts)
	cp.History = slices.Clone(rec.History)
	st := &cp.Interrupts[i]
	st.Decision, st.DecidedAt, st.DecisionSeq = &d, &now, seq
	st.Order = decisionCount(rec) + 1
	cp.History = append(cp.History, subjects.HistoryEntry{At: now, Type: subjects.EventDecisionAccepted, Pass: cp.Pass,
		InterruptID: d.InterruptID, DecisionID: d.DecisionID, Approver: d.Approver, Detail: string(d.Status)})
	if len(cp.Pending()) == 0 {
		cp.Status = subjects.RunResuming
		cp.History = append(cp.History, subjects.HistoryEntry{At: now, Type: subjects.EventResumed, Pass: cp.Pass + 1})
	}
	return &cp
}

// accepted finishes an accepted decision: the replay work item when it was
// the last one awaited, the events, the reply. Every publish is deduplicated,
// so running it again after a crash changes nothing.
func (co *Coordinator) accepted(ctx context.Context, o origin, rec *subjects.Run, d subjects.Decision) error {
	st := rec.Interrupts[findInterrupt(rec, d.InterruptID)]
	replay := completesPass(rec, st)
	fx := []jetstream.OutMsg{co.pendingDelete(rec.RunID, st.ID)}
	if replay {
		// The run may have moved on since (this is a redelivery): the work
		// item is only due while the replay has not reported back.
		if rec.Status == subjects.RunResuming && rec.Pass == st.Pass {
			w, err := replayMsg(co.client.Namespace(), rec)
			if err != nil {
				return err
			}
			fx = append(fx, w)
		}
		ev, err := co.eventMsg(subjects.Event{Type: subjects.EventResumed, RunID: rec.RunID, Agent: rec.Agent,
			Pass: st.Pass + 1}, "pass"+strconv.Itoa(st.Pass+1))
		if err != nil {
			return err
		}
		fx = append(fx, ev)
	}
	v := subjects.Verdict{Version: subjects.Version, DecisionID: d.DecisionID, RunID: rec.RunID,
		InterruptID: d.InterruptID, Outcome: subjects.OutcomeAccepted, Replay: replay, At: co.now()}
	vm, err := co.verdictMsg(o, rec.Agent, st.Pass, &v)
	if err != nil {
		return err
	}
	if err := co.client.PublishAll(ctx, append(fx, vm)...); err != nil {
		return err
	}
	if co.crash("decision-after-work") {
		return errAbandoned
	}
	return co.reply(ctx, o, v)
}

// completesPass reports whether st's decision was the last one its pass
// waited for.
func completesPass(rec *subjects.Run, st subjects.InterruptState) bool {
	for _, in := range rec.Interrupts {
		if in.Pass == st.Pass && (in.Decision == nil || in.Order > st.Order) {
			return false
		}
	}
	return true
}

func decisionCount(rec *subjects.Run) int {
	n := 0
	for _, in := range rec.Interrupts {
		if in.Decision != nil {
			n++
		}
	}
	return n
}

// replayMsg is the work item of rec's next pass, carrying every decision
// and journaled step so far.
func replayMsg(ns subjects.Namespace, rec *subjects.Run) (jetstream.OutMsg, error) {
	w := subjects.Work{PassRef: subjects.PassRef{Version: subjects.Version, RunID: rec.RunID, Agent: rec.Agent,
		ThreadID: rec.ThreadID, Pass: rec.Pass + 1, Input: rec.Input}, Journal: rec.Journal}
	for _, in := range rec.Interrupts {
		if in.Decision != nil {
			w.Decisions = append(w.Decisions, *in.Decision)
		}
	}
	subject, err := ns.Work(w.Agent)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	return workMsg(subject, w, trace.Child(rec.TraceParent))
}

// workMsg is work item w on subject, carrying the trace context tp.
func workMsg(subject string, w subjects.Work, tp string) (jetstream.OutMsg, error) {
	data, err := json.Marshal(w)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	return jetstream.OutMsg{Subject: subject, Data: data, MsgID: workMsgID(w.RunID, w.Pass),
		Header: jetstream.Header{trace.Header: {tp}}}, nil
}

// verdict answers a decision that changes nothing: a rejection (rej set) or
// a duplicate.
func (co *Coordinator) verdict(ctx context.Context, o origin, d subjects.Decision, run string, rej *rejection, dup bool) error {
	v := subjects.Verdict{Version: subjects.Version, DecisionID: d.DecisionID, RunID: run,
		InterruptID: d.InterruptID, At: co.now()}
	switch {
	case dup:
		v.Outcome = subjects.OutcomeDuplicate
		v.Detail = "this decision was already accepted; nothing changed"
	default:
		v.Outcome, v.Code, v.Detail = subjects.OutcomeRejected, rej.code, rej.detail
		co.cfg.Logger.Info("decision rejected", "run", run, "interrupt", d.InterruptID, "decision", d.DecisionID,
			"code", rej.code, "detail", rej.detail)
	}
	return co.publishVerdict(ctx, o, "", 0, v)
}

func (co *Coordinator) publishVerdict(ctx context.Context, o origin, agent string, pass int, v subjects.Verdict) error {
	m, err := co.verdictMsg(o, agent, pass, &v)
	if err != nil {
		return err
	}
	if err := co.client.PublishAll(ctx, m); err != nil {
		return err
	}
	return co.reply(ctx, o, v)
}

// verdictMsg is the decision_* event of verdict v (filled in with who and
// how): one per decision message, its stream sequence the dedup key.
func (co *Coordinator) verdictMsg(o origin, agent string, pass int, v *subjects.Verdict) (jetstream.OutMsg, error) {
	v.Approver, v.Via = o.approver, o.via
	co.metrics.decisions.WithLabelValues(string(v.Outcome), string(v.Code)).Inc()
	t := map[subjects.Outcome]subjects.EventType{
		subjects.OutcomeAccepted:  subjects.EventDecisionAccepted,
		subjects.OutcomeRejected:  subjects.EventDecisionRejected,
		subjects.OutcomeDuplicate: subjects.EventDecisionDuplicate,
	}[v.Outcome]
	return co.eventMsg(subjects.Event{Type: t, RunID: v.RunID, Agent: agent, Pass: pass, Verdict: v,
		Code: v.Code, Detail: v.Detail, Subject: o.subject}, o.key)
}

// reply sends the verdict to the sender's reply subject, if it named one
// under the sender's own inbox prefix. Any other subject (another user's
// inbox, a KV key, a stream's subject) is ignored and audited: the
// coordinator never publishes where a sender points it with its own rights.
func (co *Coordinator) reply(ctx context.Context, o origin, v subjects.Verdict) error {
	if o.replyTo == "" {
		return nil
	}
	if !subjects.ReplyAllowed(o.approver, o.replyTo) {
		co.cfg.Logger.Warn("verdict reply refused", "run", v.RunID, "decision", v.DecisionID, "approver", o.approver,
			"reply_to", truncate(o.replyTo, 256))
		return co.event(ctx, subjects.Event{Type: subjects.EventReplyRefused, RunID: v.RunID, Code: subjects.CodeReplyRefused,
			Subject: o.subject, Detail: fmt.Sprintf("Interlock-Reply-To %q is not under %s., the inbox of %s; no verdict was sent there",
				truncate(o.replyTo, 256), subjects.InboxPrefix(o.approver), orAnonymous(o.approver))}, o.key+":reply")
	}
	data, _ := json.Marshal(v)
	if err := co.client.Notify(o.replyTo, data); err != nil {
		co.cfg.Logger.Debug("verdict reply failed", "reply_to", o.replyTo, "error", err)
	}
	return nil
}

func orAnonymous(identity string) string {
	if identity == "" {
		return "anonymous decisions"
	}
	return identity
}

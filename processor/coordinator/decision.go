package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/internal/textcut"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// origin is the input a verdict answers: its subject, the dedup key of the
// events about it, and where to send the reply.
type origin struct {
	subject  string
	key      string
	replyTo  string
	via      string
	approver string
	// noRun files the events about this input under subjects.NoRun: the
	// run it names does not exist, and nobody may create an events
	// subject for an id of their choosing.
	noRun bool
}

func originOf(m *jetstream.Delivery) origin {
	return origin{subject: m.Subject, key: "seq" + strconv.FormatUint(m.Sequence, 10),
		replyTo: m.Header.Get(jetstream.HeaderReplyTo), via: textcut.Truncate(m.Header.Get(jetstream.HeaderVia), 32)}
}

func (co *Coordinator) handleDecision(ctx context.Context, m *jetstream.Delivery) error {
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
			if exists, lerr := co.exists(ctx, r); lerr != nil {
				return lerr
			} else if exists {
				run = r
			}
		}
		return co.verdict(ctx, o, subjects.Decision{}, run, rules.Reject(subjects.CodeInvalidSubject, "%v", err), false)
	}
	o.approver = addr.Approver
	if err := jetstream.CheckPublished(m.Header); err != nil {
		// An answer the server sent to this subject for another user:
		// audited, and no verdict to a reply subject it names.
		o.replyTo = ""
		return co.refuseEarly(ctx, o, subjects.Decision{}, addr.Run, rules.Reject(subjects.CodeOf(err), "%v", err))
	}
	d, err := subjects.DecodeDecision(m.Data)
	if err != nil {
		return co.refuseEarly(ctx, o, d, addr.Run, rules.Reject(subjects.CodeOf(err), "%v", err))
	}
	// The identity is the subject's approver token, which NATS permissions
	// bind to the publishing user; the body cannot claim another.
	identity := addr.Approver
	if identity != "" && d.Approver != "" && d.Approver != identity {
		return co.refuseEarly(ctx, o, d, addr.Run, rules.Reject(subjects.CodeNotAllowed,
			"published as %s but the body names approver %s", identity, d.Approver))
	}
	if identity != "" {
		d.Approver = identity
	}
	// The expiry's identity is the coordinator's own: readers (the SDKs'
	// cancellation reason, history) take it as "the deadline passed", so a
	// decision that arrives from outside may not claim it.
	if d.Approver == subjects.ExpiryApprover {
		return co.refuseEarly(ctx, o, d, addr.Run, rules.Reject(subjects.CodeNotAllowed,
			"approver %s is reserved for the coordinator's expiry", subjects.ExpiryApprover))
	}
	// Likewise the operator rules' identity: only the coordinator decides
	// as interlock:policy.
	if d.Approver == subjects.PolicyApprover {
		return co.refuseEarly(ctx, o, d, addr.Run, rules.Reject(subjects.CodeNotAllowed,
			"approver %s is reserved for the coordinator's operator rules", subjects.PolicyApprover))
	}
	// An anonymous decision names nobody: the body's approver would be
	// recorded as who decided, and only the subject can say that.
	if identity == "" && d.Approver != "" {
		return co.refuseEarly(ctx, o, d, addr.Run, rules.Reject(subjects.CodeNotAllowed,
			"an anonymous decision names approver %s; publish it on the resume subject of that identity", d.Approver))
	}
	// The rules decide on the record as read; what they say is acted on
	// once the compare-and-set is through.
	var (
		rec *subjects.Run
		at  int
		rej *rules.Rejection
	)
	next, err := co.update(ctx, addr.Run, func(current *subjects.Run) (*subjects.Run, error) {
		rec = current
		at, rej = co.rules.CheckDecision(current, d, co.rules.Principal(identity), co.now())
		if rej != nil {
			return nil, nil
		}
		if _, held := rules.Holds(current, at, d); held {
			return nil, nil
		}
		if rej = rules.Superseded(current, at, d, m.Sequence); rej != nil {
			return nil, nil
		}
		next := co.rules.Decide(current, at, d, m.Sequence, co.now())
		markVia(next, at, m.Sequence, o.via)
		return next, nil
	})
	switch {
	case errors.Is(err, jetstream.ErrTooLarge):
		// The record cannot take this decision (the server's max payload
		// is below what the suspension was admitted with): a verdict and
		// an event, not a retry that can never succeed.
		return co.verdict(ctx, o, d, addr.Run, rules.Reject(subjects.CodeRecordTooLarge,
			"the run record with this decision would be over %s; "+
				"nothing was recorded: send a shorter decision (payload, comment, metadata) (%v)",
			co.recordLimit(), err), false)
	case errors.Is(err, store.ErrForeignRecord):
		// Not the run's record: nothing is decided on what another user
		// had the server store under its key.
		return co.verdict(ctx, o, d, addr.Run, rules.Reject(subjects.CodeNotAllowed,
			"nothing was decided: %v", err), false)
	case err != nil:
		return err
	case next != nil:
		if co.crash("decision-after-record") {
			return errAbandoned
		}
		if next.Status == subjects.RunResuming {
			co.metrics.runs.WithLabelValues(string(subjects.RunResuming)).Inc()
		}
		return co.accepted(ctx, o, next, d)
	case rej.IsNoop():
		return co.publishVerdict(ctx, o, rec.Agent, rec.Interrupts[at].Pass, subjects.Verdict{Version: subjects.Version,
			DecisionID: d.DecisionID, RunID: rec.RunID, InterruptID: d.InterruptID, Outcome: subjects.OutcomeAccepted,
			Detail: rej.Detail, At: co.now()})
	case rej != nil:
		if rej.Code == subjects.CodeUnknownRun || rej.Code == subjects.CodeUnknownInterrupt {
			if wait, err := co.suspensionPending(ctx, addr.Run, rec); err != nil {
				return err
			} else if wait {
				if co.crash("decision-wait") {
					return errAbandoned
				}
				// The suspension this decision answers is in the stream but not
				// yet recorded: come back once it is.
				return jetstream.RetryAfter(retryDelay(m.Deliveries), rej)
			}
		}
		o.noRun = rec == nil
		return co.verdict(ctx, o, d, addr.Run, rej, false)
	case heldAs(rec, at, d) == m.Sequence:
		// The very message that was accepted, redelivered after a crash:
		// finish its side effects and answer as the first time.
		return co.accepted(ctx, o, rec, d)
	default:
		// Same decision id as the accepted one: a duplicate.
		return co.verdict(ctx, o, d, addr.Run, nil, true)
	}
}

func retryDelay(deliveries uint64) time.Duration {
	d := 50 * time.Millisecond << min(deliveries, 6)
	return min(d, 2*time.Second)
}

// suspensionPending reports whether the runs stream holds a suspension of
// run newer than the record knows.
func (co *Coordinator) suspensionPending(ctx context.Context, run string, rec *subjects.Run) (bool, error) {
	last, err := co.store.LastSuspension(ctx, run)
	if err != nil || last == 0 {
		return false, err
	}
	// A run that has ended waits for no suspension: one refused after the
	// record (a suspension too large for it) is not coming.
	return rec == nil || !rec.Status.Terminal() && last > rec.SuspensionSeq, nil
}

// heldAs is the stream sequence under which rec holds d on interrupt i (0:
// it does not).
func heldAs(rec *subjects.Run, i int, d subjects.Decision) uint64 {
	seq, _ := rules.Holds(rec, i, d)
	return seq
}

// accepted finishes an accepted decision: the replay work item when it was
// the last one awaited, the events, the reply. Every publish is deduplicated,
// so running it again after a crash changes nothing. A vote that left its
// interrupt waiting is answered vote_recorded, with the tally. The events
// in also are stored with the decision's own, before the work item: what
// the input says besides the verdict (an expiry's expired) precedes
// everything the replay writes.
func (co *Coordinator) accepted(ctx context.Context, o origin, rec *subjects.Run, d subjects.Decision, also ...store.Event) error {
	i := rules.Find(rec, d.InterruptID)
	st := rec.Interrupts[i]
	if st.Decision != nil && (st.Decision.DecisionID != d.DecisionID || st.Decision.Approver != d.Approver) {
		// A vote the decision carries, delivered again after another input
		// (the closing vote, the expiry) decided the interrupt: answered as
		// the vote it was, never as the decision.
		v := subjects.Verdict{DecisionID: d.DecisionID, RunID: rec.RunID, InterruptID: d.InterruptID,
			Outcome: subjects.OutcomeVoteRecorded, Tally: co.rules.Tally(rec, i, d), At: co.now(),
			Detail: fmt.Sprintf("interrupt %s was since %s by decision %s", st.ID, st.Decision.Status, st.Decision.DecisionID)}
		if err := co.store.Commit(ctx, store.Effects{Events: []store.Event{co.verdictEvent(o, rec.Agent, st.Pass, &v)}, Record: rec}); err != nil {
			return err
		}
		return co.reply(ctx, o, v)
	}
	if st.Decision == nil {
		co.metrics.votes.WithLabelValues(string(d.Status)).Inc()
		v := subjects.Verdict{DecisionID: d.DecisionID, RunID: rec.RunID, InterruptID: d.InterruptID,
			Outcome: subjects.OutcomeVoteRecorded, Tally: co.rules.Tally(rec, i, d), At: co.now()}
		v.Detail = v.Tally.Remaining()
		// The pending entry shows the votes so far (readers list what
		// waits, and who is still needed, from it).
		fx := store.Effects{Index: []subjects.PendingInterrupt{pendingEntry(rec, st)},
			Events: []store.Event{co.verdictEvent(o, rec.Agent, st.Pass, &v)}, Record: rec}
		if err := co.store.Commit(ctx, fx); err != nil {
			return err
		}
		// An expiry (another input) may have closed the interrupt since:
		// the entry put again must not outlive it.
		if err := co.unindexDecided(ctx, rec.RunID, []string{st.ID}); err != nil {
			return err
		}
		return co.reply(ctx, o, v)
	}
	if st.Policy != nil {
		co.metrics.votes.WithLabelValues(string(d.Status)).Inc()
	}
	fx, replay, err := co.replay(rec, st)
	if err != nil {
		return err
	}
	fx.Unindex = append(fx.Unindex, store.PendingRef{RunID: rec.RunID, InterruptID: st.ID})
	v := subjects.Verdict{DecisionID: d.DecisionID, RunID: rec.RunID, InterruptID: d.InterruptID,
		Outcome: subjects.OutcomeAccepted, Replay: replay, At: co.now(), Tally: co.rules.Tally(rec, i, d), Rule: st.Decision.Rule}
	fx.Events = append(fx.Events, co.verdictEvent(o, rec.Agent, st.Pass, &v))
	fx.Events = append(fx.Events, also...)
	fx.Record = rec
	if err := co.store.Commit(ctx, fx); err != nil {
		return err
	}
	if co.crash("decision-after-work") {
		return errAbandoned
	}
	return co.reply(ctx, o, v)
}

// refuseEarly rejects a decision refused before its run's record is read:
// its events go under the run when it exists, under subjects.NoRun when not.
func (co *Coordinator) refuseEarly(ctx context.Context, o origin, d subjects.Decision, run string, rej *rules.Rejection) error {
	exists, err := co.exists(ctx, run)
	if err != nil {
		return err
	}
	o.noRun = !exists
	return co.verdict(ctx, o, d, run, rej, false)
}

// verdict answers a decision that changes nothing: a rejection (rej set) or
// a duplicate.
func (co *Coordinator) verdict(ctx context.Context, o origin, d subjects.Decision, run string, rej *rules.Rejection, dup bool) error {
	v := subjects.Verdict{Version: subjects.Version, DecisionID: d.DecisionID, RunID: run,
		InterruptID: d.InterruptID, At: co.now()}
	switch {
	case dup:
		v.Outcome = subjects.OutcomeDuplicate
		v.Detail = "this decision was already accepted; nothing changed"
	default:
		v.Outcome, v.Code, v.Detail = subjects.OutcomeRejected, rej.Code, rej.Detail
		co.cfg.Logger.Info("decision rejected", "run", run, "interrupt", d.InterruptID, "decision", d.DecisionID,
			"code", rej.Code, "detail", rej.Detail)
	}
	return co.publishVerdict(ctx, o, "", 0, v)
}

func (co *Coordinator) publishVerdict(ctx context.Context, o origin, agent string, pass int, v subjects.Verdict) error {
	if err := co.store.Commit(ctx, store.Effects{Events: []store.Event{co.verdictEvent(o, agent, pass, &v)}}); err != nil {
		return err
	}
	return co.reply(ctx, o, v)
}

// verdictEvent is the decision_* event of verdict v (filled in with who and
// how): one per decision message, its stream sequence the dedup key.
func (co *Coordinator) verdictEvent(o origin, agent string, pass int, v *subjects.Verdict) store.Event {
	v.Approver, v.Via = o.approver, o.via
	subjects.Versioned(v)
	co.metrics.decisions.WithLabelValues(string(v.Outcome), string(v.Code)).Inc()
	t := map[subjects.Outcome]subjects.EventType{
		subjects.OutcomeVoteRecorded: subjects.EventVoteRecorded,
		subjects.OutcomeAccepted:     subjects.EventDecisionAccepted,
		subjects.OutcomeRejected:     subjects.EventDecisionRejected,
		subjects.OutcomeDuplicate:    subjects.EventDecisionDuplicate,
	}[v.Outcome]
	return co.newEvent(subjects.Event{Type: t, RunID: o.eventRun(v.RunID), Agent: agent, Pass: pass, Verdict: v,
		Code: v.Code, Detail: v.Detail, Subject: o.subject}, o.key)
}

// eventRun is the run the events about o are filed under, for a verdict
// naming run: subjects.NoRun when that run does not exist.
func (o origin) eventRun(run string) string {
	if o.noRun {
		return subjects.NoRun
	}
	return run
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
			"reply_to", textcut.Truncate(o.replyTo, 256))
		return co.event(ctx, subjects.Event{Type: subjects.EventReplyRefused, RunID: o.eventRun(v.RunID), Code: subjects.CodeReplyRefused,
			Subject: o.subject, Detail: fmt.Sprintf("Interlock-Reply-To %q is not under %s., the inbox of %s; no verdict was sent there",
				textcut.Truncate(o.replyTo, 256), subjects.InboxPrefix(o.approver), orAnonymous(o.approver))}, o.key+":reply")
	}
	data, _ := json.Marshal(v)
	if err := co.nats.Notify(o.replyTo, data); err != nil {
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

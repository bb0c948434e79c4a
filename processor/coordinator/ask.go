package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/interlockhq/interlock/internal/textcut"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// askQueue is the queue group coordinators answer asks in: each ask is
// answered by one coordinator.
const askQueue = "interlock-coordinator"

// askParallel bounds the asks one coordinator answers at once.
const askParallel = 64

// askTimeout bounds answering one ask (reading the record, recording the
// decision's events).
const askTimeout = 5 * time.Second

// serveAsks answers workers' asks (subjects.Ask): whether an operator rule
// settles an interrupt before the pass suspends on it. A settled one is
// recorded in the audit trail (decision_accepted by interlock:policy, via
// policy, the rule's name) and answered with the decision, which the
// worker journals: the pass goes on in one round trip, with no suspension
// and no replay. Anything else is answered "suspend".
func (co *Coordinator) serveAsks() (func(), error) {
	subject := co.ns.All(subjects.KindAsk)
	sub, err := co.client.Serve(jetstream.Service{Subject: subject, Queue: askQueue, Parallel: askParallel,
		Answer: func(subj string, data []byte) []byte {
			ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
			defer cancel()
			reply, err := co.handleAsk(ctx, subj, data)
			if err != nil {
				reply = subjects.AskReply{Outcome: subjects.AskSuspend, Detail: err.Error()}
			}
			reply.Version = subjects.Version2
			out, _ := json.Marshal(reply)
			return out
		},
		Refused: co.askReplyRefused,
	})
	if err != nil {
		return nil, fmt.Errorf("serve asks: %w", err)
	}
	return sub.Unsubscribe, nil
}

// askReplyRefused audits an ask whose reply subject was not an inbox
// (jetstream.Service): it was not applied, and not answered. It is filed
// under run _, naming the subject: the run token of an ask subject is the
// asker's to choose, so it may name another agent's run.
func (co *Coordinator) askReplyRefused(subject, reply string) {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	co.cfg.Logger.Warn("ask reply refused", "subject", subject, "reply", textcut.Truncate(reply, 256))
	ev := subjects.Event{Type: subjects.EventReplyRefused, RunID: subjects.NoRun, Code: subjects.CodeReplyRefused,
		Subject: subject, Detail: fmt.Sprintf("an ask's reply subject %q is not an inbox (_INBOX.…): the ask was "+
			"neither applied nor answered", textcut.Truncate(reply, 256))}
	if err := co.event(ctx, ev, "ask:"+uuid.NewString()+":reply"); err != nil {
		co.cfg.Logger.Warn("ask reply refusal not recorded", "subject", subject, "error", err)
	}
}

// handleAsk answers one ask on subject. An error is answered "suspend":
// the pass then asks the long way, with a suspension.
func (co *Coordinator) handleAsk(ctx context.Context, subject string, data []byte) (subjects.AskReply, error) {
	suspend := subjects.AskReply{Outcome: subjects.AskSuspend}
	if co.cfg.Policies == nil {
		return suspend, nil
	}
	addr, err := co.ns.Parse(subject)
	if err == nil && addr.Kind != subjects.KindAsk {
		err = fmt.Errorf("%w: %s is not an ask subject", subjects.ErrInvalidSubject, subject)
	}
	if err != nil {
		return suspend, err
	}
	a, err := subjects.DecodeAsk(data)
	if err != nil {
		return suspend, err
	}
	// The subject's agent token is what NATS permissions vouch for.
	if a.Agent != addr.Agent || a.RunID != addr.Run {
		return suspend, fmt.Errorf("%w: subject names agent %q run %q, body names agent %q run %q",
			subjects.ErrMalformed, addr.Agent, addr.Run, a.Agent, a.RunID)
	}
	rec, err := co.load(ctx, a.RunID)
	if err != nil {
		return suspend, err
	}
	switch {
	case rec == nil && a.Pass == 0:
		rec = &subjects.Run{RunID: a.RunID, Agent: a.Agent, Requester: a.Requester}
	case rec == nil || rec.Agent != a.Agent:
		return suspend, errors.New("no such run of this agent")
	}
	d, ruling := co.rules.Settles(rec, a.Interrupt)
	var fx store.Effects
	// The asking agent is in the entries' ids: a run with no record yet
	// may be asked about by any agent (its run id is not claimed until its
	// first outcome), and one agent's entry must not take the place of
	// another's, deduplicated.
	what := fmt.Sprintf("pass%d-ask-%s-%s", a.Pass, a.Agent, rules.PolicyDecisionID(a.Interrupt.ID))
	for n, f := range ruling.Failed {
		fx.Events = append(fx.Events, co.newEvent(subjects.Event{Type: subjects.EventRuleFailed, RunID: a.RunID, Agent: a.Agent,
			Pass: a.Pass, InterruptIDs: []string{a.Interrupt.ID}, Detail: f}, fmt.Sprintf("%s-rule%d", what, n)))
	}
	if d != nil {
		co.metrics.auto.WithLabelValues(string(d.Status)).Inc()
		v := subjects.Verdict{DecisionID: d.DecisionID, RunID: a.RunID, InterruptID: a.Interrupt.ID, Outcome: subjects.OutcomeAccepted,
			Approver: subjects.PolicyApprover, Via: "policy", Rule: d.Rule, Detail: d.Comment, At: co.now()}
		fx.Events = append(fx.Events, co.newEvent(subjects.Event{Type: subjects.EventDecisionAccepted, RunID: a.RunID,
			Agent: a.Agent, Pass: a.Pass, InterruptIDs: []string{a.Interrupt.ID}, Verdict: subjects.Versioned(&v)}, what))
	}
	if len(fx.Events) > 0 {
		// Recorded before it is answered: no decision acts unaudited.
		if err := co.store.Commit(ctx, fx); err != nil {
			return suspend, err
		}
	}
	if d == nil {
		return suspend, nil
	}
	return subjects.AskReply{Outcome: subjects.AskDecided, Decision: subjects.Versioned(d)}, nil
}

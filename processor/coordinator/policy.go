package coordinator

import (
	"strconv"

	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// policyEffects are what the operator's rules did to the interrupts of
// suspension o, recorded with it: a rule_failed event per rule that failed
// (and was applied failing closed; the record keeps each), a
// decision_accepted event per automatic decision (approver
// interlock:policy, via policy, the rule's name), and the replay when the
// rules settled every interrupt of the pass. Each carries an id derived from the pass, so they are published
// once however often the suspension is redelivered.
func (co *Coordinator) policyEffects(rec *subjects.Run, o rules.Outcome) (store.Effects, error) {
	var fx store.Effects
	if o.Kind != subjects.KindSuspended || rec.Pass != o.Pass {
		return fx, nil
	}
	pass := "pass" + strconv.Itoa(o.Pass)
	ruleFailed := func(interrupt, detail, id string) {
		fx.Events = append(fx.Events, co.newEvent(subjects.Event{Type: subjects.EventRuleFailed, RunID: rec.RunID,
			Agent: rec.Agent, Pass: o.Pass, InterruptIDs: []string{interrupt}, Detail: detail}, id))
	}
	for n, f := range rec.RuleFailures {
		if f.Pass == o.Pass {
			ruleFailed(f.InterruptID, f.Detail, pass+"-rule"+strconv.Itoa(n))
		}
	}
	if len(rec.RuleFailures) == 0 {
		// A record written before ruleFailures kept them in its history,
		// under these ids: a suspension it recorded, delivered again,
		// audits them as it did.
		for n, h := range rec.History {
			if h.Type == subjects.EventRuleFailed && h.Pass == o.Pass {
				ruleFailed(h.InterruptID, h.Detail, pass+"-rule"+strconv.Itoa(n))
			}
		}
	}
	var last *subjects.InterruptState
	for i := range rec.Interrupts {
		st := &rec.Interrupts[i]
		if st.Pass != o.Pass || st.Decision == nil || st.Decision.Approver != subjects.PolicyApprover {
			continue
		}
		co.metrics.auto.WithLabelValues(string(st.Decision.Status)).Inc()
		v := subjects.Verdict{DecisionID: st.Decision.DecisionID, RunID: rec.RunID, InterruptID: st.ID,
			Outcome: subjects.OutcomeAccepted, Approver: subjects.PolicyApprover, Via: "policy", Rule: st.Decision.Rule,
			Detail: st.Decision.Comment, At: *st.DecidedAt}
		fx.Events = append(fx.Events, co.newEvent(subjects.Event{Type: subjects.EventDecisionAccepted, RunID: rec.RunID,
			Agent: rec.Agent, Pass: o.Pass, Verdict: subjects.Versioned(&v)}, pass+"-policy"+strconv.Itoa(st.Order)))
		if last == nil || st.Order > last.Order {
			last = st
		}
	}
	if last != nil {
		rfx, _, err := co.replay(rec, *last)
		if err != nil {
			return fx, err
		}
		fx.Events, fx.Messages = append(fx.Events, rfx.Events...), append(fx.Messages, rfx.Messages...)
	}
	return fx, nil
}

// markVia records on the vote stored under seq on interrupt i of rec the
// path it came by (Interlock-Via: informational, never a rule's ground).
func markVia(rec *subjects.Run, i int, seq uint64, via string) {
	if rec == nil || via == "" {
		return
	}
	st := &rec.Interrupts[i]
	votes := st.Votes
	if st.Decision != nil {
		votes = st.Decision.Votes
	}
	for j := range votes {
		if votes[j].Seq == seq {
			votes[j].Via = via
		}
	}
}

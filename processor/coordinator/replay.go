package coordinator

import (
	"encoding/json"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// replay is where a decision turns into the replay pass. When st's decision
// was the last one its pass waited for, it returns the work item that
// starts the replay, carrying every decision and journaled step, while it
// is still due (a redelivery may find the run already moved on); the work
// item is deduplicated per pass. The decision's own decision_accepted
// event, whose verdict says replay, is the audit entry for the replay
// being queued: no resumed event is written (issue 25; docs/protocol.md,
// "Proposed for the next protocol version").
func (co *Coordinator) replay(rec *subjects.Run, st subjects.InterruptState) (fx store.Effects, replay bool, err error) {
	if !rules.CompletesPass(rec, st) {
		return fx, false, nil
	}
	if rules.ReplayDue(rec, st) {
		w, err := co.workMsg(rules.Replay(rec), trace.Child(rec.TraceParent))
		if err != nil {
			return fx, true, err
		}
		fx.Messages = append(fx.Messages, w)
	}
	return fx, true, nil
}

// workMsg is work item w on its agent's work subject, carrying the trace
// context tp.
func (co *Coordinator) workMsg(w subjects.Work, tp string) (jetstream.OutMsg, error) {
	subject, err := co.ns.Work(w.Agent)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	data, err := json.Marshal(w)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	return jetstream.OutMsg{Subject: subject, Data: data, MsgID: co.ids.Sign(subjects.WorkMsgID(w.RunID, w.Pass)),
		Header: jetstream.Header{trace.Header: {tp}}}, nil
}

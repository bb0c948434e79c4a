package slack

import (
	"cmp"
	"encoding/json"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

// CardOf is the card of interrupt in of agent's run: the question, the tool
// and its arguments (from the interrupt's metadata: tool, arguments), who
// may decide and the deadline; with buttons unless the interrupt forbids
// chat decisions, and "Answer…" when it has a responseSchema. Its buttons
// show only once the gateway sets Sign (their signed values). The answer
// of a sensitive interrupt never reaches a card; its arguments do, as they
// reach every other notification.
func CardOf(agent, run string, in subjects.Interrupt, inboxURL string) Card {
	var meta struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	_ = json.Unmarshal(in.Metadata, &meta)
	return Card{Agent: agent, Run: run, Question: in.Message, Reason: in.Reason,
		Tool: cmp.Or(meta.Tool, in.ToolCallID), Arguments: meta.Arguments, WhoMayDecide: authz.WhoMayDecide(in),
		ExpiresAt: in.ExpiresAt, Interrupt: in.ID, Buttons: in.ChatAllowed(), Answer: len(in.ResponseSchema) > 0,
		InboxURL: inboxURL}
}

// DecidedOf says what decided st, for its card; nil while it waits.
func DecidedOf(st subjects.InterruptState, via string) *Decided {
	if st.Decision == nil {
		return nil
	}
	d := &Decided{By: st.Decision.Approver, Status: StatusWord(st.Interrupt, *st.Decision), Via: via}
	if d.By == subjects.ExpiryApprover {
		d.By = "" // "Expired", or "Approved" by the expiry's default answer: nobody decided
	}
	if st.DecidedAt != nil {
		d.At = *st.DecidedAt
	}
	return d
}

// StatusWord is a decision in one word: Approved, Answered, Denied,
// Expired or Cancelled.
func StatusWord(in subjects.Interrupt, d subjects.Decision) string {
	switch {
	case d.Approver == subjects.ExpiryApprover && d.Status == subjects.StatusCancelled:
		return "Expired"
	case d.Status == subjects.StatusResolved && len(in.ResponseSchema) > 0:
		return "Answered"
	case d.Status == subjects.StatusResolved:
		return "Approved"
	case d.Approver == "":
		return "Cancelled"
	}
	return "Denied"
}

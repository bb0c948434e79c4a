package subjects

import "fmt"

// Ask is a worker's question, before it suspends on an interrupt, whether
// an operator rule settles it (protocol version 2): a core NATS request on
// <prefix>.ask.<agent>.<run>, answered by a coordinator with an AskReply.
// A settled interrupt costs one round trip instead of a suspension and a
// replay.
type Ask struct {
	Version int    `json:"version"`
	RunID   string `json:"runId"`
	Agent   string `json:"agent"`
	Pass    int    `json:"pass"`
	// Requester is the start subject's requester token, on pass 0 (as in
	// a suspension); on later passes the run record's is used.
	Requester string    `json:"requester,omitempty"`
	Interrupt Interrupt `json:"interrupt"`
}

// Ask outcomes.
const (
	// AskDecided: a rule decided the interrupt; the reply carries the
	// decision, recorded in the audit trail.
	AskDecided = "decided"
	// AskSuspend: no rule settles it; suspend as usual.
	AskSuspend = "suspend"
)

// AskReply is a coordinator's answer to an Ask.
type AskReply struct {
	Version  int       `json:"version"`
	Outcome  string    `json:"outcome"`
	Decision *Decision `json:"decision,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}

// Ask is the subject of a worker's asks about run of agent.
func (n Namespace) Ask(agent, run string) (string, error) {
	return n.agentRun(KindAsk, agent, run)
}

// DecodeAskReply parses and validates a coordinator's reply to an ask, as
// strictly as any message: field names exactly, each once. A decided
// reply's decision is one a pass may receive (resolved or cancelled, in a
// version this build speaks).
func DecodeAskReply(data []byte) (AskReply, error) {
	var r AskReply
	if err := decode(data, MaxMessageSize, &r); err != nil {
		return AskReply{}, err
	}
	if r.Decision != nil {
		if err := r.Decision.validateReplayed(); err != nil {
			return AskReply{}, fmt.Errorf("decision: %w", err)
		}
	}
	return r, nil
}

// DecodeAsk parses and validates an ask.
func DecodeAsk(data []byte) (Ask, error) {
	var a Ask
	if err := decode(data, MaxMessageSize, &a); err != nil {
		return Ask{}, err
	}
	if a.Version != Version2 {
		return Ask{}, malformed("an ask is version %d", Version2)
	}
	p := PassRef{RunID: a.RunID, Agent: a.Agent, Pass: a.Pass}
	if err := p.validate(); err != nil {
		return Ask{}, err
	}
	if a.Requester != "" {
		if err := validateID("requester", a.Requester); err != nil {
			return Ask{}, err
		}
	}
	if err := a.Interrupt.Validate(); err != nil {
		return Ask{}, fmt.Errorf("interrupt: %w", err)
	}
	return a, nil
}

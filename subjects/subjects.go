package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "interlock"

// Kind is a subject's kind: the token after the prefix of every Interlock
// subject.
type Kind string

// Subject kinds.
const (
	KindWork Kind = "work"
	// KindStart carries the first pass of a run, published by whoever
	// starts it; KindWork carries replays, published only by the
	// coordinator, so only it can hand a body decisions.
	KindStart     Kind = "start"
	KindSuspended Kind = "suspended"
	KindCompleted Kind = "completed"
	KindFailed    Kind = "failed"
	KindResume    Kind = "resume"
	KindEvents    Kind = "events"
	KindDLQ       Kind = "dlq"
	// KindTimers carries durable timers: schedules under
	// <prefix>.timers.at.<run>.<timer> fire onto <prefix>.timers.due.<run>.
	KindTimers Kind = "timers"
	// Notices for notifiers about an interrupt still waiting.
	KindReminder  Kind = "reminder"
	KindEscalated Kind = "escalated"
	KindExpired   Kind = "expired"
	// KindAGUI carries the AG-UI events an agent body emits during a pass
	// (kept in the AGUI stream for the bridge): <prefix>.agui.<agent>.<run>.
	// The agent token lets NATS permissions confine each agent's user to
	// its own runs' events.
	KindAGUI Kind = "agui"
	// KindObserved carries what roles other than the coordinator observe
	// about a run (a notification that failed, a request refused):
	// <prefix>.observed.<run>.<type>. The coordinator records each in the
	// audit trail with its author; nobody else writes the events stream.
	KindObserved Kind = "observed"
	// KindAsk carries a worker's question whether an operator rule settles
	// an interrupt (core NATS request, stored nowhere; protocol version
	// 2): <prefix>.ask.<agent>.<run>. The agent token lets NATS
	// permissions confine each agent's user to its own runs.
	KindAsk Kind = "ask"
)

// Namespace builds and parses the subjects under one prefix. The zero value
// is not usable; get one from [New] or [Default].
type Namespace struct {
	prefix string
	tokens int // number of tokens in prefix
}

// New returns the namespace for prefix: one or more tokens joined by '.',
// each valid under [ValidateToken].
func New(prefix string) (Namespace, error) {
	parts := strings.Split(prefix, ".")
	for _, p := range parts {
		if err := ValidateToken("prefix token", p); err != nil {
			return Namespace{}, err
		}
	}
	return Namespace{prefix: prefix, tokens: len(parts)}, nil
}

// Default returns the namespace for [DefaultPrefix].
func Default() Namespace { return Namespace{prefix: DefaultPrefix, tokens: 1} }

// Prefix returns the namespace's prefix.
func (n Namespace) Prefix() string { return n.prefix }

// Work is the subject of agent's replays: work items carrying decisions,
// published only by the coordinator.
func (n Namespace) Work(agent string) (string, error) {
	if err := ValidateToken("agent", agent); err != nil {
		return "", err
	}
	return n.join(KindWork, agent), nil
}

// Start is the subject of agent's first passes: the work item that starts
// a run, published by whoever starts it. It carries no decisions.
func (n Namespace) Start(agent string) (string, error) {
	if err := ValidateToken("agent", agent); err != nil {
		return "", err
	}
	return n.join(KindStart, agent), nil
}

// StartAs is the subject of agent's first passes started by requester:
// <prefix>.start.<agent>.<requester>. NATS permissions bind the last token
// to the user who may publish it (or the gateway starts for its session's
// identity), and the worker reports it as the run's requester, whom a
// decision policy can exclude from approving (protocol version 2).
func (n Namespace) StartAs(agent, requester string) (string, error) {
	if err := ValidateToken("agent", agent); err != nil {
		return "", err
	}
	if err := ValidateToken("requester", requester); err != nil {
		return "", err
	}
	return n.join(KindStart, agent, requester), nil
}

// AgentWork returns the subjects of agent's work, replays ([Namespace.Work])
// then first passes ([Namespace.Start], then [Namespace.StartAs] for any
// requester): the filter of the durable consumer its workers share
// ([WorkerDurable]).
func (n Namespace) AgentWork(agent string) ([]string, error) {
	replays, err := n.Work(agent)
	if err != nil {
		return nil, err
	}
	starts, err := n.Start(agent)
	if err != nil {
		return nil, err
	}
	return []string{replays, starts, starts + ".*"}, nil
}

// Backlog returns the wildcards matching every agent's waiting work, first
// passes then replays; the token after the kind of a matching subject is
// the agent (a first pass may end in its requester).
func (n Namespace) Backlog() []string {
	return []string{n.All(KindStart), n.All(KindWork)}
}

// WorkerDurable is the name of the durable consumer on the work stream
// through which the workers of agent take its work (the subjects of
// [Namespace.AgentWork]); workers of every SDK bind to it by this name, and
// it names their dead letters' source. agent is a valid token (it is not
// checked here).
func WorkerDurable(agent string) string { return "worker_" + agent }

// Suspended is the subject of run's suspension events.
func (n Namespace) Suspended(agent, run string) (string, error) {
	return n.agentRun(KindSuspended, agent, run)
}

// Completed is the subject of run's completion.
func (n Namespace) Completed(agent, run string) (string, error) {
	return n.agentRun(KindCompleted, agent, run)
}

// Failed is the subject of run's failure.
func (n Namespace) Failed(agent, run string) (string, error) {
	return n.agentRun(KindFailed, agent, run)
}

// Resume is the subject anonymous decisions for run are published on. They
// can decide only interrupts that name no approvers.
func (n Namespace) Resume(run string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(KindResume, run), nil
}

// DecisionMsgID is the Nats-Msg-Id of a decision published as approver
// (empty: anonymous): the decision id, prefixed with "<approver>:" when
// there is one, so one identity's decision id never deduplicates another's
// decision away before the coordinator sees (and audits) it.
func DecisionMsgID(approver, decisionID string) string {
	if approver == "" {
		return decisionID
	}
	return approver + ":" + decisionID
}

// DeadLetterMsgID is the Nats-Msg-Id of the dead letter consumer leaves for
// the message at sequence of stream: one per consumer that gave up on a
// message, so two consumers giving up on one message leave two.
func DeadLetterMsgID(consumer, stream string, sequence uint64) string {
	return fmt.Sprintf("dlq-%s-%s-%d", consumer, stream, sequence)
}

// DecisionAttemptMsgID is the Nats-Msg-Id of a decision whose body is
// body, sent after rejected rejected attempts with the same decision id:
// DecisionMsgID, then ":<rejected>" when rejected > 0, then ":" and the
// first 32 hex digits of SHA-256(body). A rejected attempt so never
// deduplicates a later one away, and a decision id reused with another
// body is another message, which the coordinator sees and refuses
// (CodeDecisionIDReused) instead of the stream dropping it unanswered;
// copies of one attempt, byte for byte, still dedup.
func DecisionAttemptMsgID(approver, decisionID string, rejected int, body []byte) string {
	id := DecisionMsgID(approver, decisionID)
	if rejected > 0 {
		id += ":" + strconv.Itoa(rejected)
	}
	sum := sha256.Sum256(body)
	return id + ":" + hex.EncodeToString(sum[:16])
}

// ResumeRun returns the run a resume subject names, even when the rest of
// the subject is not valid (a bad approver token, extra tokens), so a
// refused decision can be audited under its run; ok is false when subject
// is not under this namespace's resume subjects or the run token is invalid.
func (n Namespace) ResumeRun(subject string) (run string, ok bool) {
	rest, found := strings.CutPrefix(subject, n.prefix+"."+string(KindResume)+".")
	if !found {
		return "", false
	}
	run, _, _ = strings.Cut(rest, ".")
	return run, ValidateToken("run id", run) == nil
}

// ResumeAs is the subject approver publishes decisions for run on. The
// approver's identity is this token, not anything in the body, so NATS user
// permissions (approver ada may publish only on <prefix>.resume.*.ada) make
// it impossible to decide in someone else's name.
func (n Namespace) ResumeAs(run, approver string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	if err := ValidateToken("approver", approver); err != nil {
		return "", err
	}
	return n.join(KindResume, run, approver), nil
}

// Events is the subject of run's lifecycle and audit event of type t. Events
// not tied to a valid run use [NoRun] as the run token.
func (n Namespace) Events(run string, t EventType) (string, error) {
	if run != NoRun {
		if err := ValidateToken("run id", run); err != nil {
			return "", err
		}
	}
	if err := ValidateToken("event type", string(t)); err != nil {
		return "", err
	}
	return n.join(KindEvents, run, string(t)), nil
}

// Observed is the subject a role reports an observation of type t about run
// on (run may be [NoRun]). Only [ObservationTypes] are observations, each
// published by the one role NATS permissions allow.
func (n Namespace) Observed(run string, t EventType) (string, error) {
	if run != NoRun {
		if err := ValidateToken("run id", run); err != nil {
			return "", err
		}
	}
	if _, ok := ObservationTypes[t]; !ok {
		return "", fmt.Errorf("%w: %q is not an observation type", ErrInvalidSubject, t)
	}
	return n.join(KindObserved, run, string(t)), nil
}

// TimerSchedule is the subject a timer of run is scheduled on; timer is a
// token naming the timer.
func (n Namespace) TimerSchedule(run, timer string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	if err := ValidateToken("timer", timer); err != nil {
		return "", err
	}
	return n.join(KindTimers, "at", run, timer), nil
}

// TimerDue is the subject run's timers fire onto.
func (n Namespace) TimerDue(run string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(KindTimers, "due", run), nil
}

// TimersDue returns the wildcard matching every run's due timers (what
// TimerDue names), for the coordinator's consumer of due timers.
func (n Namespace) TimersDue() string { return n.join(KindTimers, "due", ">") }

// Notice is the subject of a notice of kind (KindReminder, KindEscalated or
// KindExpired) about run's interrupts, for notifiers.
func (n Namespace) Notice(kind Kind, agent, run string) (string, error) {
	switch kind {
	case KindReminder, KindEscalated, KindExpired:
	default:
		return "", fmt.Errorf("%w: %q is not a notice kind", ErrInvalidSubject, kind)
	}
	return n.agentRun(kind, agent, run)
}

// AGUI is the subject of the AG-UI events the passes of agent's run emit.
func (n Namespace) AGUI(agent, run string) (string, error) {
	return n.agentRun(KindAGUI, agent, run)
}

// NoRun is the run token of events about input that names no valid run.
const NoRun = "_"

// DeadLetter is the subject dead letters of source (a consumer name) go to.
func (n Namespace) DeadLetter(source string) (string, error) {
	if err := ValidateToken("dead-letter source", source); err != nil {
		return "", err
	}
	return n.join(KindDLQ, source), nil
}

// All returns the wildcard matching every subject of kind, for example
// "interlock.suspended.>".
func (n Namespace) All(kind Kind) string { return n.join(kind, ">") }

// RunEvents returns the wildcard matching every event of run.
func (n Namespace) RunEvents(run string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(KindEvents, run, "*"), nil
}

// AllEvents returns the wildcard matching every event of every run.
func (n Namespace) AllEvents() string { return n.join(KindEvents, "*", "*") }

// RunSuspensions returns the wildcard matching run's suspensions, whatever
// its agent.
func (n Namespace) RunSuspensions(run string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(KindSuspended, "*", run), nil
}

// RunOutcomes returns the wildcard matching run's pass outcomes:
// suspensions, completions and failures.
func (n Namespace) RunOutcomes(agent, run string) (string, error) {
	if _, err := n.agentRun(KindSuspended, agent, run); err != nil {
		return "", err
	}
	return n.join(anyKind, agent, run), nil
}

// AllRunOutcomes returns the wildcard matching run's pass outcomes of
// every agent (and whatever else the runs stream holds on four tokens
// ending in the run's id: parse what it matches).
func (n Namespace) AllRunOutcomes(run string) (string, error) {
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(anyKind, "*", run), nil
}

func (n Namespace) agentRun(kind Kind, agent, run string) (string, error) {
	if err := ValidateToken("agent", agent); err != nil {
		return "", err
	}
	if err := ValidateToken("run id", run); err != nil {
		return "", err
	}
	return n.join(kind, agent, run), nil
}

func (n Namespace) join(kind Kind, tokens ...string) string {
	return n.prefix + "." + strings.Join(append([]string{string(kind)}, tokens...), ".")
}

// anyKind is the wildcard in a subject's kind position.
const anyKind Kind = "*"

// Address is a parsed Interlock subject. Fields that the kind does not have
// are empty.
type Address struct {
	Kind   Kind
	Agent  string
	Run    string
	Event  EventType
	Source string
	// Timer is set on timer schedules; a due timer has none.
	Timer string
	// Approver is the identity a decision was published as, if any.
	Approver string
	// Requester is who started a run, on a start subject that names one.
	Requester string
}

// Parse splits subject into its parts, validating every token. The error
// wraps [ErrInvalidSubject] or [ErrInvalidToken].
func (n Namespace) Parse(subject string) (Address, error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".")
	if !ok || n.prefix == "" {
		return Address{}, fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.prefix+".")
	}
	t := strings.Split(rest, ".")
	kind := Kind(t[0])
	want := map[Kind]int{
		KindWork: 2, KindStart: 2, KindSuspended: 3, KindCompleted: 3, KindFailed: 3,
		KindResume: 2, KindEvents: 3, KindObserved: 3, KindDLQ: 2,
		KindReminder: 3, KindEscalated: 3, KindExpired: 3, KindAGUI: 3, KindAsk: 3,
	}
	if kind == KindTimers {
		return n.parseTimer(subject, t)
	}
	count, known := want[kind]
	if (kind == KindResume || kind == KindStart) && len(t) == 3 {
		count = 3 // resume.<run>.<approver>, start.<agent>.<requester>
	}
	if !known {
		return Address{}, fmt.Errorf("%w: %q has unknown kind %q", ErrInvalidSubject, subject, t[0])
	}
	if len(t) != count {
		want := strconv.Itoa(count)
		switch kind {
		case KindResume:
			want = "2 (resume.<run>) or 3 (resume.<run>.<approver>)"
		case KindStart:
			want = "2 (start.<agent>) or 3 (start.<agent>.<requester>)"
		}
		return Address{}, fmt.Errorf("%w: %q has %d tokens after the prefix, %s subjects have %s",
			ErrInvalidSubject, subject, len(t), t[0], want)
	}
	a := Address{Kind: kind}
	var err error
	switch kind {
	case KindWork, KindStart:
		a.Agent, err = t[1], ValidateToken("agent", t[1])
		if err == nil && len(t) == 3 {
			a.Requester, err = t[2], ValidateToken("requester", t[2])
		}
	case KindSuspended, KindCompleted, KindFailed, KindReminder, KindEscalated, KindExpired, KindAGUI, KindAsk:
		a.Agent, a.Run = t[1], t[2]
		if err = ValidateToken("agent", t[1]); err == nil {
			err = ValidateToken("run id", t[2])
		}
	case KindResume:
		a.Run, err = t[1], ValidateToken("run id", t[1])
		if err == nil && len(t) == 3 {
			a.Approver, err = t[2], ValidateToken("approver", t[2])
		}
	case KindEvents, KindObserved:
		a.Run, a.Event = t[1], EventType(t[2])
		if t[1] != NoRun {
			err = ValidateToken("run id", t[1])
		}
		if err == nil {
			err = ValidateToken("event type", t[2])
		}
	case KindDLQ:
		a.Source, err = t[1], ValidateToken("dead-letter source", t[1])
	}
	if err != nil {
		return Address{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return a, nil
}

// parseTimer parses <prefix>.timers.at.<run>.<timer> and
// <prefix>.timers.due.<run>.
func (n Namespace) parseTimer(subject string, t []string) (Address, error) {
	switch {
	case len(t) == 4 && t[1] == "at":
		if err := ValidateToken("run id", t[2]); err != nil {
			return Address{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
		if err := ValidateToken("timer", t[3]); err != nil {
			return Address{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
		return Address{Kind: KindTimers, Run: t[2], Timer: t[3]}, nil
	case len(t) == 3 && t[1] == "due":
		if err := ValidateToken("run id", t[2]); err != nil {
			return Address{}, fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
		}
		return Address{Kind: KindTimers, Run: t[2]}, nil
	}
	return Address{}, fmt.Errorf("%w: %q is not timers.at.<run>.<timer> or timers.due.<run>", ErrInvalidSubject, subject)
}

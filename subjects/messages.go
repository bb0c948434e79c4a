package subjects

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version is the protocol version this package speaks; every message carries
// it in its "version" field.
const Version = 1

// Size limits enforced by the decoders.
const (
	// MaxMessageSize bounds suspensions, completions, failures and work items
	// (the NATS server's default max_payload).
	MaxMessageSize = 1 << 20
	// MaxDecisionSize bounds one decision.
	MaxDecisionSize = 64 << 10
)

// Core interrupt reasons. Reason is an open string: other values are allowed.
const (
	ReasonToolCall      = "tool_call"
	ReasonInputRequired = "input_required"
	ReasonConfirmation  = "confirmation"
)

// Interrupt is one question a run is blocked on. Its shape is the AG-UI 1.0
// Interrupt plus the approvers allowed to decide it.
type Interrupt struct {
	// ID is deterministic for the run, tool call and ordinal, so a replay
	// finds its decision.
	ID string `json:"id"`
	// Reason is open; see ReasonToolCall and friends for the core values.
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	// ResponseSchema is a JSON Schema object a resolved payload must satisfy.
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"`
	ExpiresAt      *time.Time      `json:"expiresAt,omitempty"`
	// Metadata is a JSON object, passed through untouched.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Approvers and ApproverGroups, when either is set, are the only
	// identities (or members of groups) allowed to decide. Decisions must
	// then be published on <prefix>.resume.<run>.<approver>.
	Approvers      []string `json:"approvers,omitempty"`
	ApproverGroups []string `json:"approverGroups,omitempty"`
	// OnExpiry says what happens at ExpiresAt; default: cancel.
	OnExpiry *ExpiryPolicy `json:"onExpiry,omitempty"`
	// RemindBeforeSeconds lists reminders, in seconds before ExpiresAt;
	// default: the coordinator's.
	RemindBeforeSeconds []int `json:"remindBeforeSeconds,omitempty"`
	// Sensitive marks an interrupt whose answer is never shown (reads,
	// events, logs, notifications): only the fact that it was given. Unset,
	// it is true for ReasonInputRequired and false otherwise.
	Sensitive *bool `json:"sensitive,omitempty"`
	// OneClickLinks, set to false, turns one-click decision links off for
	// this interrupt: the gateway mints none, and its approvers decide in
	// the inbox or with the CLI. Unset, links are on where a sink carries
	// them.
	OneClickLinks *bool `json:"oneClickLinks,omitempty"`
	// ChatDecisions, set to false, forbids deciding this interrupt from a
	// chat (the buttons and forms of a Slack message): the message shows
	// the question and the inbox link only, and the gateway refuses a
	// click with chat_off. Unset, chat decisions are on where a sink
	// carries them.
	ChatDecisions *bool `json:"chatDecisions,omitempty"`
	// Call is the tool call the interrupt gates, with its digest
	// (version 2).
	Call *Call `json:"call,omitempty"`
	// Policy asks for votes (version 2): in a suspension the agent's
	// request, in the run record the effective policy.
	Policy *Policy `json:"policy,omitempty"`
}

// ChatAllowed reports whether the interrupt may be decided from a chat.
func (in *Interrupt) ChatAllowed() bool { return in.ChatDecisions == nil || *in.ChatDecisions }

// LinksAllowed reports whether the interrupt allows one-click links.
func (in *Interrupt) LinksAllowed() bool { return in.OneClickLinks == nil || *in.OneClickLinks }

// IsSensitive reports whether the interrupt's answer must be withheld from
// every read: Sensitive when set, otherwise whether it asks for input.
func (in *Interrupt) IsSensitive() bool {
	if in.Sensitive != nil {
		return *in.Sensitive
	}
	return in.Reason == ReasonInputRequired
}

// ExpiryAction is what happens to an interrupt at its deadline.
type ExpiryAction string

// Expiry actions.
const (
	ExpiryCancel   ExpiryAction = "cancel"
	ExpiryResolve  ExpiryAction = "resolve"
	ExpiryEscalate ExpiryAction = "escalate"
)

// ExpiryPolicy is what happens to an interrupt nobody answered in time.
// Silence is never approval: "resolve" applies only a payload the agent
// itself chose.
type ExpiryPolicy struct {
	// Action is cancel (the default), resolve or escalate.
	Action ExpiryAction `json:"action"`
	// Payload is the answer resolve applies.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Approvers are added to those allowed to decide when escalating.
	Approvers []string `json:"approvers,omitempty"`
	// ExtendSeconds moves the deadline on each escalation; Times bounds the
	// escalations (default 1), after which the interrupt is cancelled.
	ExtendSeconds int `json:"extendSeconds,omitempty"`
	Times         int `json:"times,omitempty"`
}

// Timer is the body of a durable timer; it fires onto
// <prefix>.timers.due.<run> at At.
type Timer struct {
	Version int `json:"version"`
	// Name is the timer's token, unique per interrupt, deadline and kind.
	Name        string `json:"name"`
	RunID       string `json:"runId"`
	InterruptID string `json:"interruptId"`
	// Kind is "expire" or "remind".
	Kind TimerKind `json:"kind"`
	// Deadline is the interrupt's deadline the timer was armed for; a timer
	// whose deadline has since moved (an escalation) does nothing.
	Deadline time.Time `json:"deadline"`
	At       time.Time `json:"at"`
}

// TimerKind is what a timer does when due.
type TimerKind string

// Timer kinds.
const (
	TimerExpire TimerKind = "expire"
	TimerRemind TimerKind = "remind"
)

// ExpiryApprover is the approver of decisions an expiry applies.
const ExpiryApprover = "interlock:expiry"

// Notice tells notifiers about interrupts still waiting: a reminder, an
// escalation or an expiry. It is published on <prefix>.<kind>.<agent>.<run>.
type Notice struct {
	PassRef
	// Kind is reminder, escalated or expired.
	Kind Kind `json:"kind"`
	// Seq counts notices of this kind about the interrupt: reminder 1, 2...
	Seq int `json:"seq"`
	// Timer names the timer behind the notice: unique per interrupt,
	// deadline and kind, so it tells any two notices apart.
	Timer      string      `json:"timer"`
	Interrupts []Interrupt `json:"interrupts"`
	At         time.Time   `json:"at"`
	Detail     string      `json:"detail,omitempty"`
	// Status, on an expiry, is what the expiry applied: cancelled, or
	// resolved with the agent's own default.
	Status Status `json:"status,omitempty"`
	// Tallies, on a reminder or an escalation (version 2), says where the
	// votes stand on each listed interrupt that has a policy, by interrupt
	// id: notifiers, which may not read run records, show "1 of 2
	// approvals" and who is still awaited from it.
	Tallies map[string]Tally `json:"tallies,omitempty"`
}

// Journal maps a journaled step's key to its recorded JSON result.
type Journal map[string]json.RawMessage

// PassRef identifies one pass of a run. Work items and pass outcomes start
// with these fields.
type PassRef struct {
	Version  int    `json:"version"`
	RunID    string `json:"runId"`
	Agent    string `json:"agent"`
	ThreadID string `json:"threadId,omitempty"`
	// Pass counts the run's passes from 0; the coordinator uses it to drop
	// repeats of a pass it has already recorded.
	Pass int `json:"pass"`
	// Input is the run's input, as the first pass received it.
	Input json.RawMessage `json:"input,omitempty"`
}

// Suspension is published once per pass that stops on interrupts, on
// <prefix>.suspended.<agent>.<run>. It carries every interrupt of the pass.
type Suspension struct {
	PassRef
	Interrupts  []Interrupt `json:"interrupts"`
	Journal     Journal     `json:"journal,omitempty"`
	SuspendedAt time.Time   `json:"suspendedAt,omitzero"`
	// Requester, on a pass 0 suspension only, is the last token of the
	// start subject the worker received the run on (version 2): who
	// started the run, as NATS permissions bind it.
	Requester string `json:"requester,omitempty"`
}

// Completion is published when a pass finishes the run, on
// <prefix>.completed.<agent>.<run>.
type Completion struct {
	PassRef
	Result      json.RawMessage `json:"result,omitempty"`
	Journal     Journal         `json:"journal,omitempty"`
	CompletedAt time.Time       `json:"completedAt,omitzero"`
}

// Failure is published when a pass fails the run, on
// <prefix>.failed.<agent>.<run>.
type Failure struct {
	PassRef
	Error    string    `json:"error"`
	FailedAt time.Time `json:"failedAt,omitzero"`
}

// Status is the status of a decision, as in AG-UI 1.0 resume entries.
type Status string

// Decision statuses.
const (
	StatusResolved  Status = "resolved"
	StatusCancelled Status = "cancelled"
)

// Decision is an answer to one interrupt, published on <prefix>.resume.<run>:
// an AG-UI 1.0 resume entry plus a decision id (the dedup key) and the
// approver's identity.
type Decision struct {
	Version     int    `json:"version"`
	DecisionID  string `json:"decisionId"`
	InterruptID string `json:"interruptId"`
	Status      Status `json:"status"`
	// Payload is any JSON value but null; absent means "no payload".
	// false, 0, "" and {} are answers.
	Payload  json.RawMessage `json:"payload,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Approver string          `json:"approver,omitempty"`
	Comment  string          `json:"comment,omitempty"`
	// CallDigest is the digest of the call a vote approves (version 2).
	CallDigest string `json:"callDigest,omitempty"`
	// Arguments are a vote's edited arguments (version 2): it approves
	// the interrupt's tool with these.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Votes, ExecutionKey and Rule are set by the coordinator only, on
	// the final decision of an interrupt with a policy or a call
	// (version 2): every vote counted, the approved call's execution key,
	// and the operator rule that made the decision.
	Votes        []Vote `json:"votes,omitempty"`
	ExecutionKey string `json:"executionKey,omitempty"`
	Rule         string `json:"rule,omitempty"`
}

// Cancelled reports whether the interrupt was cancelled (denied or expired).
func (d Decision) Cancelled() bool { return d.Status == StatusCancelled }

// Decode unmarshals the payload into v. It fails when there is no payload.
func (d Decision) Decode(v any) error {
	if len(d.Payload) == 0 {
		return fmt.Errorf("interrupt %s: decision has no payload", d.InterruptID)
	}
	return json.Unmarshal(d.Payload, v)
}

// Work is a work item on <prefix>.work.<agent>: run one pass of a run. Pass 0
// is the first pass; a replay carries every decision and journaled step the
// run has so far.
type Work struct {
	PassRef
	Decisions []Decision `json:"decisions,omitempty"`
	Journal   Journal    `json:"journal,omitempty"`
}

// FirstPass reports whether w starts a run: pass 0, with no decisions and
// no journal. Only such an item may arrive on the start subject.
func (w Work) FirstPass() bool {
	return w.Pass == 0 && len(w.Decisions) == 0 && len(w.Journal) == 0
}

// Outcome is the coordinator's verdict on one decision.
type Outcome string

// Verdict outcomes.
const (
	OutcomeAccepted  Outcome = "accepted"
	OutcomeRejected  Outcome = "rejected"
	OutcomeDuplicate Outcome = "duplicate"
)

// Code is a stable reason a decision or an input was rejected.
type Code string

// Rejection codes.
const (
	CodeMalformed          Code = "malformed"
	CodeUnsupportedVersion Code = "unsupported_version"
	CodeTooLarge           Code = "too_large"
	CodeInvalidSubject     Code = "invalid_subject"
	CodeUnknownRun         Code = "unknown_run"
	CodeUnknownInterrupt   Code = "unknown_interrupt"
	CodeAlreadyDecided     Code = "already_decided"
	CodeExpired            Code = "expired"
	CodeNotAllowed         Code = "not_allowed"
	CodeSchemaMismatch     Code = "schema_mismatch"
	// CodeStalePass: an outcome for a pass the run has already moved past.
	CodeStalePass Code = "stale_pass"
	// CodeSchemaUnsafe: a suspension's responseSchema loads something
	// external, or is over the size, depth or combinator limits.
	CodeSchemaUnsafe Code = "schema_unsafe"
	// CodeSchemaBudget: checking a payload against responseSchema took
	// longer than the validation budget.
	CodeSchemaBudget Code = "schema_budget"
	// CodeWrongAgent: a pass outcome published on another agent's subjects
	// than the run's agent (the agent token of its subject is not the
	// run's): one agent may not report, complete or fail another's runs.
	CodeWrongAgent Code = "wrong_agent"
	// CodeReplyRefused: a decision's Interlock-Reply-To named a subject
	// outside the sender's own inbox; no verdict was sent there.
	CodeReplyRefused Code = "reply_refused"
	// CodeRecordTooLarge: the run record would not fit the server's max
	// payload: a suspension whose record, with the largest decision allowed
	// for each of its interrupts, would not fit (refused, the run fails), or
	// a decision, expiry or outcome the record cannot take (refused,
	// nothing changes). See RecordBound.
	CodeRecordTooLarge Code = "record_too_large"
	// CodeDecisionIDReused: the identity sent a decision id it already
	// used with another body (another answer, or another interrupt of
	// the run); the first decision stands.
	CodeDecisionIDReused Code = "decision_id_reused"
)

// Codes of access_refused events: requests the gateway refused before they
// reached a run.
const (
	CodeUnauthenticated Code = "unauthenticated"
	CodeRateLimited     Code = "rate_limited"
	CodeCrossOrigin     Code = "cross_origin"
	CodeLinkInvalid     Code = "link_invalid"
	CodeLinkExpired     Code = "link_expired"
	CodeLinkUsed        Code = "link_used"
)

// Codes of the HTTP gateway's error bodies, besides the ones above.
const (
	CodeInvalidJSON Code = "invalid_json"
	CodeBadRequest  Code = "bad_request"
	CodeNotFound    Code = "not_found"
	// CodeUnavailable: JetStream has no leader for a stream right now (an
	// election); try again shortly.
	CodeUnavailable Code = "unavailable"
)

// Codes of the AG-UI bridge's RUN_ERROR events, besides the ones above.
const (
	CodeBadInput        Code = "bad_input"
	CodeDuplicateEntry  Code = "duplicate_entry"
	CodeMissingEntry    Code = "missing_entry"
	CodeLostState       Code = "lost_state"
	CodeNotInterrupted  Code = "not_interrupted"
	CodeRejected        Code = "rejected"
	CodeRunFailed       Code = "run_failed"
	CodeAgentNotAllowed Code = "agent_not_allowed"
	CodeNotOwner        Code = "not_owner"
	CodeRunExists       Code = "run_exists"
)

// Verdict tells a decision's sender what became of it. It is the body of the
// decision_* events and of the reply sent to the Interlock-Reply-To header.
type Verdict struct {
	Version     int     `json:"version"`
	DecisionID  string  `json:"decisionId,omitempty"`
	RunID       string  `json:"runId,omitempty"`
	InterruptID string  `json:"interruptId,omitempty"`
	Outcome     Outcome `json:"outcome"`
	// Approver is the identity the decision was published as; empty for
	// an anonymous one.
	Approver string `json:"approver,omitempty"`
	// Via is the path it came by, from the Interlock-Via header: cli,
	// gateway, link, sdk or whatever the sender says (informational).
	Via    string `json:"via,omitempty"`
	Code   Code   `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Replay is true when this decision was the last one the suspension was
	// waiting for, so a replay pass was scheduled.
	Replay bool      `json:"replay,omitempty"`
	At     time.Time `json:"at"`
	// Tally says where the votes stand, on verdicts about an interrupt
	// with a policy (version 2).
	Tally *Tally `json:"tally,omitempty"`
	// Rule names the operator rule that made the decision (version 2).
	Rule string `json:"rule,omitempty"`
}

// EventType names a lifecycle or audit event; it is the last subject token.
type EventType string

// Event types.
const (
	EventSuspended         EventType = "suspended"
	EventResumed           EventType = "resumed"
	EventCompleted         EventType = "completed"
	EventFailed            EventType = "failed"
	EventDecisionAccepted  EventType = "decision_accepted"
	EventDecisionRejected  EventType = "decision_rejected"
	EventDecisionDuplicate EventType = "decision_duplicate"
	EventInputRejected     EventType = "input_rejected"
	// Timer events: a reminder was sent, an interrupt escalated or expired.
	EventReminded  EventType = "reminded"
	EventEscalated EventType = "escalated"
	EventExpired   EventType = "expired"
	// EventTimerArmed is a history entry of records written before issue
	// 25: timers set for a deadline (the suspended event's detail says so
	// now).
	EventTimerArmed EventType = "timer_armed"
	// EventNotificationFailed: a notifier gave up delivering to a sink.
	EventNotificationFailed EventType = "notification_failed"
	// EventAccessRefused: the gateway refused a request (a failed login, a
	// refused link, a read not allowed, a cross-origin or rate-limited
	// request); Code says which.
	EventAccessRefused EventType = "access_refused"
	// EventReplyRefused: a verdict was not sent where a decision asked,
	// because the subject is not under the sender's inbox prefix.
	EventReplyRefused EventType = "reply_refused"
	// EventTopologyDrift: the coordinator found a stream or bucket that no
	// longer keeps what was provisioned (a limit lowered, republish or
	// sources added, subjects changed); Detail says each field, what was
	// wanted and what was found. It is about no run (run token "_").
	EventTopologyDrift EventType = "topology_drift"
	// EventPendingIndexBuilt: the coordinator built the pending index from
	// the run records, because it found the index without its marker: new
	// (a deployment's first start), or lost (a server restart lost the
	// memory-backed index, or an operator deleted its bucket). Detail says
	// how many runs it read and how many waiting interrupts it put. It is
	// about no run (run token "_").
	EventPendingIndexBuilt EventType = "pending_index_built"
	// EventRecordsRestored: the coordinator put the run records back from
	// the copies the audit trail carries (Event.Record), because it found
	// the runs bucket, kept in memory, without its marker: new, or emptied
	// by a server restart. Detail says how many records it put back. It is
	// about no run (run token "_").
	EventRecordsRestored EventType = "records_restored"
	// EventRecorded carries a copy of a run record (Record) when the event
	// of the change that wrote it had been stored before, with the copy of
	// another write (an input delivered again after the runs bucket, kept
	// in memory, lost a write): written only then.
	EventRecorded EventType = "recorded"
)

// Event is published by the coordinator on <prefix>.events.<run>.<type> for
// every transition of a run and every input it rejects, and for every
// observation another role reported (Observer says whose). Readers take
// Type and RunID from the subject ([StoredEvent]), never from the body.
type Event struct {
	Version int       `json:"version"`
	Type    EventType `json:"type"`
	RunID   string    `json:"runId"`
	// Observer is set on the entries of another role's observation:
	// ObserverNotifier or ObserverGateway, the one role whose NATS
	// permissions let it publish that type (ObservationTypes). Readers
	// derive it from the type; the coordinator writes it on the entries
	// it records from observations.
	Observer string    `json:"observer,omitempty"`
	Agent    string    `json:"agent,omitempty"`
	Pass     int       `json:"pass"`
	At       time.Time `json:"at"`
	// InterruptIDs are the interrupts a suspension is waiting for.
	InterruptIDs []string `json:"interruptIds,omitempty"`
	// Verdict is set on decision_* events.
	Verdict *Verdict `json:"verdict,omitempty"`
	// Code and Detail say why an input was rejected, or why a run failed.
	Code   Code   `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Subject is the subject of a rejected input.
	Subject string `json:"subject,omitempty"`
	// Sink and Attempts are set on notification_failed events.
	Sink     string `json:"sink,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	// Identity, Address and Request are set on access_refused events: who
	// (when known), from which network address, and the request's method
	// and path (a link's token replaced by its id).
	Identity string `json:"identity,omitempty"`
	Address  string `json:"address,omitempty"`
	Request  string `json:"request,omitempty"`
	// Record is the run record after the transition this event is about,
	// sealed (deflated, then AES-256-GCM under a key only the coordinator
	// and admin read, the run id as additional data), as base64: set by
	// the coordinator when the runs bucket is kept in memory, so that the
	// record can be restored from the audit trail. Readers other than the
	// coordinator see ciphertext; StoredEvent leaves it out.
	Record string `json:"record,omitempty"`
}

// Observers: the roles whose observations the audit trail records.
const (
	ObserverNotifier = "notifier"
	ObserverGateway  = "gateway"
)

// ObservationTypes are the event types other roles report as
// observations, each with the one role NATS permissions let publish it.
var ObservationTypes = map[EventType]string{
	EventNotificationFailed: ObserverNotifier,
	EventAccessRefused:      ObserverGateway,
}

// StoredEvent is the event stored as data under subject: its type and run
// come from the subject, which NATS permissions vouch for, never from the
// body, and it keeps only the fields an event of that type carries (a
// verdict only on decision events, the observer of an observation). ns
// parses subject; the error wraps ErrInvalidSubject or ErrMalformed.
func StoredEvent(ns Namespace, subject string, data []byte) (Event, error) {
	a, err := ns.Parse(subject)
	if err != nil {
		return Event{}, err
	}
	if a.Kind != KindEvents {
		return Event{}, fmt.Errorf("%w: %q is not an events subject", ErrInvalidSubject, subject)
	}
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return Event{}, fmt.Errorf("%w: event on %s: %s", ErrMalformed, subject, jsonError(err))
	}
	ev.Type = a.Event
	if a.Run != NoRun || ValidateToken("run id", ev.RunID) == nil {
		ev.RunID = a.Run
	}
	switch ev.Type {
	case EventDecisionAccepted, EventDecisionRejected, EventDecisionDuplicate, EventVoteRecorded:
	default:
		ev.Verdict = nil
	}
	ev.Observer = ObservationTypes[ev.Type]
	ev.Record = "" // the coordinator's alone (store.OpenRecord)
	return ev, nil
}

// RunStatus is where a run stands.
type RunStatus string

// Run statuses.
const (
	RunSuspended RunStatus = "suspended"
	RunResuming  RunStatus = "resuming"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
)

// Terminal reports whether no pass will follow.
func (s RunStatus) Terminal() bool { return s == RunCompleted || s == RunFailed }

// Run is the run record the coordinator keeps in the runs KV bucket, keyed by
// run id. It is a projection of the streams: only the coordinator writes it.
type Run struct {
	Version  int       `json:"version"`
	RunID    string    `json:"runId"`
	Agent    string    `json:"agent"`
	ThreadID string    `json:"threadId,omitempty"`
	Status   RunStatus `json:"status"`
	// Pass is the pass of the last outcome recorded.
	Pass       int              `json:"pass"`
	Input      json.RawMessage  `json:"input,omitempty"`
	Interrupts []InterruptState `json:"interrupts"`
	Journal    Journal          `json:"journal,omitempty"`
	Result     json.RawMessage  `json:"result,omitempty"`
	Error      string           `json:"error,omitempty"`
	// History is what records written before issue 25 kept of their
	// transitions, rewritten whole on every write. The coordinator writes
	// none now: the run's events (the audit trail) are its history. Old
	// records keep theirs, and reads show it.
	History   []HistoryEntry `json:"history,omitempty"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
	// SuspensionSeq is the stream sequence of the last suspension recorded.
	SuspensionSeq uint64 `json:"suspensionSeq,omitempty"`
	// TraceParent is the W3C trace context of the run's last pass; replays
	// continue its trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Requester is who started the run, as the transport proved it
	// (version 2): recorded at the run's first suspension, never changed.
	Requester string `json:"requester,omitempty"`
	// RuleFailures are the operator rules that failed on the run's
	// interrupts when they were raised, as their rule_failed events say
	// (version 2): kept so that a suspension delivered again audits them
	// again, under the same message ids.
	RuleFailures []RuleFailure `json:"ruleFailures,omitempty"`
	// Writes counts the writes of this record, this one included (version
	// 2): of two copies of a record, the one with more writes is the later
	// (a runs bucket kept in memory is restored from the copies the audit
	// trail carries, and two coordinators' events may be stored in either
	// order).
	Writes uint64 `json:"writes,omitempty"`
}

// RuleFailure is an operator rule that failed on an interrupt when it was
// raised, in pass Pass.
type RuleFailure struct {
	InterruptID string `json:"interruptId"`
	Pass        int    `json:"pass"`
	Detail      string `json:"detail"`
}

// InterruptState is an interrupt of a run with the pass that raised it and,
// once decided, its decision.
type InterruptState struct {
	Interrupt
	Pass      int        `json:"pass"`
	Decision  *Decision  `json:"decision,omitempty"`
	DecidedAt *time.Time `json:"decidedAt,omitempty"`
	// DecisionSeq is the decisions-stream sequence of the accepted decision
	// (0 when a timer decided); Order counts the run's decisions from 1.
	DecisionSeq uint64 `json:"decisionSeq,omitempty"`
	Order       int    `json:"order,omitempty"`
	// Fired lists the timers (by name) already handled for this interrupt.
	Fired []string `json:"fired,omitempty"`
	// Escalations counts the deadline's extensions; Reminders the reminders
	// sent for the current deadline.
	Escalations int `json:"escalations,omitempty"`
	Reminders   int `json:"reminders,omitempty"`
	// Votes are the open votes of an undecided interrupt with a policy,
	// oldest first (version 2); the final decision carries them on.
	Votes []Vote `json:"votes,omitempty"`
	// VoteSeqs is, by identity, the decisions-stream sequence of the
	// latest vote message applied to the interrupt: a vote, a change or a
	// withdrawal (version 2). An earlier message of theirs delivered again
	// (after a crash) is stale and changes nothing.
	VoteSeqs map[string]uint64 `json:"voteSeqs,omitempty"`
	// AnswerWithheld, only in reads, says the decision's payload, comment
	// and metadata were removed because the interrupt is sensitive.
	AnswerWithheld bool `json:"answerWithheld,omitempty"`
	// Withheld, only in reads, says the reader may neither decide nor read
	// this interrupt: of it only its id, reason, tool call, pass, order,
	// decision time and decision status are shown (authz.View).
	Withheld bool `json:"withheld,omitempty"`
}

// Pending lists the interrupts of r that wait for a decision.
func (r *Run) Pending() []InterruptState {
	var out []InterruptState
	if r.Status != RunSuspended {
		return nil
	}
	for _, in := range r.Interrupts {
		if in.Decision == nil {
			out = append(out, in)
		}
	}
	return out
}

// HistoryEntry is one transition in the history of a record written
// before issue 25 (Run.History).
type HistoryEntry struct {
	At          time.Time `json:"at"`
	Type        EventType `json:"type"`
	Pass        int       `json:"pass"`
	InterruptID string    `json:"interruptId,omitempty"`
	DecisionID  string    `json:"decisionId,omitempty"`
	Approver    string    `json:"approver,omitempty"`
	Detail      string    `json:"detail,omitempty"`
}

// PendingInterrupt is an entry of the pending index: an interrupt waiting
// for a decision, with its run.
type PendingInterrupt struct {
	RunID    string `json:"runId"`
	Agent    string `json:"agent"`
	ThreadID string `json:"threadId,omitempty"`
	InterruptState
	SuspendedAt time.Time `json:"suspendedAt"`
}

// Package authz is Interlock's one authorization rule: who may decide an
// interrupt and who may read a run. The coordinator, the gateway, the links,
// the inbox and every other path ask it; none keeps a copy of the rule.
package authz

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/interlockhq/interlock/subjects"
)

// ErrNotAllowed is matched by every refusal of this package.
var ErrNotAllowed = errors.New("not allowed")

// Principal is who asks: an identity (empty: anonymous), its groups, and
// whether it holds the auditor role.
type Principal struct {
	Name   string
	Groups []string
	// Auditor may read every run, interrupt and audit entry; it decides
	// nothing more than its name and groups allow.
	Auditor bool
	// Agents lists the agents p may start (through the AG-UI bridge); "*"
	// is every agent.
	Agents []string
}

// Decide returns nil when p may decide in, or an error wrapping
// ErrNotAllowed that says why. An interrupt that names neither approvers nor
// approver groups may be decided by anyone who can reach it, anonymous
// callers included; otherwise only a named approver or a member of a named
// group may decide.
func Decide(in subjects.Interrupt, p Principal) error {
	if len(in.Approvers) == 0 && len(in.ApproverGroups) == 0 {
		return nil
	}
	if p.Name == "" {
		return fmt.Errorf("%w: interrupt %s names its approvers; publish on the resume subject "+
			"with your identity (resume.<run>.<approver>), where NATS permissions vouch for it", ErrNotAllowed, in.ID)
	}
	if slices.Contains(in.Approvers, p.Name) {
		return nil
	}
	for _, g := range p.Groups {
		if slices.Contains(in.ApproverGroups, g) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not decide interrupt %s", ErrNotAllowed, p.Name, in.ID)
}

// MayStart reports whether p may start runs of agent.
func MayStart(agent string, p Principal) bool {
	return slices.Contains(p.Agents, agent) || slices.Contains(p.Agents, "*")
}

// MayDecide reports whether Decide allows p to decide in.
func MayDecide(in subjects.Interrupt, p Principal) bool { return Decide(in, p) == nil }

// MayRead reports whether p may see in: an auditor sees every interrupt,
// anyone else the interrupts they may decide.
func MayRead(in subjects.Interrupt, p Principal) bool { return p.Auditor || MayDecide(in, p) }

// MayReadRun reports whether p may see run rec, its record and its audit
// trail: an auditor sees every run, anyone else the runs with an interrupt
// (of any pass) they may decide. A run that never asked anything is the
// auditors' alone.
func MayReadRun(rec *subjects.Run, p Principal) bool {
	if p.Auditor {
		return true
	}
	for _, in := range rec.Interrupts {
		if MayDecide(in.Interrupt, p) {
			return true
		}
	}
	return false
}

// Redact returns rec as every reader sees it: the decisions of sensitive
// interrupts keep their status, approver and time, and lose their payload,
// comment and metadata (marked AnswerWithheld). Auditors see the same: the
// answer to a sensitive question is shown to nobody, only that it was given.
// View applies it, and withholds more from readers who are not auditors.
func Redact(rec *subjects.Run) *subjects.Run {
	cp := *rec
	cp.Interrupts = slices.Clone(rec.Interrupts)
	for i := range cp.Interrupts {
		cp.Interrupts[i] = redactAnswer(cp.Interrupts[i])
	}
	return &cp
}

// redactAnswer is st with the answer to a sensitive question removed.
func redactAnswer(st subjects.InterruptState) subjects.InterruptState {
	if st.Decision != nil && st.Decision.ExecutionKey != "" {
		// The execution key is the replay's alone: whoever reads the
		// record could otherwise claim the approved call's one use.
		d := *st.Decision
		d.ExecutionKey = ""
		st.Decision = &d
	}
	if !st.IsSensitive() || (st.Decision == nil && len(st.Votes) == 0) {
		return st
	}
	st.Votes = redactVotes(st.Votes)
	if st.Decision != nil {
		d := *st.Decision
		d.Payload, d.Comment, d.Metadata = nil, "", nil
		d.Votes = redactVotes(d.Votes)
		st.Decision = &d
	}
	st.AnswerWithheld = true
	return st
}

// redactVotes is votes without their answers (payload, comment, metadata).
func redactVotes(votes []subjects.Vote) []subjects.Vote {
	if len(votes) == 0 {
		return votes
	}
	out := slices.Clone(votes)
	for i := range out {
		out[i].Payload, out[i].Comment, out[i].Metadata = nil, "", nil
	}
	return out
}

// ViewInterrupt returns what p may see of interrupt st, and whether p may
// read it (MayRead). An interrupt p may read is shown whole, but for the
// answer to a sensitive question (Redact). One p may neither decide nor
// read keeps only its id, reason, tool call, pass, order, decision time and
// decision status, and is marked Withheld: the run waits on it, and what it
// asks, who may answer it and what was answered are its approvers' to see.
// Every read path (the gateway's run, history, listing and live stream, the
// AG-UI bridge, the CLI) shows interrupts through it or View.
func ViewInterrupt(st subjects.InterruptState, p Principal) (subjects.InterruptState, bool) {
	if MayRead(st.Interrupt, p) {
		return redactAnswer(st), true
	}
	out := subjects.InterruptState{Interrupt: subjects.Interrupt{ID: st.ID, Reason: st.Reason, ToolCallID: st.ToolCallID},
		Pass: st.Pass, DecidedAt: st.DecidedAt, Order: st.Order, Withheld: true}
	if st.Decision != nil {
		out.Decision = &subjects.Decision{Version: st.Decision.Version, InterruptID: st.ID, Status: st.Decision.Status}
	}
	return out, false
}

// View is the one function every read goes through: what reader p may see
// of run rec and of its events evs (either may be nil). Each interrupt is
// shown as ViewInterrupt shows it to p; the history entries of an old
// record, its rule failures and the events about interrupts withheld from
// p keep only their time, type, pass, interrupt and outcome (no approver,
// detail, subject or identity).
// Whether p may read the run at all is MayReadRun's to say, before; an
// auditor reads every interrupt, so sees everything but sensitive answers.
func View(p Principal, rec *subjects.Run, evs []subjects.Event) (*subjects.Run, []subjects.Event) {
	withheld := map[string]bool{}
	var out *subjects.Run
	if rec != nil {
		cp := *rec
		cp.Interrupts = make([]subjects.InterruptState, len(rec.Interrupts))
		for i, st := range rec.Interrupts {
			var readable bool
			cp.Interrupts[i], readable = ViewInterrupt(st, p)
			if !readable {
				withheld[st.ID] = true
			}
		}
		cp.History = slices.Clone(rec.History)
		for i, h := range cp.History {
			if h.InterruptID != "" && withheld[h.InterruptID] {
				cp.History[i] = subjects.HistoryEntry{At: h.At, Type: h.Type, Pass: h.Pass, InterruptID: h.InterruptID}
			}
		}
		cp.RuleFailures = slices.Clone(rec.RuleFailures)
		for i, f := range cp.RuleFailures {
			if withheld[f.InterruptID] {
				cp.RuleFailures[i].Detail = ""
			}
		}
		out = &cp
	}
	if evs == nil {
		return out, nil
	}
	if rec == nil && !p.Auditor {
		return out, []subjects.Event{}
	}
	outEvs := make([]subjects.Event, len(evs))
	for i, ev := range evs {
		outEvs[i] = viewEvent(ev, withheld)
	}
	return out, outEvs
}

// viewEvent is ev with what it says about withheld interrupts removed: an
// event about withheld interrupts only keeps its type, run, agent, pass,
// time, interrupts and code, and of its verdict the outcome.
func viewEvent(ev subjects.Event, withheld map[string]bool) subjects.Event {
	ids := slices.Clone(ev.InterruptIDs)
	if ev.Verdict != nil && ev.Verdict.InterruptID != "" {
		ids = append(ids, ev.Verdict.InterruptID)
	}
	if len(ids) == 0 || !slices.ContainsFunc(ids, func(id string) bool { return withheld[id] }) {
		return ev
	}
	out := subjects.Event{Version: ev.Version, Type: ev.Type, RunID: ev.RunID, Agent: ev.Agent, Pass: ev.Pass, At: ev.At,
		InterruptIDs: ev.InterruptIDs, Code: ev.Code}
	if v := ev.Verdict; v != nil {
		out.Verdict = &subjects.Verdict{Version: v.Version, RunID: v.RunID, InterruptID: v.InterruptID, Outcome: v.Outcome,
			Code: v.Code, Replay: v.Replay, At: v.At}
	}
	return out
}

// WhoMayDecide says in words who may decide in: its approvers and groups,
// or "anyone".
func WhoMayDecide(in subjects.Interrupt) string {
	who := slices.Clone(in.Approvers)
	for _, g := range in.ApproverGroups {
		who = append(who, "group "+g)
	}
	if len(who) == 0 {
		return "anyone"
	}
	return strings.Join(who, ", ")
}

// ErrRequesterExcluded is matched by Vote's refusal of the run's requester.
var ErrRequesterExcluded = fmt.Errorf("%w: the requester may not vote", ErrNotAllowed)

// Vote returns nil when p may vote on in, an interrupt with a policy, in a
// run started by requester (empty: nobody the transport proved): p may
// decide it (Decide), has an identity (a vote of nobody counts for
// nothing), and is not the requester unless the policy allows it. The
// refusal of the requester matches ErrRequesterExcluded.
func Vote(in subjects.Interrupt, p Principal, requester string) error {
	if err := Decide(in, p); err != nil {
		return err
	}
	if p.Name == "" {
		return fmt.Errorf("%w: interrupt %s is decided by votes of distinct identities; publish on the resume "+
			"subject with your identity (resume.<run>.<approver>)", ErrNotAllowed, in.ID)
	}
	if requester != "" && p.Name == requester && (in.Policy == nil || !in.Policy.AllowRequester) {
		return fmt.Errorf("%w: %s started this run and interrupt %s's policy does not let the requester approve it",
			ErrRequesterExcluded, p.Name, in.ID)
	}
	return nil
}

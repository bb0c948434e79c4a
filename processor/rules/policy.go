package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

// PolicyRules are the quorum rules of protocol version 2: an interrupt with
// a policy is decided by votes of distinct identities. See
// docs/protocol.md#the-tally.

// eligible is how many identities can vote on in under a record whose
// requester is requester, or -1 when anyone may (no approvers, no groups).
// Named approvers and group members are counted once.
func (s *Set) eligible(in subjects.Interrupt, requester string) (int, []string) {
	if len(in.Approvers) == 0 && len(in.ApproverGroups) == 0 {
		return -1, nil
	}
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if n == "" || n == subjects.PolicyApprover || seen[n] || (n == requester && !in.Policy.AllowRequester) {
			return
		}
		seen[n] = true
		names = append(names, n)
	}
	for _, a := range in.Approvers {
		add(a)
	}
	for _, g := range in.ApproverGroups {
		if s.Members == nil {
			continue
		}
		for _, m := range s.Members(g) {
			add(m)
		}
	}
	return len(names), names
}

// checkSatisfiable refuses a policy that needs more votes than identities
// can be eligible to give.
func (s *Set) checkSatisfiable(in subjects.Interrupt, requester string) error {
	if in.Policy == nil {
		return nil
	}
	n, _ := s.eligible(in, requester)
	if n < 0 {
		return nil
	}
	need := max(in.Policy.NeedApprovals(), in.Policy.NeedDenials())
	if need > n {
		excl := ""
		if requester != "" && !in.Policy.AllowRequester {
			excl = fmt.Sprintf(", the requester %s excluded", requester)
		}
		return subjects.Refusal(subjects.CodePolicyUnsatisfiable,
			"interrupt %s needs %d approvals and %d denials but at most %d identities can vote (approvers %v, groups %v%s)",
			in.ID, in.Policy.NeedApprovals(), in.Policy.NeedDenials(), n, in.Approvers, in.ApproverGroups, excl)
	}
	return nil
}

// approvedDigest is the digest of the call a decision approves on st: the
// call with the decision's edited arguments, or the interrupt's own. It
// refuses a digest the decision names that is not that one, and arguments
// or a digest where there is no call to approve.
func approvedDigest(st subjects.InterruptState, d subjects.Decision) (string, *Rejection) {
	if st.Call == nil {
		if d.CallDigest != "" || len(d.Arguments) > 0 {
			return "", Reject(subjects.CodeCallMismatch, "interrupt %s gates no tool call; send no callDigest or arguments", st.ID)
		}
		return "", nil
	}
	if d.Status != subjects.StatusResolved {
		if len(d.Arguments) > 0 {
			return "", Reject(subjects.CodeCallMismatch, "arguments go with an approval (status resolved) only")
		}
		if d.CallDigest != "" && d.CallDigest != st.Call.Digest {
			return "", Reject(subjects.CodeCallMismatch, "callDigest %s is not the digest of interrupt %s's call (%s)",
				d.CallDigest, st.ID, st.Call.Digest)
		}
		return st.Call.Digest, nil
	}
	want := st.Call.Digest
	if len(d.Arguments) > 0 {
		var err error
		if want, err = subjects.CallDigest(st.Call.Tool, d.Arguments); err != nil {
			return "", Reject(subjects.CodeCallMismatch, "the edited arguments have no digest: %v", err)
		}
	}
	if d.CallDigest != "" && d.CallDigest != want {
		what := "the interrupt's call"
		if len(d.Arguments) > 0 {
			what = "the call with the edited arguments"
		}
		return "", Reject(subjects.CodeCallMismatch, "callDigest %s is not the digest of %s (%s): the vote was cast on other arguments",
			d.CallDigest, what, want)
	}
	return want, nil
}

// voteOf returns the index of identity's open vote on st, or -1.
func voteOf(st subjects.InterruptState, identity string) int {
	return slices.IndexFunc(st.Votes, func(v subjects.Vote) bool { return v.Approver == identity })
}

// checkVote applies the vote rules to d, from identity p on interrupt i of
// rec, once the version 1 rules have passed.
func (s *Set) checkVote(rec *subjects.Run, st subjects.InterruptState, d subjects.Decision, p authz.Principal) *Rejection {
	if _, rej := approvedDigest(st, d); rej != nil && st.Policy == nil {
		return rej
	}
	if st.Policy == nil {
		if d.Status == subjects.StatusWithdrawn {
			return Reject(subjects.CodeNoVote, "interrupt %s takes no votes (it has no policy); nothing to withdraw", st.ID)
		}
		return nil
	}
	if err := authz.Vote(st.Interrupt, p, rec.Requester); errors.Is(err, authz.ErrRequesterExcluded) {
		return Reject(subjects.CodeRequesterExcluded, "%v", err)
	} else if err != nil {
		return Reject(subjects.CodeNotAllowed, "%v", err)
	}
	if _, rej := approvedDigest(st, d); rej != nil {
		return rej
	}
	mine := voteOf(st, p.Name)
	switch {
	case d.Status == subjects.StatusWithdrawn && mine < 0:
		return Reject(subjects.CodeNoVote, "%s has no open vote on interrupt %s to withdraw", p.Name, st.ID)
	case mine >= 0 && !st.Policy.AllowChange:
		return Reject(subjects.CodeAlreadyVoted, "%s already voted on interrupt %s (decision %s); its policy allows no change, the first vote stands",
			p.Name, st.ID, st.Votes[mine].DecisionID)
	case mine < 0 && len(st.Votes) >= st.Policy.NeedApprovals()+st.Policy.NeedDenials()-1 && !closes(st, d):
		return Reject(subjects.CodeVoteLimit, "interrupt %s holds %d open votes, all its record takes; only a vote that decides it is accepted now",
			st.ID, len(st.Votes))
	}
	return nil
}

// answerKey is what makes two approvals the same answer: the call digest
// they approve and the payload's canonical JSON.
func answerKey(digest string, payload json.RawMessage) string {
	var b bytes.Buffer
	b.WriteString(digest)
	b.WriteByte(0)
	if len(payload) > 0 {
		if err := subjects.Canonicalize(&b, payload); err != nil {
			// Not canonicalizable (a number out of range): only
			// byte-identical payloads agree.
			b.WriteString("raw:")
			b.Write(payload)
		}
	}
	return b.String()
}

// voteFrom is the vote d records, approving digest, at now.
func voteFrom(d subjects.Decision, digest string, seq uint64, now time.Time) subjects.Vote {
	return subjects.Vote{DecisionID: d.DecisionID, Approver: d.Approver, Status: d.Status, Payload: d.Payload,
		Comment: d.Comment, Metadata: d.Metadata, CallDigest: digest, Arguments: d.Arguments, At: utc(now), Seq: seq}
}

// withVote is st's open votes with d's vote: the sender's earlier vote
// replaced (or removed, for a withdrawal).
func withVote(st subjects.InterruptState, d subjects.Decision, seq uint64, now time.Time) []subjects.Vote {
	votes := slices.Clone(st.Votes)
	if i := voteOf(st, d.Approver); i >= 0 {
		votes = slices.Delete(votes, i, i+1)
	}
	if d.Status == subjects.StatusWithdrawn {
		return votes
	}
	digest, _ := approvedDigest(st, d)
	return append(votes, voteFrom(d, digest, seq, now))
}

// closes reports whether d, added to st's votes, decides st.
func closes(st subjects.InterruptState, d subjects.Decision) bool {
	t := tally(st, withVote(st, d, 0, time.Time{}), d)
	return t.Approvals >= t.ApprovalsNeeded && d.Status == subjects.StatusResolved || t.Denials >= t.DenialsNeeded
}

// tally counts votes on st after d: the approvals for d's answer (for a
// denial or a withdrawal, the largest group), and the denials.
func tally(st subjects.InterruptState, votes []subjects.Vote, d subjects.Decision) subjects.Tally {
	t := subjects.Tally{ApprovalsNeeded: st.Policy.NeedApprovals(), DenialsNeeded: st.Policy.NeedDenials()}
	groups := map[string]int{}
	digests := map[string]string{}
	for _, v := range votes {
		switch v.Status {
		case subjects.StatusCancelled:
			t.Denials++
		case subjects.StatusResolved:
			k := answerKey(v.CallDigest, v.Payload)
			groups[k]++
			digests[k] = v.CallDigest
		}
	}
	if d.Status == subjects.StatusResolved {
		digest, _ := approvedDigest(st, d)
		k := answerKey(digest, d.Payload)
		t.Approvals, t.CallDigest = groups[k], digest
	} else {
		for _, v := range votes { // oldest group first among equals
			if v.Status != subjects.StatusResolved {
				continue
			}
			if k := answerKey(v.CallDigest, v.Payload); groups[k] > t.Approvals {
				t.Approvals, t.CallDigest = groups[k], digests[k]
			}
		}
	}
	return t
}

// Tally is where the votes on interrupt i of rec stand after decision d
// (which rec already holds, as a vote or as the final decision), for d's
// verdict.
func (s *Set) Tally(rec *subjects.Run, i int, d subjects.Decision) *subjects.Tally {
	st := rec.Interrupts[i]
	if st.Policy == nil {
		return nil
	}
	votes := st.Votes
	if st.Decision != nil {
		votes = st.Decision.Votes
	}
	t := tally(st, votes, d)
	if n, names := s.eligible(st.Interrupt, rec.Requester); n >= 0 && st.Decision == nil {
		for _, name := range names {
			if slices.IndexFunc(votes, func(v subjects.Vote) bool { return v.Approver == name }) < 0 &&
				slices.Contains(st.Approvers, name) {
				t.WaitingOn = append(t.WaitingOn, name)
			}
		}
		for _, g := range st.ApproverGroups {
			t.WaitingOn = append(t.WaitingOn, "group:"+g)
		}
	}
	return &t
}

// applyVote records d's vote on interrupt i of cp (a clone) at now. When
// the vote decides the interrupt it returns the final decision, with every
// vote, and leaves cp to the caller; otherwise it records the vote.
func applyVote(cp *subjects.Run, i int, d subjects.Decision, seq uint64, now time.Time) *subjects.Decision {
	st := &cp.Interrupts[i]
	votes := withVote(*st, d, seq, now)
	if seq > 0 {
		if st.VoteSeqs == nil {
			st.VoteSeqs = map[string]uint64{}
		}
		st.VoteSeqs[d.Approver] = seq
	}
	t := tally(*st, votes, d)
	decided := d.Status == subjects.StatusResolved && t.Approvals >= t.ApprovalsNeeded ||
		d.Status != subjects.StatusWithdrawn && t.Denials >= t.DenialsNeeded
	if !decided {
		st.Votes = votes
		cp.UpdatedAt = now
		return nil
	}
	st.Votes = votes
	final := d
	return &final
}

// Decide returns rec with decision d (checked by CheckDecision, not
// already held: see Holds) applied to interrupt i at now; seq is its
// stream sequence. On an interrupt with a policy d is a vote: recorded,
// and when it decides the interrupt (approvals for one answer, or
// denials, reached) the interrupt is decided with the final decision:
// d, carrying every vote. An approved call gets its digest and execution
// key.
func (s *Set) Decide(rec *subjects.Run, i int, d subjects.Decision, seq uint64, now time.Time) *subjects.Run {
	now = utc(now)
	st := rec.Interrupts[i]
	if st.Policy != nil {
		cp := clone(rec)
		final := applyVote(cp, i, d, seq, now)
		if final == nil {
			return subjects.Versioned(cp)
		}
		rec, d = cp, *final
		st = rec.Interrupts[i]
	}
	s.bindCall(rec, st, &d)
	return subjects.Versioned(ApplyDecision(rec, i, d, seq, now))
}

// bindCall sets the approved call's digest and execution key on a final
// decision d of st.
func (s *Set) bindCall(rec *subjects.Run, st subjects.InterruptState, d *subjects.Decision) {
	if st.Call == nil || d.Status != subjects.StatusResolved {
		return
	}
	digest, _ := approvedDigest(st, *d)
	d.CallDigest = digest
	if s.ExecutionKey != nil {
		d.ExecutionKey = s.ExecutionKey(rec.RunID, st.ID, digest)
	}
}

// Superseded is a no-op answer (IsNoop) when d, delivered under stream
// sequence seq, is an earlier vote message of an identity whose later
// vote, change or withdrawal on interrupt i rec has applied: delivered
// again after a crash, it must not bring back what its sender replaced.
// nil otherwise.
func Superseded(rec *subjects.Run, i int, d subjects.Decision, seq uint64) *Rejection {
	last := rec.Interrupts[i].VoteSeqs[d.Approver]
	if seq == 0 || seq >= last {
		return nil
	}
	return &Rejection{Code: codeNoop, Detail: fmt.Sprintf("%s voted again on interrupt %s since this message (sequence %d, "+
		"the latest %d): it was replaced and changes nothing", d.Approver, rec.Interrupts[i].ID, seq, last)}
}

// Holds returns the stream sequence under which rec holds d (by identity
// and decision id) on interrupt i, as the final decision or a vote, and
// whether it does: a duplicate, or a redelivery of the very message.
func Holds(rec *subjects.Run, i int, d subjects.Decision) (uint64, bool) {
	st := rec.Interrupts[i]
	if st.Decision != nil {
		if st.Decision.DecisionID == d.DecisionID && st.Decision.Approver == d.Approver {
			return st.DecisionSeq, true
		}
		for _, v := range st.Decision.Votes {
			if v.DecisionID == d.DecisionID && v.Approver == d.Approver {
				return v.Seq, true
			}
		}
		return 0, false
	}
	for _, v := range st.Votes {
		if v.DecisionID == d.DecisionID && v.Approver == d.Approver {
			return v.Seq, true
		}
	}
	return 0, false
}

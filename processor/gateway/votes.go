package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// tallyOf is where the votes on interrupt i of rec stand (protocol version
// 2): nil when the interrupt has no policy. Open votes are the record's;
// a decided interrupt's are its decision's.
func tallyOf(rec *subjects.Run, i int) *subjects.Tally {
	var counts rules.Set // counts only: no members, no keys
	return counts.Tally(rec, i, subjects.Decision{Status: subjects.StatusWithdrawn})
}

// talliesOf is the tally of each interrupt of rec with a policy that p
// may read, by id: one withheld from p shows nobody's name (authz.View).
func talliesOf(rec *subjects.Run, p authz.Principal) map[string]*subjects.Tally {
	out := map[string]*subjects.Tally{}
	for i, st := range rec.Interrupts {
		if !authz.MayRead(st.Interrupt, p) {
			continue
		}
		if t := tallyOf(rec, i); t != nil {
			out[st.ID] = t
		}
	}
	return out
}

// withVotes replaces the pending entry p of an interrupt with a policy by
// the record's state of it, which holds the votes cast since the entry was
// written (a vote that leaves the interrupt waiting does not rewrite the
// pending index), and returns its tally and the run's requester. Without
// a policy, or when the record cannot be read, p stays as it is (and the
// requester is unknown: empty).
func (g *Gateway) withVotes(ctx context.Context, p *subjects.PendingInterrupt) (*subjects.Tally, string) {
	if p.Policy == nil {
		return nil, ""
	}
	rec, err := g.client.Run(ctx, p.RunID)
	if err != nil {
		return tallyOf(&subjects.Run{RunID: p.RunID, Interrupts: []subjects.InterruptState{p.InterruptState}}, 0), ""
	}
	i := slices.IndexFunc(rec.Interrupts, func(st subjects.InterruptState) bool { return st.ID == p.ID })
	if i < 0 {
		return nil, rec.Requester
	}
	p.InterruptState = rec.Interrupts[i]
	return tallyOf(rec, i), rec.Requester
}

// votesOf is the votes on st: the open ones, or the decided interrupt's.
func votesOf(st subjects.InterruptState) []subjects.Vote {
	if st.Decision != nil {
		return st.Decision.Votes
	}
	return st.Votes
}

// voteLines says each vote in words: who, what, when.
func voteLines(st subjects.InterruptState) []string {
	var out []string
	for _, v := range votesOf(st) {
		out = append(out, fmt.Sprintf("%s %s at %s", v.Approver, voteWord(st, v), v.At.UTC().Format("15:04 UTC")))
	}
	return out
}

// remainingWords says what a tally still needs, for people: "1 of 2
// approvals; waiting on cy, group finance".
func remainingWords(t *subjects.Tally) string {
	if t == nil {
		return ""
	}
	s := fmt.Sprintf("%d of %d approvals", t.Approvals, t.ApprovalsNeeded)
	if t.DenialsNeeded > 1 || t.Denials > 0 {
		s += fmt.Sprintf(", %d of %d denials", t.Denials, t.DenialsNeeded)
	}
	if len(t.WaitingOn) > 0 {
		names := make([]string, len(t.WaitingOn))
		for i, w := range t.WaitingOn {
			names[i] = strings.Replace(w, "group:", "group ", 1)
		}
		s += "; waiting on " + strings.Join(names, ", ")
	}
	return s
}

// cardVotes is what a Slack card of st in rec says about votes: the tally
// in words and each vote (the final decision's, once decided); nothing
// for an interrupt without a policy.
func cardVotes(rec *subjects.Run, st subjects.InterruptState) (string, []slack.Vote) {
	if st.Policy == nil {
		return "", nil
	}
	var t *subjects.Tally
	if rec != nil {
		if i := slices.IndexFunc(rec.Interrupts, func(s subjects.InterruptState) bool { return s.ID == st.ID }); i >= 0 {
			t = tallyOf(rec, i)
		}
	}
	var votes []slack.Vote
	for _, v := range votesOf(st) {
		votes = append(votes, slack.Vote{By: v.Approver, Status: voteWord(st, v), At: v.At})
	}
	return remainingWords(t), votes
}

// voteWord is a vote in a word or three: approved, denied, withdrew,
// approved with edited arguments.
func voteWord(st subjects.InterruptState, v subjects.Vote) string {
	what := "approved"
	switch v.Status {
	case subjects.StatusCancelled:
		what = "denied"
	case subjects.StatusWithdrawn:
		what = "withdrew"
	}
	if v.Status == subjects.StatusResolved && st.Call != nil && v.CallDigest != "" && v.CallDigest != st.Call.Digest {
		what += " with edited arguments"
	}
	return what
}

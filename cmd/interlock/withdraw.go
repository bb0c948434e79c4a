package main

import (
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// newWithdraw builds `withdraw`: take back one's open vote (protocol
// version 2, processor.DecisionRequest.Withdraw).
func newWithdraw(g *globals) *cobra.Command {
	var comment, approver, decisionID string
	cmd := &cobra.Command{
		Use:   "withdraw RUN [INTERRUPT]",
		Short: "Take back your open vote on an interrupt, where its policy allows changes",
		Long: `Take back your open vote on an interrupt, where its policy allows changes
(allowChange, docs/policies.md). INTERRUPT may be left out when the run waits
for exactly one. The command waits for the coordinator's verdict, prints what
the interrupt still needs, and exits 0 when the withdrawal was accepted (or was
a duplicate of an accepted one), 3 when it was rejected, with the reason (for
example no_vote: you have no open vote on it).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := processor.DecisionRequest{Withdraw: true, Comment: comment, Approver: approver, DecisionID: decisionID, Via: "cli"}
			return sendDecision(cmd, g, args, req, nil, func(v subjects.Verdict) {
				if v.Outcome != subjects.OutcomeVoteRecorded {
					printVerdict(cmd, v)
					return
				}
				out := cmd.OutOrStdout()
				say(out, "vote withdrawn: decision %s for interrupt %s; the interrupt still waits", v.DecisionID, v.InterruptID)
				if v.Tally != nil {
					say(out, ": %s", v.Tally.Remaining())
				}
				say(out, "\n")
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&comment, "comment", "", "a comment recorded with the withdrawal")
	f.StringVar(&approver, "approver", envOr("INTERLOCK_APPROVER", ""), "whose vote to withdraw; env INTERLOCK_APPROVER")
	f.StringVar(&decisionID, "decision-id", "", "dedup key (default: a fresh UUIDv7); resend with the same id to retry safely")
	return cmd
}

package main

import (
	"context"
	"errors"
	"fmt"

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
			ctx := cmd.Context()
			if g.inboxPrefix(g.natsURL) == "" {
				g.inbox = subjects.InboxPrefix(approver)
			}
			return g.withAPI(ctx, func(api *processor.Client) error {
				var err error
				req := processor.DecisionRequest{RunID: args[0], Withdraw: true, Comment: comment,
					Approver: approver, DecisionID: decisionID, Via: "cli"}
				if len(args) == 2 {
					req.InterruptID = args[1]
				} else if req.InterruptID, err = onlyPending(cmd, api, args[0]); err != nil {
					return err
				}
				wctx, cancel := context.WithTimeout(ctx, g.timeout)
				defer cancel()
				v, err := api.Decide(wctx, req)
				if err != nil && !errors.Is(err, processor.ErrRejected) {
					return err
				}
				if g.json {
					if perr := printJSON(cmd.OutOrStdout(), v); perr != nil {
						return perr
					}
				} else if v.Outcome == subjects.OutcomeVoteRecorded {
					out := cmd.OutOrStdout()
					say(out, "vote withdrawn: decision %s for interrupt %s; the interrupt still waits", v.DecisionID, v.InterruptID)
					if v.Tally != nil {
						say(out, ": %s", v.Tally.Remaining())
					}
					say(out, "\n")
				} else {
					printVerdict(cmd, v)
				}
				if err != nil {
					return fmt.Errorf("%w%s", err, approverHint(cmd, api, req, v))
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&comment, "comment", "", "a comment recorded with the withdrawal")
	f.StringVar(&approver, "approver", envOr("INTERLOCK_APPROVER", ""), "whose vote to withdraw; env INTERLOCK_APPROVER")
	f.StringVar(&decisionID, "decision-id", "", "dedup key (default: a fresh UUIDv7); resend with the same id to retry safely")
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// newDecide builds `approve` (resolve) or `deny` (cancel).
func newDecide(g *globals, approve bool) *cobra.Command {
	var payload, edit, comment, approver, decisionID, arguments, callDigest string
	use, short, status := "deny RUN [INTERRUPT]", "Cancel an interrupt (the body receives the cancelled value)", subjects.StatusCancelled
	if approve {
		use, short, status = "approve RUN [INTERRUPT]", "Resolve an interrupt, with an optional JSON payload", subjects.StatusResolved
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
INTERRUPT may be left out when the run waits for exactly one. The command waits
for the coordinator's verdict and exits 0 when the decision was accepted (or was
a duplicate of an accepted one), 3 when it was rejected, with the reason.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := processor.DecisionRequest{Status: status, Comment: comment, Approver: approver, DecisionID: decisionID, Via: "cli"}
			return sendDecision(cmd, g, args, req, func(req *processor.DecisionRequest) error {
				// Protocol version 2: bind the vote to the call it is cast
				// on, or approve the gated call with edited arguments.
				req.CallDigest = callDigest
				if arguments != "" {
					var args map[string]any
					if json.Unmarshal([]byte(arguments), &args) != nil {
						return usagef("--arguments takes the edited call arguments as a JSON object: %s", arguments)
					}
					req.Arguments = json.RawMessage(arguments)
				}
				if edit != "" {
					// Approve with edited arguments: they are the answer.
					if payload != "" {
						return usage(errors.New("--edit and --payload exclude each other"))
					}
					var args map[string]any
					if json.Unmarshal([]byte(edit), &args) != nil {
						return usagef("--edit takes the edited arguments as a JSON object: %s", edit)
					}
					payload = edit
				}
				if payload != "" {
					if !json.Valid([]byte(payload)) {
						return usagef("--payload is not valid JSON: %s", payload)
					}
					req.Payload = json.RawMessage(payload)
				}
				return nil
			}, func(v subjects.Verdict) { printVerdict(cmd, v) })
		},
	}
	f := cmd.Flags()
	if approve {
		f.StringVar(&payload, "payload", "", "the answer, as JSON (false, 0, \"\" and {} are answers)")
		f.StringVar(&edit, "edit", "", "approve with edited arguments: a JSON object sent as the answer")
		f.StringVar(&arguments, "arguments", "", "approve the gated call with these edited arguments (a JSON object): "+
			"an approval of another call, with its own digest (decision policies)")
	}
	f.StringVar(&callDigest, "call-digest", "", "the digest of the call you were shown (interlock show): "+
		"the vote is refused (call_mismatch) if the interrupt gates another call")
	f.StringVar(&comment, "comment", "", "a comment recorded with the decision")
	f.StringVar(&approver, "approver", envOr("INTERLOCK_APPROVER", ""), "who decides; env INTERLOCK_APPROVER")
	f.StringVar(&decisionID, "decision-id", "", "dedup key (default: a fresh UUIDv7); resend with the same id to retry safely")
	return cmd
}

// sendDecision sends req (its run args[0], its interrupt args[1] or the
// one the run waits on) as its approver, after prepare has completed it,
// waits for the coordinator's verdict within the CLI's timeout and prints
// it (JSON, or with show for people). A rejection is an error matching
// processor.ErrRejected, with a hint when a flag would have helped.
func sendDecision(cmd *cobra.Command, g *globals, args []string, req processor.DecisionRequest,
	prepare func(*processor.DecisionRequest) error, show func(subjects.Verdict)) error {
	ctx := cmd.Context()
	if g.inboxPrefix(g.natsURL) == "" {
		// No user to take it from: the inbox the coordinator answers
		// decisions published as this approver in.
		g.inbox = subjects.InboxPrefix(req.Approver)
	}
	return g.withAPI(ctx, func(api *processor.Client) error {
		var err error
		req.RunID = args[0]
		if len(args) == 2 {
			req.InterruptID = args[1]
		} else if req.InterruptID, err = onlyPending(cmd, api, args[0]); err != nil {
			return err
		}
		if prepare != nil {
			if err := prepare(&req); err != nil {
				return err
			}
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
		} else {
			show(v)
		}
		if err != nil {
			return fmt.Errorf("%w%s", err, approverHint(cmd, api, req, v))
		}
		return nil
	})
}

// approverHint says which flag to pass when a decision was refused as
// not_allowed: who may decide the interrupt, and --approver.
func approverHint(cmd *cobra.Command, api *processor.Client, req processor.DecisionRequest, v subjects.Verdict) string {
	if v.Code != subjects.CodeNotAllowed {
		return ""
	}
	var who []string
	if rec, err := api.Run(cmd.Context(), req.RunID); err == nil {
		for _, in := range rec.Interrupts {
			if in.ID == req.InterruptID {
				who = append(who, in.Approvers...)
				for _, g := range in.ApproverGroups {
					who = append(who, "a member of "+g)
				}
			}
		}
	}
	switch {
	case len(who) == 0:
		return "; pass --approver NAME (or set INTERLOCK_APPROVER) to decide as yourself"
	case len(who) == 1 && !strings.HasPrefix(who[0], "a member of "):
		return fmt.Sprintf("; %s may decide it: pass --approver %s", who[0], who[0])
	}
	return fmt.Sprintf("; %s may decide it: pass --approver with your name (or set INTERLOCK_APPROVER)", strings.Join(who, ", "))
}

func onlyPending(cmd *cobra.Command, api *processor.Client, run string) (string, error) {
	rec, err := api.Run(cmd.Context(), run)
	if errors.Is(err, jetstream.ErrPermission) {
		return "", fmt.Errorf("%w: this NATS user may not read run records (approvers read none: a record holds answers); "+
			"name the interrupt, as the notification does: RUN INTERRUPT", err)
	}
	if err != nil {
		return "", err
	}
	pending := rec.Pending()
	switch len(pending) {
	case 1:
		return pending[0].ID, nil
	case 0:
		return "", fmt.Errorf("run %s is %s and waits for no decision", run, rec.Status)
	}
	ids := make([]string, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
	}
	return "", usagef("run %s waits for %d interrupts; name one: %s", run, len(pending), strings.Join(ids, ", "))
}

func printVerdict(cmd *cobra.Command, v subjects.Verdict) {
	out := cmd.OutOrStdout()
	switch v.Outcome {
	case subjects.OutcomeAccepted:
		if v.Replay {
			say(out, "accepted: decision %s for interrupt %s; the run replays now\n", v.DecisionID, v.InterruptID)
		} else {
			say(out, "accepted: decision %s for interrupt %s; the run waits for its other interrupts\n", v.DecisionID, v.InterruptID)
		}
	case subjects.OutcomeVoteRecorded:
		say(out, "vote recorded: decision %s for interrupt %s; the interrupt still waits", v.DecisionID, v.InterruptID)
		if v.Tally != nil {
			say(out, ": %s", v.Tally.Remaining())
		}
		say(out, "\n")
	case subjects.OutcomeDuplicate:
		say(out, "duplicate: decision %s was already received; it is applied once\n", v.DecisionID)
	default:
		say(out, "rejected (%s): %s\n", v.Code, v.Detail)
	}
}

// Command interlock runs and operates Interlock: durable human-in-the-loop
// interrupts for AI agent runs on NATS JetStream.
//
// Exit codes: 0 success; 1 failure; 2 usage error; 3 refused (a decision
// rejected, a run that exists); 4 not found; 5 run failed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(err)
	if err != nil {
		// An error can carry outside text (a run's error, a verdict's
		// detail): escaped like all human output, its own lines kept.
		lines := strings.Split(err.Error(), "\n")
		for i, l := range lines {
			lines[i] = printable(l)
		}
		fmt.Fprintln(stderr, "interlock:", strings.Join(lines, "\n"))
	}
	if code == exitUsage {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "see '%s --help'\n", cmd.CommandPath())
	}
	return code
}

// The groups of `interlock --help`.
var commandGroups = []*cobra.Group{
	{ID: "service", Title: "Run Interlock:"},
	{ID: "runs", Title: "Runs and decisions:"},
	{ID: "operate", Title: "Operate and measure:"},
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "interlock",
		Short: "Durable human-in-the-loop interrupts for AI agent runs, on NATS JetStream",
		// A word that names no command is a usage error, not help.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
				}
				return err
			}
			return nil
		},
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: checkFlags,
		SilenceUsage:      true,
		SilenceErrors:     true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	g.register(root)
	root.AddGroup(commandGroups...)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("service", newServe(g), newProvision(g), newNotifier(g), newGateway(g), newMCP(g), newDemo(g))
	add("runs", newStart(g), newRuns(g), newShow(g), newPending(g), newDecide(g, true), newDecide(g, false), newWithdraw(g), newHistory(g), newWatch(g))
	add("operate", newToken(g), newAuth(g), newBench(g))
	root.SetHelpCommandGroupID("operate")
	root.SetCompletionCommandGroupID("operate")
	// The exit codes close the root's help; a command's own help says
	// which of them it uses.
	tmpl := root.UsageTemplate()
	root.SetUsageTemplate(tmpl + "\n" + exitCodesHelp + "\n")
	for _, c := range root.Commands() {
		c.SetUsageTemplate(tmpl)
	}
	usageArgs(root)
	return root
}

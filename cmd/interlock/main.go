// Command interlock runs and operates Interlock: durable human-in-the-loop
// interrupts for AI agent runs on NATS JetStream.
//
// Exit codes: 0 success; 1 failure; 2 usage error; 3 decision rejected;
// 4 run not found; 5 run failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitRejected = 3
	exitNotFound = 4
	exitRunFail  = 5
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(root.ErrOrStderr(), "interlock:", err)
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, processor.ErrRejected):
		return exitRejected
	case errors.Is(err, processor.ErrRunNotFound):
		return exitNotFound
	case isUsage(err), errors.Is(err, subjects.ErrInvalidToken), strings.HasPrefix(err.Error(), "unknown command"),
		strings.HasPrefix(err.Error(), "required flag"):
		return exitUsage
	}
	return exitFailure
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "interlock",
		Short:         "Durable human-in-the-loop interrupts for AI agent runs, on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	g.register(root)
	root.AddCommand(newServe(g), newDemo(g), newDecide(g, true), newDecide(g, false), newPending(g), newRuns(g), newShow(g), newNotifier(g),
		newGateway(g), newProvision(g), newHistory(g), newWatch(g), newToken(g), newBench(g))
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	return root
}

// wrapArgs marks argument-count errors as usage errors.
func wrapArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	if check == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// Exit codes. exitCode chooses one from the type of the error a command
// returns; `interlock --help` lists them.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitRejected    = 3
	exitNotFound    = 4
	exitRunFail     = 5
	exitCredentials = 6
)

// exitCodesHelp is the exit code table of `interlock --help`.
const exitCodesHelp = `Exit codes:
  0  success (a duplicate of an accepted decision is a success)
  1  failure, for example NATS unreachable or permission denied
  2  usage: a bad command, flag, argument, JSON value or configuration file
  3  refused: the decision was rejected, or the run to start exists already
  4  not found: no such run, or no run matches the filters
  5  the run failed (demo, start --wait)
  6  credentials: a NATS user is named with an empty password (set NATS_PASSWORD)`

// usageError is a mistake in the command line or in a file it names: the
// command is not run, and interlock exits 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usage marks err as a usage error.
func usage(err error) error { return &usageError{err} }

// usagef is usage(fmt.Errorf(format, args...)).
func usagef(format string, args ...any) error { return usage(fmt.Errorf(format, args...)) }

// errNoMatch means a listing found nothing its filters match.
var errNoMatch = errors.New("no run matches")

// runFailedError reports a run that failed, or ended where the command
// expected it to wait.
type runFailedError struct{ err error }

func (e *runFailedError) Error() string { return e.err.Error() }
func (e *runFailedError) Unwrap() error { return e.err }

// exitCode is the exit code of a command that returned err.
func exitCode(err error) int {
	var use *usageError
	var failed *runFailedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &use), errors.Is(err, subjects.ErrInvalidToken), errors.Is(err, processor.ErrInvalidOption):
		return exitUsage
	case errors.Is(err, processor.ErrRejected), errors.Is(err, processor.ErrRunExists):
		return exitRejected
	case errors.Is(err, processor.ErrRunNotFound), errors.Is(err, errNoMatch):
		return exitNotFound
	case errors.As(err, &failed):
		return exitRunFail
	case errors.Is(err, jetstream.ErrEmptyPassword):
		return exitCredentials
	}
	return exitFailure
}

// usageArgs makes every argument error of cmd and its subcommands a usage
// error, and checks required and grouped flags before a command runs so
// that their errors are usage errors too (cobra would report them untyped).
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usage(err)
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		usageArgs(c)
	}
}

// checkFlags is the root's PersistentPreRunE: it warns of deprecated flag
// names, and checks required flags and flag groups (cobra checks them after
// it, with untyped errors).
func checkFlags(cmd *cobra.Command, _ []string) error {
	warnDeprecated(cmd)
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return usage(err)
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return usage(err)
	}
	return nil
}

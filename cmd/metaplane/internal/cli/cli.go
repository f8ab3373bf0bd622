// Package cli implements the metaplane command line on cobra. Each
// top-level command lives in its own file and registers its constructor
// with Register in an init function, so a command is added without touching
// a central switch. Verbs are RunE functions that return errors; Run maps
// an error to the exit status and prints it, in one place (exitCode and
// reportError), as text or, under a verb's --json, as JSON.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes shared by every verb.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and failed (or found problems)
	ExitUsage   = 2 // the command line was wrong
	// ExitOutcomeUnknown: an admin write was sent but its outcome is
	// still unknown at --timeout: its repetitions with its request id did
	// not settle it (the coordinators kept answering UNAVAILABLE, or none
	// could be reached again), or it is a write without request ids
	// (transfer-leadership), which is not repeated. Run it again with
	// --request-id and the id the error names to apply it at most once.
	ExitOutcomeUnknown = 3
)

// Env is what a command line runs with: its streams. Verbs never touch
// os.Stdout and friends directly (they use cmd.OutOrStdout() and friends,
// which Run points here), so tests can run them in-process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// builders are the registered top-level commands' constructors, in
// registration order.
var builders []func() *cobra.Command

// Register adds a top-level command. build is called once per Run, so the
// variables its flags bind to are fresh for every command line.
func Register(build func() *cobra.Command) {
	builders = append(builders, build)
}

// Main runs the metaplane command line and returns the exit code. The
// context its verbs get is cancelled on SIGINT and SIGTERM.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}, args)
}

// Run runs the command line args (without the program name) and returns
// its exit code: ExitOK, ExitFailure, ExitUsage, or the code a verb chose
// with ExitWith.
func Run(ctx context.Context, env *Env, args []string) int {
	root := newRoot()
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	args = legacyLongFlags(root, args)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(withArgv(ctx, args))
	if err == nil {
		return ExitOK
	}
	if cmd == nil {
		cmd = root
	}
	reportError(env.Stderr, cmd, err, jsonRequested(cmd, args))
	return exitCode(err)
}

// newRoot builds the command tree: the root, every registered command,
// cobra's help and completion commands, and `version`.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "metaplane <command>",
		Short: "the metadata plane of the coordinators",
		Long: `metaplane is the metadata plane of the coordinators of a distributed
streaming store: the coordinator daemon, the reference tablet server, and
the tools to administer, configure, test and measure them.

Flags may come anywhere after the command that defines them, before or
after the verb and its arguments (metaplane admin --json list-databases).

Exit status: 0 success, 1 failure, 2 usage error, 3 outcome unknown (a
write was sent and its outcome is still unknown at --timeout; see
docs/cli.md).`,
		Version:       versionOf(readBuildInfo).Text(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	markGroup(root, "command")
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageErr{msg: err.Error()}
	})
	setTemplates(root)
	for _, build := range builders {
		root.AddCommand(build())
	}
	addHelperStubs(root)
	root.Flags().BoolP("version", "v", false, "print the version, as the version command does")
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "show the help of a command: metaplane help admin create-table"
		case "completion":
			c.Short = "print the shell completion script for bash, zsh, fish or powershell"
		}
	}
	usageArgs(root)
	return root
}

// markGroup makes c a command whose job is to hold verbs: with no verb it
// prints its help on stderr and exits 2; `c help [verb]` prints the help
// of c or of its verb; an unknown verb is a usage error naming it as a
// noun ("command", "verb"), with suggestions.
func markGroup(c *cobra.Command, noun string) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[nounAnnotation] = noun
	c.SuggestionsMinimumDistance = 2
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 || args[0] == "help" {
			return nil
		}
		msg := fmt.Sprintf("unknown %s %q", noun, args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", s[0])
		}
		return UsageError("%s", msg)
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			cmd.SetOut(cmd.ErrOrStderr())
			cmd.Help()
			return ExitWith(ExitUsage)
		}
		target, rest, err := cmd.Find(args[1:])
		if err != nil || len(rest) > 0 {
			return UsageError("help: unknown %s %q", noun, args[len(args)-1])
		}
		target.InitDefaultHelpFlag()
		return target.Help()
	}
}

// usageArgs makes every argument-checking error of c and its descendants
// a usage error (exit 2), cobra's own commands' (help, completion)
// included.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				var ue *usageErr
				if errors.As(err, &ue) {
					return err
				}
				return &usageErr{msg: err.Error()}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

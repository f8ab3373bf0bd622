// Package cli implements the metaplane command's verbs. Each verb lives in
// its own file and registers itself with Register in an init function, so
// verbs can be added without touching a central switch.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Exit codes shared by every verb.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and failed (or found problems)
	ExitUsage   = 2 // the command line was wrong
)

// Env is what a verb gets: its streams. Verbs never touch os.Stdout and
// friends directly, so tests can run them in-process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Command is one top-level verb.
type Command struct {
	Name    string
	Summary string // one line for `metaplane help`
	// Run executes the verb with the arguments after its name and returns
	// the process exit code. ctx is cancelled on SIGINT/SIGTERM.
	Run func(ctx context.Context, env *Env, args []string) int
}

var commands = map[string]Command{}

// Register adds a verb. It panics on a duplicate name (a programming error).
func Register(c Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: duplicate command " + c.Name)
	}
	commands[c.Name] = c
}

// Main runs the metaplane command line and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}, args)
}

// Run dispatches args to a verb.
func Run(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.Stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "metaplane: unknown command %q (see `metaplane help`)\n", args[0])
		return ExitUsage
	}
	return c.Run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: metaplane <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].Summary)
	}
}

// parseFlags is every verb's flag parsing: it prints usage (the verb's text,
// then its flags) on -h, parses args and refuses positional arguments. It
// returns ok=false with the exit code to return when the verb must stop:
// ExitOK after -h, ExitUsage on a bad flag or an unexpected argument.
func parseFlags(env *Env, fs *flag.FlagSet, name, usage string, args []string) (code int, ok bool) {
	fs.Usage = func() {
		io.WriteString(env.Stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK, false
		}
		return ExitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "%s: unexpected argument %q\n", name, fs.Arg(0))
		return ExitUsage, false
	}
	return ExitOK, true
}

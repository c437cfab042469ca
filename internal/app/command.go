// Package app is the nodeagent command: flags and config file to a validated configuration, the
// wiring of every component (CRI poller, eviction signals, setters, registration, status syncer,
// fast start-up updater, lease renewer, events, healthz/metrics server) and their run group.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// NewCommand returns the nodeagent root command and its version subcommand. Flags are parsed by the
// command itself (DisableFlagParsing), as the kubelet does, so that a --config file can sit between
// defaults and flags.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodeagent",
		Short: "nodeagent keeps this machine's Node object true: registration, status, Lease",
		Long: `nodeagent is a node agent that does the kubelet's node-status job: it registers the Node,
keeps its conditions, capacity and node info true from the container runtime (CRI) and the host
(cadvisor), renews its Lease in kube-node-lease, and serves /healthz and /metrics. It runs no pods.`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if slices.Contains(args, "--version") {
				printVersion(cmd.OutOrStdout())
				return nil
			}
			opts, err := config.Load(args)
			if errors.Is(err, pflag.ErrHelp) {
				cmd.SetOut(cmd.OutOrStdout())
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n\nUsage:\n  nodeagent [flags]\n  nodeagent status [-o json]\n  nodeagent simulate --nodes N [flags]\n  nodeagent version\n\nFlags:\n%s", cmd.Long,
					config.BindFlags(&config.Options{Config: config.NewDefault()}).FlagUsages())
				return nil
			}
			if err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(&opts.Config.Logging, nil); err != nil {
				return fmt.Errorf("logging: %w", err)
			}
			defer klog.Flush()
			cfg, err := config.Complete(opts)
			if err != nil {
				return err
			}
			deps, err := NewDependencies(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			a, err := New(cfg, deps)
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	// The flags are parsed by RunE (DisableFlagParsing), but cobra's subcommand lookup must still know
	// which of them take a value: without this, "--companion --kubeconfig /x" reads "/x" as a command.
	cmd.Flags().AddFlagSet(config.BindFlags(&config.Options{Config: config.NewDefault()}))
	cmd.AddCommand(newStatusCommand(clock.RealClock{}))
	cmd.AddCommand(newSimulateCommand())
	cmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the nodeagent version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { printVersion(cmd.OutOrStdout()) },
	})
	return cmd
}

func printVersion(w io.Writer) {
	v := version.Get()
	fmt.Fprintf(w, "nodeagent %s (kubeletVersion %s, commit %s, %s, %s)\n", v.GitVersion, v.KubeletVersion(), v.GitCommit, v.GoVersion, v.Platform)
}

// Main runs the command with the given context, args and output writers and returns the process
// exit code: 0 on success; 1 with a one-line "nodeagent: ..." error on stderr otherwise, or the code
// an exitError carries (nodeagent status: 1 unhealthy, 2 agent unreachable).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		var exit *exitError
		if errors.As(err, &exit) {
			if exit.err != nil {
				fmt.Fprintf(stderr, "nodeagent: %s\n", oneLine(exit.err))
			}
			return exit.code
		}
		fmt.Fprintf(stderr, "nodeagent: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// IgnoreHangup makes SIGHUP a logged no-op for the rest of the process (until the returned func is
// called): "Received SIGHUP, ignoring it" at info level, and the process goes on. Without it Go's
// default action ends the process at once with status 129, without a shutdown log or STOPPING=1
// (issue 22). The kubelet handles only SIGINT and SIGTERM (k8s.io/apiserver's SetupSignalContext,
// shutdownSignals), so it dies the same unlogged way; nodeagent deliberately differs: it has nothing
// to reload (a changed --config or flag needs a restart, as with the kubelet) and logs to stderr,
// so there is no log file to reopen. A closed terminal, `kill -HUP` or a stray `systemctl reload`
// (the unit has no ExecReload) thus never ends it.
func IgnoreHangup() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				klog.Background().Info("Received SIGHUP, ignoring it: nodeagent reloads nothing and has no log file to reopen; restart it to apply a changed configuration", "signal", "SIGHUP")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// exitError ends the command with an exit code other than 1, printing err if it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// oneLine joins a multi-line error (errors.Join) into one line, so a bad config reads as one error line
// listing every problem.
func oneLine(err error) string {
	msg := err.Error()
	out := make([]rune, 0, len(msg))
	for _, r := range msg {
		if r == '\n' {
			out = append(out, ';', ' ')
			continue
		}
		out = append(out, r)
	}
	return string(out)
}

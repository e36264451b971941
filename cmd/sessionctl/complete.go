package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Bounds of completing a session argument from the daemon: a shell waits
// for the answer, so it must be quick, and a namespace may hold many
// sessions.
const (
	completeTimeout = 2 * time.Second
	completeMax     = 500
)

// completeSessions completes a session argument (cobra's
// ValidArgsFunction) with the aliases of the namespace's sessions that
// start with what was typed, each described by its title. It asks the
// daemon named by --addr/SESSIOND_ADDR; if none answers, it offers nothing
// rather than file names.
func (e *env) completeSessions(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if err := e.applyContext(cmd); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	if e.timeout <= 0 || e.timeout > completeTimeout {
		e.timeout = completeTimeout
	}
	c, err := e.dial(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	stream, err := c.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Namespace: e.namespace, AliasPrefix: toComplete, Limit: completeMax})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	_ = recvEach(e, "complete", stream, func(resp *sessiondv1.ListSessionsResponse) error {
		s := resp.GetSession()
		if s.GetAlias() == "" || !strings.HasPrefix(s.GetAlias(), toComplete) {
			return nil
		}
		c := s.GetAlias()
		if t := clip(s.GetTitle(), 60); t != "" {
			c += "\t" + t
		}
		out = append(out, c)
		return nil
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeFirstSession completes the first argument only (rename, rewind:
// the second is not a session).
func (e *env) completeFirstSession(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return e.completeSessions(cmd, args, toComplete)
}

// manCmd writes the man pages (sessionctl.1, sessionctl-ls.1, ...) from
// the command definitions. Hidden: it is for packagers, e.g.
// `sessionctl man /usr/local/share/man/man1`.
func manCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "write sessionctl's man pages (section 1) into DIR",
		Hidden: true,
		Args:   exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			dir := pos[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("man: %w", err)
			}
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "SESSIONCTL", Section: "1", Source: "sessionctl " + ctlVersion(), Manual: "sessiond manual"}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return fmt.Errorf("man: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote the man pages into %s\n", dir)
			return nil
		},
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// The write commands: create, append and update. Each names what it made
// with an id chosen here (or given with --id), so that running the same
// command again after a lost answer finds what the first run wrote instead
// of writing it twice.

func createCmd(e *env) *cobra.Command {
	labels := labelsFlag{}
	var alias, title, id string
	cmd := &cobra.Command{
		Use:   "create [--alias A] [--title T] [--label K=V]...",
		Short: "create an empty session and print its id",
		Long: `create makes an empty session in the namespace and prints its id. With --id,
running the same create again returns the session the first run made
(a different session under that id is an error).`,
		Example: `  sessionctl create --alias proj-a --title "Project A" --label team=x
  ID=$(sessionctl create)`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := optionalAlias("create: --alias", alias); err != nil {
				return err
			}
			if id != "" {
				u, err := uuid.Parse(id)
				if err != nil {
					return usageErrorf("create: --id %q is not a UUID", safeLine(id))
				}
				id = u.String()
			}
			c, err := e.dial(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.CreateSession(cmd.Context(), &sessiondv1.CreateSessionRequest{
				Namespace: e.namespace, Id: id, Alias: alias, Title: title, Labels: labels,
			})
			if err != nil {
				return e.rpcError("create", err)
			}
			return e.printResult(resp.GetSession(), "%s\n", resp.GetSession().GetId())
		},
	}
	f := cmd.Flags()
	f.StringVar(&alias, "alias", "", "alias of the session, unique in its namespace")
	f.StringVar(&title, "title", "", "title of the session")
	f.Var(labels, "label", "a label K=V (repeatable)")
	f.StringVar(&id, "id", "", "the session's id (a UUID): a create run again with it is a no-op")
	return cmd
}

// roleNames are the --role values of append.
var roleNames = map[string]sessiondv1.Role{
	"user":      sessiondv1.Role_ROLE_USER,
	"assistant": sessiondv1.Role_ROLE_ASSISTANT,
	"system":    sessiondv1.Role_ROLE_SYSTEM,
	"tool":      sessiondv1.Role_ROLE_TOOL,
}

func appendCmd(e *env) *cobra.Command {
	metadata := labelsFlag{}
	var role, model, id string
	cmd := &cobra.Command{
		Use:   "append ID|ALIAS [TEXT | -]",
		Short: "append a message: TEXT, or stdin when TEXT is - or absent",
		Long: `append adds one message to a session and prints its id. The text is TEXT,
or stdin (read to its end) when TEXT is "-" or not given. The message id is
chosen here, a UUIDv7, or given with --id: an append run again with the same
--id and text is a no-op, so a script may retry one whose answer it lost.`,
		Example: `  sessionctl append proj-a "What changed in v2?"
  git log -1 | sessionctl append proj-a - --role tool
  sessionctl append proj-a --role assistant --model gpt-4.1 "Three things."`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: e.completeFirstSession,
		RunE: func(cmd *cobra.Command, pos []string) error {
			r, ok := roleNames[role]
			if !ok {
				return usageErrorf("append: --role %q: choose one of user, assistant, system, tool", safeLine(role))
			}
			if model != "" {
				if err := storage.ValidateModel("--model", model); err != nil {
					return usageErrorf("append: %v", err)
				}
			}
			if id == "" {
				u, err := uuid.NewV7()
				if err != nil {
					return err
				}
				id = u.String()
			} else if err := storage.ValidateMessageID("--id", id); err != nil {
				return usageErrorf("append: %v", err)
			}
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			text, err := e.appendText(pos[1:])
			if err != nil {
				return err
			}
			c, err := e.dial(cmd.Context())
			if err != nil {
				return err
			}
			msg := &sessiondv1.Message{Id: id, Role: r, Content: text, Model: model}
			if len(metadata) > 0 {
				msg.Metadata = metadata
			}
			resp, err := c.AppendMessages(cmd.Context(), &sessiondv1.AppendMessagesRequest{Ref: sa.ref, Messages: []*sessiondv1.Message{msg}})
			if status.Code(err) == codes.AlreadyExists {
				return &exitErr{code: exitError, grpc: codes.AlreadyExists, err: fmt.Errorf(
					"append %s: message id %s is in the session with other content; give a new --id, or none", sa.text, id)}
			}
			if err != nil {
				return e.rpcError("append "+sa.text, err)
			}
			return e.printResult(map[string]any{"message_id": id, "revision": resp.GetRevision(), "message_count": resp.GetMessageCount()}, "%s\n", id)
		},
	}
	f := cmd.Flags()
	f.StringVar(&role, "role", "user", "who wrote the message: user, assistant, system or tool")
	f.StringVar(&model, "model", "", "the model that wrote it (for assistant messages)")
	f.Var(metadata, "metadata", "a metadata entry K=V of the message (repeatable)")
	f.StringVar(&id, "id", "", "the message's id (default: a new UUIDv7); the same append run again with it is a no-op")
	return cmd
}

// appendText is append's text: the argument, or stdin for "-" or none.
func (e *env) appendText(rest []string) (string, error) {
	if len(rest) == 1 && rest[0] != "-" {
		if rest[0] == "" {
			return "", usageErrorf("append: TEXT is empty")
		}
		return rest[0], nil
	}
	b, err := io.ReadAll(e.stdin)
	if err != nil {
		return "", fmt.Errorf("append: read stdin: %w", err)
	}
	if len(b) == 0 {
		return "", usageErrorf("append: stdin is empty; give TEXT, or pipe the text in")
	}
	return string(b), nil
}

// updateAttempts bounds update's read-modify-write of labels when other
// writers change the session meanwhile.
const updateAttempts = 5

func updateCmd(e *env) *cobra.Command {
	labels := labelsFlag{}
	var title string
	var unlabel []string
	cmd := &cobra.Command{
		Use:   "update ID|ALIAS [--title T] [--label K=V]... [--unlabel K]...",
		Short: "change a session's title and labels",
		Long: `update sets the title (--title "" clears it), sets labels (--label K=V) and
removes them (--unlabel K), keeping the session's other labels. The labels
are changed only if the session did not change meanwhile: update reads the
session and writes at its revision, trying again if another writer won.`,
		Example: `  sessionctl update proj-a --title "Project A, phase 2"
  sessionctl update proj-a --label stage=review --unlabel draft`,
		Args:              exactArgs(1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			setTitle := cmd.Flags().Changed("title")
			if !setTitle && len(labels) == 0 && len(unlabel) == 0 {
				return usageErrorf("update: nothing to change; give --title, --label or --unlabel")
			}
			for _, k := range unlabel {
				if _, ok := labels[k]; ok {
					return usageErrorf("update: label %q is both set (--label) and removed (--unlabel)", safeLine(k))
				}
			}
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			s, err := e.update(cmd.Context(), sa, setTitle, title, labels, unlabel)
			if err != nil {
				return err
			}
			return e.printResult(s, "%s updated (revision %d)\n", s.GetId(), s.GetRevision())
		},
	}
	f := cmd.Flags()
	f.StringVar(&title, "title", "", `the new title ("" clears it)`)
	f.Var(labels, "label", "set label K=V (repeatable)")
	f.StringArrayVar(&unlabel, "unlabel", nil, "remove label K (repeatable)")
	return cmd
}

func (e *env) update(ctx context.Context, sa sessionArg, setTitle bool, title string, set map[string]string, unset []string) (*sessiondv1.Session, error) {
	c, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	op := "update " + sa.text
	req := &sessiondv1.UpdateSessionRequest{Ref: sa.ref, Session: &sessiondv1.Session{Title: title}, UpdateMask: &fieldmaskpb.FieldMask{}}
	if setTitle {
		req.UpdateMask.Paths = append(req.UpdateMask.Paths, "title")
	}
	if len(set) == 0 && len(unset) == 0 {
		resp, err := c.UpdateSession(ctx, req)
		if err != nil {
			return nil, e.rpcError(op, err)
		}
		return resp.GetSession(), nil
	}
	req.UpdateMask.Paths = append(req.UpdateMask.Paths, "labels")
	for range updateAttempts {
		cur, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: sa.ref})
		if err != nil {
			return nil, e.rpcError(op, err)
		}
		next := maps.Clone(cur.GetSession().GetLabels())
		if next == nil {
			next = map[string]string{}
		}
		maps.Copy(next, set)
		for _, k := range unset {
			delete(next, k)
		}
		req.Session.Labels = next
		req.ExpectedRevision = cur.GetSession().GetRevision()
		resp, err := c.UpdateSession(ctx, req)
		if status.Code(err) == codes.Aborted {
			continue // another writer changed the session: read it again
		}
		if err != nil {
			return nil, e.rpcError(op, err)
		}
		return resp.GetSession(), nil
	}
	return nil, &exitErr{code: exitError, grpc: codes.Aborted, err: fmt.Errorf(
		"%s: the session kept changing under %d attempts; run the command again", op, updateAttempts)}
}

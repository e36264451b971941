package main

import (
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/auth"
)

// Tokens and TLS: the global --token, --tls-ca, --tls-cert and --tls-key
// flags for talking to a daemon with --auth-tokens and TLS, and the token
// command that edits a daemon's token file (no daemon needed).

// securityFlags are the global flags of a secured connection.
type securityFlags struct {
	token   string // secret sent as "authorization: Bearer"
	tlsCA   string // PEM CAs that sign the daemon's certificate
	tlsCert string // client certificate for mutual TLS
	tlsKey  string
	tls     bool // use TLS with the system's roots
}

// addSecurityFlags registers the global flags; the token defaults to
// SESSIOND_TOKEN.
func addSecurityFlags(root *cobra.Command, s *securityFlags) {
	pf := root.PersistentFlags()
	pf.StringVar(&s.token, "token", os.Getenv(client.TokenEnv), "secret of a token, for a daemon with --auth-tokens (env "+client.TokenEnv+"; 'sessionctl token add' makes one)")
	pf.BoolVar(&s.tls, "tls", false, "connect with TLS, trusting the system's CAs (implied by --tls-ca, --tls-cert)")
	pf.StringVar(&s.tlsCA, "tls-ca", "", "connect with TLS, trusting the CAs in this PEM `file`")
	pf.StringVar(&s.tlsCert, "tls-cert", "", "client certificate PEM `file` for mutual TLS (with --tls-key)")
	pf.StringVar(&s.tlsKey, "tls-key", "", "private key PEM `file` of --tls-cert")
}

// usesTLS reports whether the connection is made with TLS.
func (s *securityFlags) usesTLS() bool { return s.tls || s.tlsCA != "" || s.tlsCert != "" }

// dialOptions returns the transport and per-call credentials for addr.
func (s *securityFlags) dialOptions(addr string) ([]grpc.DialOption, error) {
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return nil, usageErrorf("--tls-cert and --tls-key go together: give both or neither")
	}
	var cfg *tls.Config // nil: plaintext
	if s.usesTLS() {
		var err error
		if cfg, err = client.TLSConfig(s.tlsCA, s.tlsCert, s.tlsKey); err != nil {
			return nil, usageErrorf("%v", strings.TrimPrefix(err.Error(), "client: "))
		}
	}
	opts, err := client.GRPCDialOptions(addr, s.token, cfg)
	if err != nil {
		return nil, usageErrorf("--token: %v; add --tls-ca FILE (or --tls)", strings.TrimPrefix(err.Error(), "client: "))
	}
	return opts, nil
}

// tokenFileEnv is where the token commands find the file when --file is not
// given: the daemon's own setting.
const tokenFileEnv = "SESSIOND_AUTH_TOKENS"

func tokenCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token COMMAND",
		Short: "add, list and remove the tokens of a daemon's --auth-tokens file",
		Long: `token edits the token file that sessiond --auth-tokens reads (no daemon is
needed; a running daemon picks changes up within a second, or at once on
SIGHUP). The file holds each token's name, the SHA-256 of its secret, its
namespaces and its role; never a secret. --file defaults to
$SESSIOND_AUTH_TOKENS.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("token: give a command: add, ls or rm; see 'sessionctl help token'")
		},
	}
	cmd.AddCommand(tokenAddCmd(e), tokenLsCmd(e), tokenRmCmd(e))
	return cmd
}

// tokenFileFlag adds --file to cmd.
func tokenFileFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVar(file, "file", os.Getenv(tokenFileEnv), "the token `file` (env "+tokenFileEnv+")")
}

func needFile(op, file string) error {
	if file == "" {
		return usageErrorf("%s: --file is required (or set %s)", op, tokenFileEnv)
	}
	return nil
}

func tokenAddCmd(e *env) *cobra.Command {
	var file, name, role string
	var namespaces []string
	cmd := &cobra.Command{
		Use:   "add --file FILE --name NAME --namespace NS [--namespace NS2] --role read|write|admin",
		Short: "add a token and print its secret, once",
		Long: `add makes a token with a new random secret (256 bits), stores only the
secret's SHA-256 in the file (created 0600 if missing), and prints the
secret alone on one line of stdout, once: capture it, it cannot be shown
again. --namespace is repeated for each namespace; "" is the default
namespace and "*" every namespace. Roles: read (get, load, list, search,
watch, server info), write (read plus every change), admin (everything).`,
		Example: `  sessionctl token add --file tokens.json --name agent-a --namespace team-a --role write
  SECRET=$(sessionctl token add --file tokens.json --name ci --namespace '' --role read)`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needFile("token add", file); err != nil {
				return err
			}
			if name == "" || role == "" || len(namespaces) == 0 {
				return usageErrorf("token add: --name, --namespace and --role are required")
			}
			r, err := auth.ParseRole(role)
			if err != nil {
				return usageErrorf("token add: --%v", err)
			}
			if err := auth.ValidateName(name); err != nil {
				return usageErrorf("token add: --name: %v", err)
			}
			if _, err := auth.CheckNamespaces(namespaces); err != nil {
				return usageErrorf("token add: --namespace: %v", err)
			}
			if err := tokenFolder(file); err != nil {
				return err
			}
			secret, err := auth.AddToken(file, name, namespaces, r)
			if errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("token add: cannot write %s: permission denied; run as the owner of %s (e.g. sudo), or give --file in a folder of yours", file, filepath.Dir(file))
			}
			if err != nil {
				return fmt.Errorf("token add: %w", err)
			}
			if err := e.printResult(map[string]any{"name": name, "secret": secret, "namespaces": namespaces, "role": r.String()}, "%s\n", secret); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "token %s (%s on %s) added to %s; the secret is shown only this once\n",
				name, r, nsList(namespaces), file)
			return nil
		},
	}
	tokenFileFlag(cmd, &file)
	cmd.Flags().StringVar(&name, "name", "", "the token's name: 1-64 letters, digits, '.', '_', '-'")
	cmd.Flags().StringArrayVar(&namespaces, "namespace", nil, `a namespace the token may use; repeat for more; "" is the default namespace, "*" all`)
	cmd.Flags().StringVar(&role, "role", "", "read, write or admin")
	return cmd
}

// tokenFolder makes the token file's folder (0700: it lists who may do
// what) when it is missing, so that 'token add --file /etc/sessiond/...'
// works as written on a fresh machine, or says what to do instead.
func tokenFolder(file string) error {
	dir := filepath.Dir(file)
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return usageErrorf("token add: %s is not a folder; give --file a path in a folder", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("token add: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("token add: cannot create the folder %s: permission denied; create it first (sudo install -d -m 0700 -o \"$USER\" %s), or give --file in a folder of yours", dir, dir)
		}
		return fmt.Errorf("token add: create the folder %s: %w", dir, err)
	}
	return nil
}

func tokenLsCmd(e *env) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "ls --file FILE",
		Short: "list the tokens of a file (names, roles, namespaces; never secrets)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needFile("token ls", file); err != nil {
				return err
			}
			set, err := auth.ReadFile(file)
			if err != nil {
				return fmt.Errorf("token ls: %w", err)
			}
			if e.json {
				for _, t := range set.Tokens() {
					if err := json.NewEncoder(e.stdout).Encode(map[string]any{"name": t.Name, "role": t.Role.String(), "namespaces": t.Namespaces, "sha256": hex.EncodeToString(t.Hash[:])}); err != nil {
						return err
					}
				}
				return nil
			}
			tb := newTable(e.stdout, "NAME", "ROLE", "NAMESPACES", "SHA256")
			for _, t := range set.Tokens() {
				if err := tb.row(t.Name, t.Role.String(), nsList(t.Namespaces), hex.EncodeToString(t.Hash[:6])+"…"); err != nil {
					return err
				}
			}
			return tb.flush()
		},
	}
	tokenFileFlag(cmd, &file)
	return cmd
}

func tokenRmCmd(e *env) *cobra.Command {
	var file, name string
	cmd := &cobra.Command{
		Use:   "rm --file FILE --name NAME",
		Short: "remove a token; a running daemon refuses it within a second",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needFile("token rm", file); err != nil {
				return err
			}
			if name == "" {
				return usageErrorf("token rm: --name is required")
			}
			err := auth.RemoveToken(file, name)
			if errors.Is(err, auth.ErrNoToken) {
				return notFoundErrorf("token rm: %s holds no token named %q; 'sessionctl token ls --file %s' lists them", file, name, file)
			}
			if err != nil {
				return fmt.Errorf("token rm: %w", err)
			}
			if e.json {
				_ = json.NewEncoder(e.stdout).Encode(map[string]string{"removed": name})
			} else {
				fmt.Fprintf(e.stdout, "removed token %s\n", name)
			}
			return nil
		},
	}
	tokenFileFlag(cmd, &file)
	cmd.Flags().StringVar(&name, "name", "", "the token to remove")
	return cmd
}

// nsList shows namespaces for people: "" quoted, so the default namespace
// is visible.
func nsList(nss []string) string {
	out := make([]string, len(nss))
	for i, ns := range nss {
		if ns == "" {
			out[i] = strconv.Quote(ns)
		} else {
			out[i] = ns
		}
	}
	return strings.Join(out, ",")
}

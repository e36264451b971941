package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/sessiond/sessiond/client"
)

// The config file names daemons as contexts, as kubectl does; its format is
// in configCmd's help.

// configEnv names the context when --context is not given.
const configEnv = "SESSIOND_CONTEXT"

// configFile is the file's content.
type configFile struct {
	CurrentContext string                   `toml:"current-context"`
	Contexts       map[string]configContext `toml:"contexts"`
}

// configContext is one named daemon.
type configContext struct {
	Address   *string `toml:"address"`
	Namespace *string `toml:"namespace"`
	TokenFile string  `toml:"token-file"`
	TLS       bool    `toml:"tls"`
	TLSCA     string  `toml:"tls-ca"`
	TLSCert   string  `toml:"tls-cert"`
	TLSKey    string  `toml:"tls-key"`
}

// configPath is $XDG_CONFIG_HOME/sessiond/config.toml, else
// ~/.config/sessiond/config.toml.
func configPath() (string, error) {
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "sessiond", "config.toml"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no config file: %w", err)
	}
	return filepath.Join(home, ".config", "sessiond", "config.toml"), nil
}

// readConfig reads the config file; a missing file is an empty config.
func readConfig(path string) (*configFile, error) {
	cfg := &configFile{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, err
	}
	md, err := toml.Decode(string(data), cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		return nil, fmt.Errorf("%s: unknown setting %q; a context has address, namespace, token-file, tls, tls-ca, tls-cert, tls-key", path, un[0].String())
	}
	return cfg, nil
}

// contextNames lists the contexts for messages.
func (c *configFile) contextNames() string {
	names := slices.Sorted(maps.Keys(c.Contexts))
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// applyContext fills the settings that neither a flag nor the environment
// gave from the chosen context of the config file.
func (e *env) applyContext(cmd *cobra.Command) error {
	if p := cmd.Parent(); p != nil && p.Name() == "config" {
		return nil // config view and use work on the file as it is
	}
	path, err := configPath()
	if err != nil {
		if e.contextName != "" {
			return usageErrorf("--context %s: %v", e.contextName, err)
		}
		return nil
	}
	cfg, err := readConfig(path)
	if err != nil {
		return usageErrorf("config: %v", err)
	}
	name := cmp.Or(e.contextName, cfg.CurrentContext)
	if name == "" {
		return nil
	}
	ctx, ok := cfg.Contexts[name]
	switch {
	case ok:
	case e.contextName == "":
		return usageErrorf("config: %s: current-context %q names no context (it has: %s); 'sessionctl config use NAME' picks one", path, name, cfg.contextNames())
	case len(cfg.Contexts) == 0:
		return usageErrorf("--context %s: no contexts in %s; see 'sessionctl help config'", name, path)
	default:
		return usageErrorf("--context %s: %s has no such context (it has: %s); 'sessionctl config view' lists them", name, path, cfg.contextNames())
	}
	e.context = name
	given := func(flag, envName string) bool {
		return cmd.Flags().Changed(flag) || envName != "" && os.Getenv(envName) != ""
	}
	dir := filepath.Dir(path)
	if ctx.Address != nil && !given("addr", "SESSIOND_ADDR") {
		e.addr = *ctx.Address
	}
	if ctx.Namespace != nil && !given("namespace", "SESSIOND_NAMESPACE") {
		e.namespace = *ctx.Namespace
		e.namespaceSet = true
	}
	s := &e.security
	if ctx.TokenFile != "" && !given("token", "SESSIOND_TOKEN") {
		file := configRelative(dir, ctx.TokenFile)
		b, err := os.ReadFile(file)
		if err != nil {
			return usageErrorf("context %s: token-file: %v", name, err)
		}
		if s.token = strings.TrimSpace(string(b)); s.token == "" {
			return usageErrorf("context %s: token-file %s is empty; put a secret of 'sessionctl token add' in it", name, file)
		}
	}
	// TLS settings go together: a flag for any of them leaves the context's
	// out, so that --tls-ca on the command line is not mixed with the
	// context's client certificate.
	if !given("tls", "") && !given("tls-ca", "") && !given("tls-cert", "") && !given("tls-key", "") {
		s.tls = ctx.TLS
		s.tlsCA = configRelative(dir, ctx.TLSCA)
		s.tlsCert = configRelative(dir, ctx.TLSCert)
		s.tlsKey = configRelative(dir, ctx.TLSKey)
	}
	return nil
}

// configRelative resolves a path of the config file: ~/ is the home
// folder, and a relative path is relative to the file's folder.
func configRelative(dir, p string) string {
	if p == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func configCmd(e *env) *cobra.Command {
	path, pathErr := configPath()
	if pathErr != nil {
		path = "$XDG_CONFIG_HOME/sessiond/config.toml"
	}
	cmd := &cobra.Command{
		Use:   "config COMMAND",
		Short: "show the config file's contexts and choose the current one",
		Long: `The config file, ` + path + `
($XDG_CONFIG_HOME/sessiond/config.toml, else ~/.config/sessiond/config.toml),
names daemons as contexts:

  current-context = "local"

  [contexts.local]
  address = "127.0.0.1:7437"

  [contexts.prod]
  address = "sessiond.example.com:7437"
  namespace = "team-a"
  token-file = "~/.config/sessiond/prod.token"   # holds the secret alone
  tls-ca = "ca.pem"            # relative to the config file's folder
  tls-cert = "client.pem"      # with tls-key, for mutual TLS
  tls-key = "client-key.pem"
  # tls = true: TLS trusting the system's CAs

--context NAME (or SESSIOND_CONTEXT) picks a context for one command, else
current-context does. Flags and environment variables (--addr,
SESSIOND_ADDR, --namespace, --token, SESSIOND_TOKEN, --tls-*) win over the
context.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("config: give a command: view or use; see 'sessionctl help config'")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "view",
		Short: "list the contexts, the current one marked",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pathErr != nil {
				return pathErr
			}
			cfg, err := readConfig(path)
			if err != nil {
				return fmt.Errorf("config view: %w", err)
			}
			return e.configView(path, cfg)
		},
	}, &cobra.Command{
		Use:   "use NAME",
		Short: "make NAME the current context",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if pathErr != nil {
				return pathErr
			}
			if err := useContext(path, pos[0]); err != nil {
				return err
			}
			if !e.json {
				fmt.Fprintf(e.stdout, "current context: %s\n", pos[0])
				return nil
			}
			return json.NewEncoder(e.stdout).Encode(map[string]string{"current_context": pos[0], "config": path})
		},
	})
	return cmd
}

func (e *env) configView(path string, cfg *configFile) error {
	names := slices.Sorted(maps.Keys(cfg.Contexts))
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if e.json {
		for _, n := range names {
			c := cfg.Contexts[n]
			if err := json.NewEncoder(e.stdout).Encode(map[string]any{"name": n, "current": n == cfg.CurrentContext, "address": str(c.Address),
				"namespace": str(c.Namespace), "token_file": c.TokenFile, "tls": c.TLS || c.TLSCA != "" || c.TLSCert != "",
				"tls_ca": c.TLSCA, "tls_cert": c.TLSCert, "tls_key": c.TLSKey}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(names) == 0 {
		fmt.Fprintf(e.stdout, "no contexts in %s; 'sessionctl help config' shows the format\n", path)
		return nil
	}
	tb := newTable(e.stdout, "CURRENT", "NAME", "ADDRESS", "NAMESPACE", "TLS", "TOKEN FILE")
	for _, n := range names {
		c := cfg.Contexts[n]
		cur, addr, tlsOn, token := "", cmp.Or(str(c.Address), "("+client.DefaultAddr+")"), "no", cmp.Or(c.TokenFile, "-")
		if n == cfg.CurrentContext {
			cur = "*"
		}
		if c.TLS || c.TLSCA != "" || c.TLSCert != "" {
			tlsOn = "yes"
		}
		if err := tb.row(cur, safeLine(n), safeLine(addr), safeLine(str(c.Namespace)), tlsOn, safeLine(token)); err != nil {
			return err
		}
	}
	return tb.flush()
}

// currentContextLine is the file's top-level current-context setting.
var currentContextLine = regexp.MustCompile(`(?m)^[ \t]*current-context[ \t]*=.*$`)

// useContext sets current-context in the file, keeping the rest of it (and
// its comments) as written.
func useContext(path, name string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &exitErr{code: exitNotFound, grpc: codes.NotFound, err: fmt.Errorf("config use: there is no config file %s; see 'sessionctl help config'", path)}
	}
	if err != nil {
		return fmt.Errorf("config use: %w", err)
	}
	cfg, err := readConfig(path)
	if err != nil {
		return fmt.Errorf("config use: %w", err)
	}
	if _, ok := cfg.Contexts[name]; !ok {
		return &exitErr{code: exitNotFound, grpc: codes.NotFound, err: fmt.Errorf("config use: %s has no context %q (it has: %s)", path, name, cfg.contextNames())}
	}
	quoted, _ := json.Marshal(name) // a TOML basic string for any name a table key allows
	line := []byte("current-context = " + string(quoted))
	// Only a setting before the first table is the top-level one.
	head := data
	if i := regexp.MustCompile(`(?m)^[ \t]*\[`).FindIndex(data); i != nil {
		head = data[:i[0]]
	}
	var out []byte
	if loc := currentContextLine.FindIndex(head); loc != nil {
		out = slices.Concat(data[:loc[0]], line, data[loc[1]:])
	} else {
		out = slices.Concat(line, []byte("\n"), data)
	}
	check := &configFile{}
	if _, err := toml.NewDecoder(bytes.NewReader(out)).Decode(check); err != nil || check.CurrentContext != name {
		return fmt.Errorf("config use: could not set current-context in %s; edit it by hand: current-context = %s", path, quoted)
	}
	if err := replaceFile(path, out); err != nil {
		return fmt.Errorf("config use: cannot write %s: %w", path, err)
	}
	return nil
}

// replaceFile writes data over path through a temporary file renamed over
// it, so that a reader never sees half a file; the mode stays path's.
func replaceFile(path string, data []byte) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errors.Unwrap(err) // the reason, not the temporary name
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(st.Mode().Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Unwrap(err)
	}
	return os.Rename(f.Name(), path)
}

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/server"
)

// securityConfig is what --auth-tokens, the --tls-* flags and --insecure
// set.
type securityConfig struct {
	authTokens  string
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	insecure    bool
}

// check validates the combination of the flags.
func (c *securityConfig) check() error {
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return usagef("--tls-cert and --tls-key go together: give both or neither")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return usagef("--tls-client-ca (mutual TLS) needs TLS: give --tls-cert and --tls-key too")
	}
	return nil
}

// checkExposure refuses to serve a non-loopback address without both TLS
// and tokens, unless --insecure: then it returns a warning for the log.
func (c *securityConfig) checkExposure(addr string, loopback bool) (warning string, err error) {
	if loopback {
		return "", nil
	}
	var missing []string
	if c.tlsCert == "" {
		missing = append(missing, "TLS")
	}
	if c.authTokens == "" {
		missing = append(missing, "tokens")
	}
	if len(missing) == 0 {
		return "", nil
	}
	what := strings.Join(missing, " or ")
	if c.insecure {
		return fmt.Sprintf("--insecure: serving a non-loopback address without %s: anyone who can reach %s may read or change sessions, or read them on the wire", what, addr), nil
	}
	return "", usagef("refusing to serve %s without %s: it is not a loopback address, so anyone who can reach it could read and change every session. "+
		"Fix: give --tls-cert FILE --tls-key FILE (add --tls-client-ca FILE for mutual TLS) and --auth-tokens FILE "+
		"(make tokens with 'sessionctl token add --file FILE --name NAME --namespace NS --role read|write|admin'); "+
		"or listen on 127.0.0.1 or a unix socket; or, behind your own protection (a TLS-terminating proxy, a private network), add --insecure",
		addr, what)
}

// listenLoopback reports whether --listen addr can only be reached from this
// machine: a unix socket, or a host whose every address is loopback. A host
// that does not resolve counts as not loopback (listen then fails anyway).
func listenLoopback(ctx context.Context, addr string) bool {
	if strings.HasPrefix(addr, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	return !slices.ContainsFunc(ips, func(ip net.IPAddr) bool { return !ip.IP.IsLoopback() })
}

// security is the daemon's loaded tokens and certificates.
type security struct {
	tokens *auth.Keeper // nil without --auth-tokens
	certs  *certs       // nil without TLS
}

// loadSecurity reads the token file and the certificates; a file that is
// missing or broken at start-up stops the daemon.
func loadSecurity(c *securityConfig) (*security, error) {
	var s security
	if c.authTokens != "" {
		k, err := auth.NewKeeper(c.authTokens)
		if err != nil {
			return nil, fmt.Errorf("--auth-tokens: %w", err)
		}
		s.tokens = k
	}
	if c.tlsCert != "" {
		cs, err := loadCerts(c.tlsCert, c.tlsKey, c.tlsClientCA)
		if err != nil {
			return nil, err
		}
		s.certs = cs
	}
	return &s, nil
}

// warnings are problems worth an operator's attention at start-up: a token
// file that others may write (they could add a token of their own).
func (s *security) warnings() []string {
	if s.tokens == nil {
		return nil
	}
	fi, err := os.Stat(s.tokens.Path())
	if err == nil && fi.Mode().Perm()&0o022 != 0 {
		return []string{fmt.Sprintf("the token file %s is writable by group or others (mode %v): anyone who can write it can add a token; chmod 600 it", s.tokens.Path(), fi.Mode().Perm())}
	}
	return nil
}

// serverOptions returns the transport credentials and the authorisation
// interceptors, to add after the Server's own options.
func (s *security) serverOptions(log *zap.Logger) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if s.certs != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.certs.serverConfig())))
	}
	return append(opts, s.authOptions(log)...)
}

// authOptions returns the authorisation interceptors alone (none without
// --auth-tokens).
func (s *security) authOptions(log *zap.Logger) []grpc.ServerOption {
	if s.tokens == nil {
		return nil
	}
	return server.NewAuthorizer(s.tokens, log.Named("auth")).ServerOptions()
}

// logFields describe the security settings in the start-up line.
func (s *security) logFields() []zap.Field {
	fields := []zap.Field{zap.Bool("tls", s.certs != nil), zap.Bool("mutual_tls", s.certs != nil && s.certs.mutual())}
	if s.tokens != nil {
		fields = append(fields, zap.String("auth_tokens", s.tokens.Path()), zap.Int("tokens", s.tokens.Current().Len()))
	} else {
		fields = append(fields, zap.Bool("auth", false))
	}
	return fields
}

// startWatch reloads the token file and the certificates when they change
// (polled every auth.PollInterval; see auth.Keeper for why polling) and at
// once on SIGHUP, until stop is called. Connections stay open across
// reloads. SIGHUP is caught from the moment startWatch returns, so a reload
// signal sent after the start-up line never kills the daemon.
func (s *security) startWatch(log *zap.Logger) (stop func()) {
	if s.tokens == nil && s.certs == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(auth.PollInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				s.reload(log, false)
			case <-hup:
				log.Info("SIGHUP: reloading the token file and certificates")
				s.reload(log, true)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// reload reloads what changed (everything when force is set) and logs the
// outcome; a failure keeps what is in use.
func (s *security) reload(log *zap.Logger, force bool) {
	if s.tokens != nil {
		set, err := s.tokens.Reload(force)
		switch {
		case err != nil:
			log.Error("token file not reloaded", zap.Error(err))
		case set != nil:
			log.Info("token file reloaded", zap.String("path", s.tokens.Path()), zap.Int("tokens", set.Len()))
		}
	}
	if s.certs != nil {
		leaf, err := s.certs.reload(force)
		switch {
		case err != nil:
			log.Error("TLS certificate not reloaded; new connections keep the one in use", zap.Error(err))
		case leaf != nil:
			log.Info("TLS certificate reloaded", certFields(leaf)...)
		}
	}
}

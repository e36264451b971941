package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/sessiond/sessiond/client"
)

// securityFlags are the REPL's flags for a daemon with --auth-tokens and
// TLS.
type securityFlags struct {
	token, tlsCA, tlsCert, tlsKey *string
	tls                           *bool
}

func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	return &securityFlags{
		token:   fs.String("token", os.Getenv(client.TokenEnv), "secret of a token, for a daemon with --auth-tokens (env "+client.TokenEnv+")"),
		tls:     fs.Bool("tls", false, "connect with TLS, trusting the system's CAs (implied by --tls-ca and --tls-cert)"),
		tlsCA:   fs.String("tls-ca", "", "connect with TLS, trusting the CAs in this PEM file"),
		tlsCert: fs.String("tls-cert", "", "client certificate PEM file for mutual TLS (with --tls-key)"),
		tlsKey:  fs.String("tls-key", "", "private key PEM file of --tls-cert"),
	}
}

// dialOptions turns the flags into the SDK's options.
func (s *securityFlags) dialOptions() ([]client.DialOption, error) {
	if (*s.tlsCert == "") != (*s.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	var opts []client.DialOption
	if *s.token != "" {
		opts = append(opts, client.WithToken(*s.token))
	}
	if *s.tls || *s.tlsCA != "" || *s.tlsCert != "" {
		opts = append(opts, client.WithTLSFiles(*s.tlsCA, *s.tlsCert, *s.tlsKey))
	}
	return opts, nil
}

// describeAuth words a refusal by a daemon with tokens, or "".
func describeAuth(err error, ns string) string {
	switch {
	case errors.Is(err, client.ErrUnauthenticated):
		return "sessiond wants a token: give --token or set " + client.TokenEnv
	case errors.Is(err, client.ErrPermissionDenied):
		return fmt.Sprintf("this token may not do that in namespace %q; use a token for it, or --namespace", ns)
	}
	return ""
}

// resumeFlags are the TLS flags the resume command repeats; never the
// token, which stays out of terminals and shell histories.
func (s *securityFlags) resumeFlags() string {
	var out string
	for _, f := range []struct{ name, v string }{{"--tls-ca", *s.tlsCA}, {"--tls-cert", *s.tlsCert}, {"--tls-key", *s.tlsKey}} {
		if f.v != "" {
			out += " " + f.name + " " + shellQuote(f.v)
		}
	}
	if out == "" && *s.tls {
		out = " --tls"
	}
	return out
}

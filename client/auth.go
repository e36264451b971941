package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Authentication and TLS.
//
// A daemon started with --auth-tokens wants "authorization: Bearer <token>"
// on every call: WithToken sends it; without WithToken, Dial uses the
// SESSIOND_TOKEN environment variable when it is set. A daemon serving TLS
// needs WithTLS or WithTLSFiles (which also gives a client certificate for
// mutual TLS). A token is never sent in clear text beyond this machine: Dial
// refuses a token without TLS unless the address is a unix socket or a
// loopback host (or WithContextDialer decides where the bytes go).

// TokenEnv is the environment variable Dial reads the token from when
// WithToken is not given.
const TokenEnv = "SESSIOND_TOKEN"

// More sentinel errors, for a daemon with authentication on.
var (
	// ErrUnauthenticated: the call had no token, or one the daemon does not
	// know (UNAUTHENTICATED).
	ErrUnauthenticated = errors.New("not authenticated: missing or unknown token")
	// ErrPermissionDenied: the token may not use that namespace or method
	// (PERMISSION_DENIED).
	ErrPermissionDenied = errors.New("permission denied")
)

// WithToken sends "authorization: Bearer <secret>" with every call, for a
// daemon started with --auth-tokens (sessionctl token add prints the
// secret). It overrides SESSIOND_TOKEN. Without TLS, Dial takes a token only
// to a loopback or unix-socket address (ErrInvalid otherwise).
func WithToken(secret string) DialOption {
	return func(o *dialOptions) { o.perRPC = bearerToken(secret) }
}

// WithTLS connects with TLS configured by cfg (nil: the system's roots and
// the address's host name). Set cfg.Certificates for mutual TLS.
func WithTLS(cfg *tls.Config) DialOption {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithTLSFiles connects with TLS: caFile is a PEM file of the CAs that sign
// the daemon's certificate ("": the system's roots), and certFile and keyFile
// a PEM client certificate and key for mutual TLS ("": none). A file that
// cannot be read or used makes Dial fail with ErrInvalid.
func WithTLSFiles(caFile, certFile, keyFile string) DialOption {
	cfg, err := TLSConfig(caFile, certFile, keyFile)
	if err != nil {
		return func(o *dialOptions) { o.err = err }
	}
	return WithTLS(cfg)
}

// TLSConfig builds the tls.Config of WithTLSFiles, for callers that want to
// adjust it before WithTLS.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, errorf("client: TLS CA file: %w: %w", ErrInvalid, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errorf("client: TLS CA file %s holds no PEM certificate: %w", caFile, ErrInvalid)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errorf("client: a TLS client certificate needs both its certificate and its key file: %w", ErrInvalid)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, errorf("client: TLS client certificate: %w: %w", ErrInvalid, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// GRPCDialOptions returns the gRPC dial options that send token (if not "")
// and use TLS with tlsCfg (if not nil, else plaintext), for programs that
// call the generated stubs on their own connection (sessionctl does). Like
// Dial, it refuses a token without TLS to an address that is not local.
func GRPCDialOptions(addr, token string, tlsCfg *tls.Config) ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token == "" {
		return opts, nil
	}
	if tlsCfg == nil && !localAddr(addr) {
		return nil, errClearToken(addr)
	}
	return append(opts, grpc.WithPerRPCCredentials(bearerToken(token))), nil
}

func errClearToken(addr string) error {
	return errorf("client: dial %s: refusing to send a token without TLS to a host that is not loopback; use TLS: %w", addr, ErrInvalid)
}

// applyTokenEnv sets the token from SESSIOND_TOKEN when no option set
// per-call credentials, and refuses to send a token in clear text to another
// machine.
func (o *dialOptions) applyTokenEnv(addr string) error {
	if o.perRPC == nil {
		if t := os.Getenv(TokenEnv); t != "" {
			o.perRPC = bearerToken(t)
		}
	}
	// A custom dialer (bufconn in tests, an SSH tunnel) decides where bytes
	// go; the address says nothing then.
	if _, isToken := o.perRPC.(bearerToken); isToken && o.creds == nil && o.dialer == nil && !localAddr(addr) {
		return errClearToken(addr)
	}
	return nil
}

// localAddr reports whether a sessiond address stays on this machine: a
// unix socket, localhost, or a loopback IP.
func localAddr(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "passthrough:///"), "dns:///")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

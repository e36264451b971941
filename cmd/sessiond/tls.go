package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// certs serves the TLS configuration of --tls-cert, --tls-key and
// --tls-client-ca, and reloads it when those files change, so certificates
// rotate without a restart: each new handshake uses the files as last read
// successfully; connections already open keep their session.
type certs struct {
	certFile, keyFile, caFile string

	cur atomic.Pointer[tls.Config] // what new handshakes use

	mu   sync.Mutex // serialises reloads; guards last
	last [3][]byte  // the files' bytes last read (cert, key, CA), good or bad
}

// loadCerts reads the files; start-up fails if they do not make a valid
// configuration.
func loadCerts(certFile, keyFile, caFile string) (*certs, error) {
	c := &certs{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if _, err := c.reload(true); err != nil {
		return nil, err
	}
	return c, nil
}

// serverConfig is the tls.Config for the gRPC server: every handshake gets
// the configuration current at that moment.
func (c *certs) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.cur.Load(), nil
		},
	}
}

// refusalConfig is serverConfig for a refusal (refuseGRPC, refuseHTTP),
// which speaks its protocol itself and so offers it by ALPN.
func (c *certs) refusalConfig(proto string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := c.cur.Load().Clone()
			cfg.NextProtos = []string{proto}
			return cfg, nil
		},
	}
}

// mutual reports whether clients must present a certificate.
func (c *certs) mutual() bool { return c.caFile != "" }

// reload reads the files again and, if they changed (or force is set),
// builds a new configuration. It returns the new certificate when it
// replaced the one in use. An error (a file missing, a key that does not
// match its certificate, half of a rotation written) keeps the configuration
// in use, and is returned once per distinct content of the files, not at
// every poll.
func (c *certs) reload(force bool) (*x509.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var now [3][]byte
	var readErr error
	for i, f := range []string{c.certFile, c.keyFile, c.caFile} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			readErr = errors.Join(readErr, err)
		}
		now[i] = b
	}
	if !force && slices.EqualFunc(now[:], c.last[:], bytes.Equal) {
		return nil, nil
	}
	c.last = now
	if readErr != nil {
		return nil, fmt.Errorf("read TLS files: %w", readErr)
	}
	cert, err := tls.X509KeyPair(now[0], now[1])
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if c.caFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(now[2]) {
			return nil, fmt.Errorf("--tls-client-ca %s holds no PEM certificate", c.caFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c.cur.Store(cfg)
	return cert.Leaf, nil
}

// certFields describes a loaded certificate for the log.
func certFields(leaf *x509.Certificate) []zap.Field {
	if leaf == nil {
		return nil
	}
	fields := []zap.Field{
		zap.String("subject", leaf.Subject.String()),
		zap.Strings("dns_names", leaf.DNSNames),
		zap.Time("not_after", leaf.NotAfter),
	}
	if time.Now().After(leaf.NotAfter) {
		fields = append(fields, zap.Bool("expired", true))
	}
	return fields
}

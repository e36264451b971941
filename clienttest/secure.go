package clienttest

import (
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/internal/testcerts"
)

// SecureDaemon is a daemon serving mutual TLS with a token file, and what a
// client needs to get in.
type SecureDaemon struct {
	*Daemon
	Token     string // secret of a write token for the namespaces asked for
	CAFile    string // PEM of the CA that signed the daemon's certificate
	CertFile  string // a client certificate the daemon accepts...
	KeyFile   string // ...and its key
	TokenFile string // the daemon's --auth-tokens file
}

// TLSArgs are the --tls-ca, --tls-cert and --tls-key flags of sessionctl
// and the REPL for d.
func (d *SecureDaemon) TLSArgs() []string {
	return []string{"--tls-ca", d.CAFile, "--tls-cert", d.CertFile, "--tls-key", d.KeyFile}
}

// StartSecureDaemon starts bin on 127.0.0.1 with certificates made in dir
// (a server CA, a client CA for --tls-client-ca), and a token file holding
// one write token for namespaces; the data dir is dir/data.
func StartSecureDaemon(t testing.TB, bin, dir string, namespaces ...string) *SecureDaemon {
	t.Helper()
	d := &SecureDaemon{TokenFile: filepath.Join(dir, "tokens.json")}
	var err error
	if d.Token, err = auth.AddToken(d.TokenFile, "test-client", namespaces, auth.RoleWrite); err != nil {
		t.Fatal(err)
	}
	serverCA, clientCA := testcerts.NewCA(t, dir, "server-ca"), testcerts.NewCA(t, dir, "client-ca")
	cert, key, _ := serverCA.Issue(t, dir, "server", false)
	d.CertFile, d.KeyFile, _ = clientCA.Issue(t, dir, "client", true)
	d.CAFile = serverCA.PEMFile
	d.Daemon = StartDaemon(t, bin, filepath.Join(dir, "data"), "127.0.0.1:0", WithArgs(
		"--auth-tokens", d.TokenFile, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clientCA.PEMFile))
	return d
}

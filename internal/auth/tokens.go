// Package auth holds sessiond's bearer tokens: the token file's format, the
// hashing and constant-time lookup of secrets, the roles and namespace
// scopes a token grants, and a Keeper that reloads the file while the daemon
// runs. The daemon's gRPC interceptor (server.Authorizer) and sessionctl's
// token commands both build on it.
//
// # The token file
//
// A JSON object with one entry per token; the secret itself is never
// stored, only its SHA-256 in hex:
//
//	{"tokens": [
//	  {"name": "agent-a", "sha256": "9f86d0…", "namespaces": ["team-a"], "role": "write"},
//	  {"name": "ops", "sha256": "60303a…", "namespaces": ["*"], "role": "admin"}
//	]}
//
// name is 1-64 bytes of letters, digits, '.', '_', '-', unique in the file;
// namespaces lists exact namespace names, "" for the default namespace, or
// "*" for every namespace; role is read, write or admin. Unknown fields, a
// duplicate name or hash, an empty namespace list or an unknown role make the
// whole file invalid: a half-understood token file must never grant or drop
// access silently.
//
// # Secrets
//
// NewSecret makes 256 random bits, written as "sessiond_" and 43 base64url
// characters. Because secrets are random and long, one unsalted SHA-256 is
// enough to keep a stolen token file from yielding usable secrets (there is
// nothing to guess); a slow password hash would only slow every request.
// Lookup finds the presented secret's hash in an index and compares it in
// constant time; secrets themselves are never compared, so the time a
// lookup takes says nothing about how close a guess was.
package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sessiond/sessiond/storage"
)

// Role is what a token may do within its namespaces. Each role includes the
// ones below it.
type Role int

// The roles, weakest first.
const (
	// RoleRead may call GetSession, LoadSession, ListSessions,
	// SearchSessions, WatchSession and GetServerInfo.
	RoleRead Role = iota + 1
	// RoleWrite may also call every RPC that changes data.
	RoleWrite
	// RoleAdmin may call everything, including operations reserved to
	// administrators.
	RoleAdmin
)

var roleNames = map[Role]string{RoleRead: "read", RoleWrite: "write", RoleAdmin: "admin"}

// String returns the role's name in the token file.
func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole reads a role name: read, write or admin.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("role %q: choose one of read, write, admin", s)
}

// AllNamespaces in a token's namespaces grants every namespace.
const AllNamespaces = "*"

// MaxNameBytes is the longest token name.
const MaxNameBytes = 64

// Token is one entry of the token file.
type Token struct {
	Name       string
	Hash       [sha256.Size]byte // SHA-256 of the secret
	Namespaces []string          // exact names, "" (default), or AllNamespaces
	Role       Role
}

// Allows reports whether t may use namespace ns.
func (t *Token) Allows(ns string) bool {
	return slices.Contains(t.Namespaces, ns) || slices.Contains(t.Namespaces, AllNamespaces)
}

// Can reports whether t's role includes r.
func (t *Token) Can(r Role) bool { return t.Role >= r }

// Set is a parsed token file. It is immutable and safe for concurrent use.
type Set struct {
	tokens []Token
	byHash map[[sha256.Size]byte]int // index into tokens
}

// newSet indexes tokens by hash; Parse and With have checked that hashes
// are unique.
func newSet(tokens []Token) *Set {
	s := &Set{tokens: tokens, byHash: make(map[[sha256.Size]byte]int, len(tokens))}
	for i, t := range tokens {
		s.byHash[t.Hash] = i
	}
	return s
}

// Tokens returns the tokens in file order.
func (s *Set) Tokens() []Token { return slices.Clone(s.tokens) }

// Len returns the number of tokens.
func (s *Set) Len() int { return len(s.tokens) }

// Lookup returns the token whose hash is secret's. The secret itself is
// never compared: its SHA-256 is looked up in an index and then compared in
// constant time. How long the index takes depends only on that hash, which
// tells an attacker nothing about any secret (finding a secret from its
// hash is a preimage attack), so the cost of a call stays flat however many
// tokens the file holds.
func (s *Set) Lookup(secret string) (Token, bool) {
	h := HashSecret(secret)
	i, ok := s.byHash[h]
	if !ok || subtle.ConstantTimeCompare(h[:], s.tokens[i].Hash[:]) != 1 {
		return Token{}, false
	}
	return s.tokens[i], true
}

// HashSecret is the hash the token file stores for secret.
func HashSecret(secret string) [sha256.Size]byte {
	return sha256.Sum256([]byte(secret))
}

// ParseBearer returns the secret of an authorization value "Bearer
// <secret>" (the scheme in any case, blanks around either part ignored),
// and false for any other value.
func ParseBearer(v string) (secret string, ok bool) {
	scheme, secret, ok := strings.Cut(strings.TrimSpace(v), " ")
	secret = strings.TrimSpace(secret)
	return secret, ok && strings.EqualFold(scheme, "Bearer") && secret != ""
}

// secretPrefix marks sessiond secrets, so that secret scanners and people
// recognise one in a log or a repository.
const secretPrefix = "sessiond_"

// secretBytes is the random part of a secret: 256 bits.
const secretBytes = 32

// NewSecret returns a new random secret.
func NewSecret() (string, error) {
	var b [secretBytes]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", fmt.Errorf("auth: random secret: %w", err)
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// fileEntry and fileFormat are the JSON shape of the token file.
type fileEntry struct {
	Name       string   `json:"name"`
	SHA256     string   `json:"sha256"`
	Namespaces []string `json:"namespaces"`
	Role       string   `json:"role"`
}

type fileFormat struct {
	Tokens []fileEntry `json:"tokens"`
}

// Parse reads a token file. An empty file (or one of only white space) is
// an error: it would lock every client out, which is never what an operator
// means; {"tokens": []} says so on purpose.
func Parse(data []byte) (*Set, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New(`the file is empty; write {"tokens": []} to refuse every client on purpose`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileFormat
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a token file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a token file: data after the JSON object")
	}
	if f.Tokens == nil {
		return nil, errors.New(`not a token file: no "tokens" list`)
	}
	tokens := make([]Token, 0, len(f.Tokens))
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]string{}
	for i, e := range f.Tokens {
		t, err := e.token()
		if err != nil {
			return nil, fmt.Errorf("tokens[%d]: %w", i, err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tokens[%d]: name %q appears twice", i, t.Name)
		}
		if other, ok := hashes[t.Hash]; ok {
			return nil, fmt.Errorf("tokens[%d] (%s): same sha256 as token %q", i, t.Name, other)
		}
		names[t.Name], hashes[t.Hash] = true, t.Name
		tokens = append(tokens, t)
	}
	return newSet(tokens), nil
}

func (e fileEntry) token() (Token, error) {
	if err := ValidateName(e.Name); err != nil {
		return Token{}, err
	}
	t := Token{Name: e.Name}
	h, err := hex.DecodeString(e.SHA256)
	if err != nil || len(h) != sha256.Size {
		return Token{}, fmt.Errorf("token %q: sha256 must be %d hex digits", e.Name, 2*sha256.Size)
	}
	copy(t.Hash[:], h)
	if t.Role, err = ParseRole(e.Role); err != nil {
		return Token{}, fmt.Errorf("token %q: %w", e.Name, err)
	}
	if t.Namespaces, err = CheckNamespaces(e.Namespaces); err != nil {
		return Token{}, fmt.Errorf("token %q: %w", e.Name, err)
	}
	return t, nil
}

// ValidateName checks a token name: 1-64 bytes of ASCII letters, digits,
// '.', '_', '-'.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("token name %q must be 1-%d bytes", name, MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("token name %q has byte %q at %d; use letters, digits, '.', '_', '-'", name, c, i)
		}
	}
	return nil
}

// CheckNamespaces checks a token's namespace list and returns it without
// duplicates: at least one entry, each a valid namespace, "" or "*".
func CheckNamespaces(nss []string) ([]string, error) {
	if len(nss) == 0 {
		return nil, errors.New(`namespaces is empty; list namespace names, "" for the default namespace, or "*" for all`)
	}
	var out []string
	for _, ns := range nss {
		if ns != AllNamespaces {
			if err := storage.ValidateNamespace(ns); err != nil {
				return nil, fmt.Errorf("namespaces: %w", err)
			}
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// Marshal writes s in the token file's format, one token per line so that
// a diff of two versions shows which tokens changed.
func (s *Set) Marshal() []byte {
	var b strings.Builder
	b.WriteString("{\"tokens\": [")
	for i, t := range s.tokens {
		if i > 0 {
			b.WriteByte(',')
		}
		line, _ := json.Marshal(fileEntry{Name: t.Name, SHA256: hex.EncodeToString(t.Hash[:]), Namespaces: t.Namespaces, Role: t.Role.String()})
		b.WriteString("\n  ")
		b.Write(line)
	}
	b.WriteString("\n]}\n")
	return []byte(b.String())
}

// With returns a copy of s with t added. A token of the same name is an
// error.
func (s *Set) With(t Token) (*Set, error) {
	if slices.ContainsFunc(s.tokens, func(o Token) bool { return o.Name == t.Name }) {
		return nil, fmt.Errorf("a token named %q exists; remove it first or pick another name", t.Name)
	}
	if _, ok := s.byHash[t.Hash]; ok {
		return nil, fmt.Errorf("token %q has the same secret as another token", t.Name)
	}
	return newSet(append(slices.Clone(s.tokens), t)), nil
}

// Without returns a copy of s without the token called name, and whether it
// was there.
func (s *Set) Without(name string) (*Set, bool) {
	kept := slices.DeleteFunc(slices.Clone(s.tokens), func(t Token) bool { return t.Name == name })
	return newSet(kept), len(kept) < len(s.tokens)
}

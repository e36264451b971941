package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNoToken is returned by RemoveToken for a name the file does not hold.
var ErrNoToken = errors.New("no such token")

// ReadFile reads and parses the token file at path.
func ReadFile(path string) (*Set, error) {
	_, s, err := readFile(path)
	return s, err
}

// readFile is ReadFile, also returning the bytes read.
func readFile(path string) ([]byte, *Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	return data, s, nil
}

// readOrEmpty is ReadFile, with a missing file read as no tokens: the first
// AddToken creates the file.
func readOrEmpty(path string) (*Set, error) {
	s, err := ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Set{}, nil
	}
	return s, err
}

// AddToken adds a token called name to the file at path (creating it, mode
// 0600), with a new random secret, and returns the secret. Only its hash is
// written. The file is replaced atomically, so a daemon reloading it sees the
// old or the new tokens, never half a file. Concurrent edits of one file are
// not coordinated: the last writer wins.
func AddToken(path, name string, namespaces []string, role Role) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	nss, err := CheckNamespaces(namespaces)
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	if _, ok := roleNames[role]; !ok {
		return "", fmt.Errorf("auth: unknown role %v", role)
	}
	s, err := readOrEmpty(path)
	if err != nil {
		return "", err
	}
	secret, err := NewSecret()
	if err != nil {
		return "", err
	}
	s, err = s.With(Token{Name: name, Hash: HashSecret(secret), Namespaces: nss, Role: role})
	if err != nil {
		return "", fmt.Errorf("auth: %s: %w", path, err)
	}
	if err := writeFile(path, s.Marshal()); err != nil {
		return "", err
	}
	return secret, nil
}

// RemoveToken removes the token called name from the file at path; a name
// the file does not hold is ErrNoToken.
func RemoveToken(path, name string) error {
	s, err := ReadFile(path)
	if err != nil {
		return err
	}
	s, ok := s.Without(name)
	if !ok {
		return fmt.Errorf("auth: %s: token %q: %w", path, name, ErrNoToken)
	}
	return writeFile(path, s.Marshal())
}

// writeFile replaces path with data atomically: a temporary file in the
// same folder, synced, renamed over path, then the folder synced.
func writeFile(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("auth: write %s: %w", path, err)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// listener is a bound --listen address.
type listener struct {
	net.Listener
	display  string // the address actually bound, as --listen spells it
	loopback bool

	closeOnce sync.Once
	closeErr  error
	socket    string      // unix socket path to remove on Close, if ours
	socketFI  os.FileInfo // the socket file we made, to not remove another's
}

// Close closes the listener and removes the unix socket file if it is still
// the one this listener made. Safe to call more than once.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.Listener.Close()
		if l.socket != "" {
			if fi, err := os.Lstat(l.socket); err == nil && os.SameFile(fi, l.socketFI) {
				_ = os.Remove(l.socket)
			}
		}
	})
	return l.closeErr
}

// listenChecked binds addr once check (checkExposure or
// checkMetricsExposure) allows it, then checks the address actually bound,
// since a name may have resolved differently; it returns check's warning.
func listenChecked(ctx context.Context, addr string, check func(addr string, loopback bool) (string, error)) (*listener, string, error) {
	if _, err := check(addr, listenLoopback(ctx, addr)); err != nil {
		return nil, "", err
	}
	lis, err := listen(addr)
	if err != nil {
		return nil, "", err
	}
	warning, err := check(lis.display, lis.loopback)
	if err != nil {
		_ = lis.Close()
		return nil, "", err
	}
	return lis, warning, nil
}

// listen binds addr: host:port over TCP, or unix:/path (also unix:///path)
// for a unix socket.
func listen(addr string) (*listener, error) {
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		path := rest
		if p, ok := strings.CutPrefix(rest, "//"); ok {
			path = p
		}
		if path == "" {
			return nil, usagef("--listen %q names no socket path", addr)
		}
		return listenUnix(path)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usagef("--listen %q: want host:port or unix:/path: %v", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	tcp := l.Addr().(*net.TCPAddr)
	return &listener{Listener: l, display: tcp.String(), loopback: tcp.IP.IsLoopback()}, nil
}

// listenUnix makes a socket that only its owner can use (0600). The socket
// is bound under a temporary name, chmod'ed, then renamed into place, so
// that there is no moment at which another user could connect to it.
func listenUnix(path string) (*listener, error) {
	path = filepath.Clean(path)
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(path), ".sessiond-"+hex.EncodeToString(rnd[:])+".sock")
	bindPath := tmp
	// sun_path holds 108 bytes; if the temporary name does not fit, bind
	// the final name and chmod at once (a brief window, documented).
	if len(tmp) >= 108 {
		bindPath = path
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bindPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on unix:%s: %w", path, err)
	}
	// The file may be renamed, so removal is done by listener.Close.
	l.SetUnlinkOnClose(false)
	fail := func(err error) (*listener, error) {
		_ = l.Close()
		_ = os.Remove(bindPath)
		return nil, fmt.Errorf("listen on unix:%s: %w", path, err)
	}
	if err := os.Chmod(bindPath, 0o600); err != nil {
		return fail(err)
	}
	if bindPath != path {
		if err := os.Rename(bindPath, path); err != nil {
			return fail(err)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &listener{Listener: l, display: "unix:" + path, loopback: true, socket: path, socketFI: fi}, nil
}

// removeStaleSocket removes a socket file left by a daemon that died, and
// only that: a file that is not a socket, or a socket something still
// answers on, is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen on unix:%s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("listen on unix:%s: the file exists and is not a socket; not removing it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("listen on unix:%s: another process is serving on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen on unix:%s: cannot tell whether the socket is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("listen on unix:%s: remove stale socket: %w", path, err)
	}
	return nil
}

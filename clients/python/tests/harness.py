"""Test harness: the real sessiond binary (SESSIOND_BIN) on a loopback port,
restartable on the same port and data dir, and a TCP proxy that can drop the
daemon's answers (so a write lands but its answer is lost)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import List, Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "gen", "python") + os.pathsep
           + os.path.join(ROOT, "clients", "python"), PYTHONDONTWRITEBYTECODE="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One sessiond on 127.0.0.1:<port> with its data in data_dir."""

    def __init__(self, data_dir: str, args: Optional[List[str]] = None) -> None:
        self.bin = os.environ.get("SESSIOND_BIN", "")
        if not self.bin:
            raise unittest.SkipTest("SESSIOND_BIN is not set (go test ./integration -run TestPythonSDK sets it)")
        self.data_dir = data_dir
        self.args = args or []
        self.addr = "127.0.0.1:%d" % free_port()
        self.proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self.log: List[str] = []

    def start(self) -> None:
        """Starts the daemon and waits for its "sessiond started" log line."""
        self.proc = subprocess.Popen(
            [self.bin, "--listen", self.addr, "--data-dir", self.data_dir] + self.args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        proc = self.proc

        def read() -> None:
            assert proc.stderr is not None
            with proc.stderr:
                for line in proc.stderr:
                    self.log.append(line)
                    if '"sessiond started"' in line:
                        ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 30
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("sessiond did not start:\n" + "".join(self.log))

    def stop(self) -> None:
        """SIGTERM, and a clean exit within 30 s."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("sessiond did not exit within 30 s of SIGTERM")
        if self._reader is not None:
            self._reader.join(10)
        self.proc = None
        if rc != 0:
            raise RuntimeError("sessiond exited with %d:\n%s" % (rc, "".join(self.log)))


class DaemonTest(unittest.TestCase):
    """A test case with a fresh daemon (self.daemon) and temp dir (self.dir)."""

    daemon_args: List[str] = []

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sessiond-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.daemon = Daemon(os.path.join(self.dir, "data"), self.daemon_args)
        self.daemon.start()
        self.addCleanup(self.daemon.stop)

    def proxy(self) -> "Proxy":
        """A Proxy to the daemon, closed when the test ends."""
        p = Proxy(self.daemon.addr)
        self.addCleanup(p.close)
        return p

    def python(self, *args: str, input: Optional[str] = None) -> str:
        """Runs a Python program of this folder in its own process; returns its stdout."""
        out = subprocess.run([sys.executable] + list(args), env=ENV, input=input, capture_output=True,
                             text=True, timeout=120, cwd=os.path.dirname(__file__))
        if out.returncode != 0:
            self.fail("%s exited with %d:\n%s%s" % (args, out.returncode, out.stdout, out.stderr))
        return out.stdout


class Proxy:
    """A TCP proxy to upstream; with drop_answers set, it forwards what the
    client sends and throws away what the daemon answers. cut() closes every
    connection it carries."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.drop_answers = False
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.addr = "127.0.0.1:%d" % self._sock.getsockname()[1]
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            try:
                u = socket.create_connection((host, int(port)), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if answers and self.drop_answers:
                    continue
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._sock.close()
        self.cut()

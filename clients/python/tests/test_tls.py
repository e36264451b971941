"""Tests of sessiond_client against a daemon with tokens and mutual TLS (the
real daemon, SESSIOND_BIN). go test ./integration -run TestPythonSDK makes the
token file and certificates and passes them in the environment."""

from __future__ import annotations

import json
import os
import unittest

from sessiond.v1 import sessiond_pb2 as pb

import sessiond_client as sc

from .harness import DaemonTest


class TokenTLSTest(DaemonTest):
    """A daemon with --auth-tokens and mutual TLS. The Go test gives its
    arguments (SESSIOND_TLS_ARGS, a JSON list), the server's CA
    (SESSIOND_TLS_CA), a client certificate and key (SESSIOND_TLS_CLIENT_CERT,
    SESSIOND_TLS_CLIENT_KEY), a write token (SESSIOND_TEST_TOKEN) and its
    namespace (SESSIOND_TEST_NAMESPACE)."""

    def setUp(self) -> None:
        args = os.environ.get("SESSIOND_TLS_ARGS")
        if not args:
            self.skipTest("SESSIOND_TLS_ARGS is not set")
        self.daemon_args = json.loads(args)
        self.tls = sc.TLS(ca_file=os.environ["SESSIOND_TLS_CA"], cert_file=os.environ["SESSIOND_TLS_CLIENT_CERT"],
                          key_file=os.environ["SESSIOND_TLS_CLIENT_KEY"])
        self.token = os.environ["SESSIOND_TEST_TOKEN"]
        self.ns = os.environ.get("SESSIOND_TEST_NAMESPACE", "")
        super().setUp()

    def client(self, token: str, tls: sc.TLS | None, namespace: str) -> sc.Client:
        c = sc.Client(self.daemon.addr, token=token, tls=tls, namespace=namespace, timeout=5)
        self.addCleanup(c.close)
        return c

    def test_token_and_tls(self) -> None:
        c = self.client(self.token, self.tls, self.ns)
        with c.open_or_create(alias="secure") as h:
            h.append(pb.Message(role=pb.ROLE_USER, content="over TLS"))
        self.assertEqual([m.content for m in c.load(id=h.id)[1]], ["over TLS"])
        with self.assertRaises(sc.Unauthenticated):  # no token
            self.client("", self.tls, self.ns).get(id=h.id)
        with self.assertRaises(sc.PermissionDenied):  # a namespace the token may not use
            self.client(self.token, self.tls, "elsewhere").get(alias="secure")
        with self.assertRaises(sc.Unavailable):  # no client certificate: the handshake fails
            self.client(self.token, sc.TLS(ca_file=self.tls.ca_file), self.ns).get(id=h.id)
        with self.assertRaises(sc.Unavailable):  # plaintext to a TLS daemon
            self.client(self.token, None, self.ns).get(id=h.id)
        with self.assertRaises(sc.Invalid):  # a certificate without its key
            sc.TLS(ca_file=self.tls.ca_file, cert_file=self.tls.cert_file).credentials()


if __name__ == "__main__":
    unittest.main()

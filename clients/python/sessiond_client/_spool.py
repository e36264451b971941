"""The spool file format of both SDKs, described once in the Go SDK's package
documentation (client/doc.go, "Spooling"; `go doc ./client`): a spool
written by either SDK is read by the other. This module encodes, decodes,
writes and reads it.
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass
from typing import List, Tuple

from sessiond.v1 import sessiond_pb2 as pb

MAGIC = b"SDSPOOL1"
HEADER = len(MAGIC) + 8
EXT = ".spool"
# A temporary file older than this is left from a crashed write and removed.
TEMP_AGE = 60.0

# Flags. REPLACE (the messages replace the stored ones) is never written;
# open keeps a file with it aside as "<file>.conflict".
REPLACE = 1
SUMMARY = 2
METADATA = 4


class Damaged(Exception):
    """A spool file failed its checks (short, torn, bad checksum, bad payload)."""


def _crc32c_table() -> List[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as Go's crc32.Checksum with crc32.Castagnoli."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(b: bytes, i: int) -> Tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise Damaged("truncated or overlong varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7


@dataclass
class SpoolState:
    """What a spool file holds."""

    session: pb.Session
    flags: int


def encode(st: SpoolState) -> bytes:
    sess = st.session.SerializeToString(deterministic=True)
    payload = b"\x0a" + _varint(len(sess)) + sess + b"\x10" + _varint(st.flags)
    if len(payload) > 0xFFFFFFFF:
        raise ValueError("spool payload of %d bytes is over the 4 GiB a spool file holds" % len(payload))
    return MAGIC + struct.pack("<II", len(payload), crc32c(payload)) + payload


def decode(b: bytes) -> SpoolState:
    """Checks and decodes a spool file; anything wrong raises Damaged."""
    if len(b) < HEADER or b[: len(MAGIC)] != MAGIC:
        raise Damaged("not a spool file (bad header)")
    n, crc = struct.unpack_from("<II", b, len(MAGIC))
    payload = b[HEADER:]
    if len(payload) != n:
        raise Damaged("%d payload bytes, header says %d (torn write)" % (len(payload), n))
    if crc32c(payload) != crc:
        raise Damaged("checksum mismatch")
    sess = None
    flags = 0
    i = 0
    while i < len(payload):
        tag, i = _read_varint(payload, i)
        num, typ = tag >> 3, tag & 7
        if typ == 0:
            v, i = _read_varint(payload, i)
            if num == 2:
                flags = v
        elif typ == 2:
            ln, i = _read_varint(payload, i)
            if i + ln > len(payload):
                raise Damaged("truncated field %d" % num)
            if num == 1:
                sess = payload[i : i + ln]
            i += ln
        elif typ in (1, 5):  # a fixed-size field from a newer SDK: skip it
            i += 8 if typ == 1 else 4
            if i > len(payload):
                raise Damaged("truncated field %d" % num)
        else:
            raise Damaged("field %d has unsupported wire type %d" % (num, typ))
    if sess is None:
        raise Damaged("no session")
    session = pb.Session()
    try:
        session.ParseFromString(sess)
    except Exception as err:  # protobuf's DecodeError
        raise Damaged("session does not decode: %s" % err) from err
    seen = set()
    for k, m in enumerate(session.messages):
        if not m.id or m.role == pb.ROLE_UNSPECIFIED:
            raise Damaged("message %d has no id or role" % k)
        if m.id in seen:
            raise Damaged("message id %r repeats" % m.id)
        seen.add(m.id)
    return SpoolState(session, flags)


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def prefix(namespace: str, session_id: str) -> str:
    """The start of the names of every spool file of one session."""
    name = session_id if _UUID.match(session_id) else "id-" + session_id.encode().hex()
    return "%s.ns-%s." % (name, namespace.encode().hex())


def files(folder: str, namespace: str, session_id: str) -> List[str]:
    """The spool files of one session in folder, oldest first; removes
    temporary files left by crashed writes."""
    pre = prefix(namespace, session_id)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    found = []
    now = time.time()
    for e in entries:
        if not e.name.startswith(pre) or not e.is_file(follow_symlinks=False):
            continue
        try:
            mtime = e.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue  # removed meanwhile
        if e.name.endswith(EXT):
            found.append((mtime, e.path))
        elif e.name.endswith(".tmp") and now - mtime > TEMP_AGE:
            try:
                os.remove(e.path)
            except OSError:
                pass
    found.sort()
    return [p for _, p in found]


def _sync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Replaces path with data: a temporary file in the same folder (0600) is
    written, fsync'd and renamed over path, then the folder is fsync'd."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _sync_dir(folder)


def remove_durably(path: str) -> None:
    """Removes path (a missing file is fine) and fsyncs its folder."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    _sync_dir(os.path.dirname(path) or ".")


def read(path: str) -> SpoolState:
    with open(path, "rb") as f:
        return decode(f.read())


def quarantine(path: str, suffix: str, cause: str) -> str:
    """Renames a spool file that must not be sent to path+suffix, so that it
    is kept for a person to inspect, and describes what happened."""
    try:
        os.replace(path, path + suffix)
    except OSError as err:
        return "spool file %s: %s; not sent, and not renamed aside: %s" % (path, cause, err)
    try:
        _sync_dir(os.path.dirname(path) or ".")
    except OSError:
        pass
    return "spool file %s: %s; not sent, kept as %s" % (path, cause, path + suffix)

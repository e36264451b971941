"""Client-made ids."""

from __future__ import annotations

import secrets
import time


def new_id() -> str:
    """A new UUIDv7 (time-ordered, like the daemon's own ids)."""
    ms = time.time_ns() // 1_000_000
    r = int.from_bytes(secrets.token_bytes(10), "big")
    v = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (r >> 68 & 0xFFF) << 64 | 0b10 << 62 | (r & ((1 << 62) - 1))
    h = "%032x" % v
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])

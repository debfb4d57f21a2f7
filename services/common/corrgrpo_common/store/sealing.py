"""Authentication of the values `RedisStore` keeps: whoever can write to Redis is not trusted.

A sealed value is HMAC-SHA256(secret, 4-byte big-endian key length + key + value) followed by the value, so a
value forged, or a genuine one moved to another key, fails to open.
"""

from __future__ import annotations

import hashlib
import hmac

from .errors import StoreMisconfigured
from .interface import MIN_SECRET_CHARS

MAC_BYTES = hashlib.sha256().digest_size


class ValueSeal:
    """Seals values under one secret, shared by every replica, and opens only what it sealed."""

    def __init__(self, secret: str) -> None:
        if len(secret) < MIN_SECRET_CHARS:
            raise StoreMisconfigured(f"the store secret must have at least {MIN_SECRET_CHARS} characters")
        self._secret = secret.encode()

    def _mac(self, key: str, value: bytes | memoryview) -> bytes:
        name = key.encode()
        mac = hmac.new(self._secret, len(name).to_bytes(4, "big") + name, hashlib.sha256)
        mac.update(value)
        return mac.digest()

    def sealed(self, key: str, value: bytes) -> bytes:
        return self._mac(key, value) + value

    def opened(self, key: str, blob: bytes) -> bytes | None:
        """The value `blob` carries when its MAC is this secret's for `key`; None when it is not."""
        value = memoryview(blob)[MAC_BYTES:]
        if len(blob) >= MAC_BYTES and hmac.compare_digest(blob[:MAC_BYTES], self._mac(key, value)):
            return bytes(value)
        return None

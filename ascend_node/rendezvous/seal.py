"""Authenticating shared-volume documents with a per-job key (HMAC-SHA256).

The shared volume is the rendezvous' trust boundary: anything that mounts the same PVC
can write there (another job of the same user, a debugging pod, a buggy script). Schema
validation stops a torn or foreign-shaped file, not a well-formed forgery. With a key
that only the job's pods hold (`ASCEND_NODE_RENDEZVOUS_KEY`, or a file named by
`--rendezvous-key-file`, e.g. a Kubernetes Secret every pod mounts), every document a
pod writes carries an `auth` member:

    {"key_id": "<16 hex>", "hmac": "<64 hex>"}

The MAC covers a domain label, the document's place on the volume (its path from
`.ascend-node/`, so a signed document copied or replayed to another slot, attempt or
run fails) and the canonical bytes of every other member (JSON with sorted keys and
no spaces; Python's `json` round-trips numbers and strings exactly, so the reader
recomputes the writer's bytes from what it parsed). The check is `hmac.compare_digest`
(constant time). Without a key nothing changes: documents carry no `auth`, byte for
byte as before.

`key_id` is a hash of a hash of the key: it tells pods with different keys (or a pod
without one) apart in a message, and reveals nothing usable about the key. The key
itself never leaves this object: not in `repr`, logs, status, events, the volume, or
the environment handed to the server (`STRIP_FROM_EXEC`).

This module knows nothing of the rendezvous' document kinds: `seal` and `unseal`
work on any JSON object, so any small file on the volume (a hint, a summary) can be
signed the same way (`store.write_doc` / `store.read_doc` do it for every document).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from ascend_node.errors import ConfigError

KEY_ENV = "ASCEND_NODE_RENDEZVOUS_KEY"
KEY_FILE_ENV = "ASCEND_NODE_RENDEZVOUS_KEY_FILE"
STRIP_FROM_EXEC = (KEY_ENV,)
"""Variables the agent removes from the environment it hands to the server."""

MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096
_DOMAIN = b"ascend-node rendezvous v1\0"
AUTH = "auth"


class RendezvousKey:
    """The job's shared secret. Compares, prints and pickles as its key id only."""

    __slots__ = ("_secret", "key_id")

    def __init__(self, secret: bytes) -> None:
        if not MIN_KEY_BYTES <= len(secret) <= MAX_KEY_BYTES:
            raise ValueError(f"a rendezvous key is {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, "
                             f"not {len(secret)}")
        self._secret = secret
        self.key_id = key_id_of(secret)

    def __repr__(self) -> str:
        return f"RendezvousKey(key_id={self.key_id!r})"

    def __reduce__(self) -> Any:
        raise TypeError("a rendezvous key is not serialisable")

    def mac(self, where: str, payload: Mapping[str, Any]) -> str:
        message = _DOMAIN + where.encode() + b"\0" + canonical(payload)
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()


def key_id_of(secret: bytes) -> str:
    """A hash of a hash: names a key in messages without revealing it."""
    inner = hashlib.sha256(b"ascend-node key\0" + secret).digest()
    return hashlib.sha256(b"ascend-node key id\0" + inner).hexdigest()[:16]


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes a MAC covers: JSON, keys sorted, no spaces, ASCII."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode()


def where_of(path: Path) -> str:
    """A document's place as every pod names it, whatever the mount point: the path
    from the last `.ascend-node` component (the file name alone elsewhere)."""
    parts = path.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == ".ascend-node":
            return "/".join(parts[i:])
    return path.name


def seal(payload: Mapping[str, Any], key: Optional[RendezvousKey], where: str
         ) -> dict[str, Any]:
    """`payload` with its `auth` member when there is a key (unchanged without)."""
    out = {k: v for k, v in payload.items() if k != AUTH}
    if key is not None:
        out[AUTH] = {"key_id": key.key_id, "hmac": key.mac(where, out)}
    return out


Problem = Literal["unsigned", "no-key", "other-key", "forged"]


@dataclass(frozen=True)
class AuthProblem:
    kind: Problem
    reason: str

    @property
    def mismatch(self) -> bool:
        """Likely pods of one job configured with different keys (or one without)."""
        return self.kind in ("unsigned", "no-key", "other-key")


def unseal(data: dict[str, Any], key: Optional[RendezvousKey], where: str
           ) -> Optional[AuthProblem]:
    """Remove `auth` from `data` (in place) and say what is wrong with it, if anything.

    No key: a document must carry no `auth` (a signed one comes from a pod that has a
    key this one lacks). A key: the document must be signed with it, at this place."""
    auth = data.pop(AUTH, None)
    if key is None:
        if auth is None:
            return None
        kid = auth.get("key_id") if isinstance(auth, dict) else None
        return AuthProblem("no-key", f"is signed with a rendezvous key (key id {_shown(kid)}) "
                                     "but this pod has none")
    if auth is None:
        return AuthProblem("unsigned", "is not signed with the job's rendezvous key "
                                       f"(key id {key.key_id}): written by a pod without "
                                       "the key, or by a foreign writer")
    if not isinstance(auth, dict) or set(auth) != {"key_id", "hmac"} or not all(
            isinstance(v, str) for v in auth.values()):
        return AuthProblem("forged", "has a malformed signature (auth)")
    if auth["key_id"] != key.key_id:
        return AuthProblem("other-key", f"is signed with another rendezvous key (key id "
                                        f"{_shown(auth['key_id'])}; this pod's is "
                                        f"{key.key_id})")
    if not hmac.compare_digest(auth["hmac"].encode(), key.mac(where, data).encode()):
        return AuthProblem("forged", f"fails authentication with the job's key (key id "
                                     f"{key.key_id}): altered, forged, or copied from "
                                     "another place")
    return None


def _shown(value: object) -> str:
    text = str(value)
    return text if len(text) <= 16 and text.isalnum() else repr(text[:16])


def load_key(environ: Mapping[str, str], key_file: Optional[Path],
             key_file_source: str = KEY_FILE_ENV) -> Optional[RendezvousKey]:
    """The job's key from `ASCEND_NODE_RENDEZVOUS_KEY` or the key file (a mounted
    Secret), or None. Messages name where the key came from, never the key."""
    raw = environ.get(KEY_ENV)
    text = raw.strip() if raw is not None else ""
    if text and key_file is not None:
        raise ConfigError(
            f"both {KEY_ENV} and a key file ({key_file_source}: {key_file}) are set",
            "give the rendezvous key one way only",
        )
    if text:
        secret, source = text.encode(), KEY_ENV
    elif key_file is not None:
        secret, source = _read_key_file(key_file, key_file_source), f"{key_file_source} {key_file}"
    else:
        return None
    try:
        return RendezvousKey(secret)
    except ValueError as exc:
        raise ConfigError(f"the rendezvous key from {source} is unusable: {exc}",
                          "use a random key of at least 32 characters, the same for "
                          "every pod of the job (e.g. `openssl rand -hex 32`)") from exc


def _read_key_file(path: Path, source: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot open the rendezvous key file {path} ({source}): "
                          f"{exc.strerror}",
                          "mount the job's key Secret there, or fix the path") from exc
    try:
        data = os.read(fd, MAX_KEY_BYTES + 2)
    except OSError as exc:
        raise ConfigError(f"cannot read the rendezvous key file {path} ({source}): "
                          f"{exc.strerror}", "mount the job's key Secret there") from exc
    finally:
        os.close(fd)
    return data.strip()

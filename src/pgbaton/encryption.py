"""Encrypted job args (docs/howto/encryption.md): the keys of PGBATON_ENCRYPTION_KEYS and
the sealed envelope a task's args are stored in. No I/O.

A task registered with encrypt=True stores its args as

    {"$encrypted": {"v": 1, "kid": "<key id>", "nonce": "<base64>", "ct": "<base64>"}}

an AES-256-GCM ciphertext of the args' JSON whose associated data is the task's name, so
that the database (and whoever reads it) never holds the plaintext and a sealed value
moved to a job of another task does not open. `kid` names the key that sealed it (a
digest of the key, never the key), so that a worker holding several keys tries the
right one and `pgbaton rotate-keys` finds the jobs sealed with an old one.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ArgsRejected, ConfigurationError

ENVELOPE = "$encrypted"
KEYS_VARIABLE = "PGBATON_ENCRYPTION_KEYS"
VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12  # GCM's standard nonce: random for each job, never repeated in practice
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")
INSTALL_HINT = "pip install 'pgbaton[encryption]'"


@dataclass(frozen=True)
class Keyring:
    """The keys of PGBATON_ENCRYPTION_KEYS by key id, in order: the first seals new
    args, every one opens."""

    keys: tuple[tuple[str, bytes], ...]

    @property
    def current(self) -> str:
        """The key id that seals new args."""
        return self.keys[0][0]

    def key(self, kid: str) -> bytes | None:
        return next((key for held, key in self.keys if held == kid), None)

    def ids(self) -> list[str]:
        return [kid for kid, _ in self.keys]


def key_id(key: bytes) -> str:
    """A short public name for a key: a digest of it (16 hex digits), never the key."""
    return hashlib.sha256(b"pgbaton encryption key id\0" + key).hexdigest()[:16]


def new_key() -> str:
    """A fresh key as PGBATON_ENCRYPTION_KEYS takes it: 32 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def parse_keys(text: str) -> Keyring:
    """PGBATON_ENCRYPTION_KEYS's value as a Keyring; ConfigurationError naming the entry
    at fault and why (never the entry itself: it is a secret)."""
    entries = [entry.strip() for entry in text.split(",")]
    if entries == [""]:
        raise ConfigurationError(f"{KEYS_VARIABLE} is empty: give one key or more, "
                                 "comma-separated (docs/howto/encryption.md)")
    keys: list[tuple[str, bytes]] = []
    for number, entry in enumerate(entries, 1):
        where = f"{KEYS_VARIABLE}: entry {number} of {len(entries)}"
        if not entry:
            raise ConfigurationError(f"{where} is empty (a stray comma?)")
        if not _BASE64URL.fullmatch(entry):
            raise ConfigurationError(
                f"{where} is not URL-safe base64 (letters, digits, '-' and '_' only)")
        try:
            key = base64.urlsafe_b64decode(entry.rstrip("=") + "=" * (-len(entry.rstrip("=")) % 4))
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{where} is not URL-safe base64") from None
        if len(key) != KEY_BYTES:
            raise ConfigurationError(
                f"{where} decodes to {len(key)} bytes; a key is {KEY_BYTES} bytes "
                f"({KEY_BYTES * 4 // 3 + 1} base64 characters)"
            )
        kid = key_id(key)
        if any(kid == held for held, _ in keys):
            raise ConfigurationError(f"{where} repeats an earlier entry")
        keys.append((kid, key))
    return Keyring(tuple(keys))


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> Keyring:
    return parse_keys(text)


def keyring(task: str) -> Keyring:
    """The keys of this process's PGBATON_ENCRYPTION_KEYS (read at each call, parsed once
    per value); ConfigurationError when it is unset or malformed."""
    text = os.environ.get(KEYS_VARIABLE)
    if text is None:
        raise ConfigurationError(
            f"task {task!r} encrypts its args (encrypt=True) but {KEYS_VARIABLE} is not "
            "set: give it one key or more (docs/howto/encryption.md)"
        )
    return _parsed(text)


def check_available() -> None:
    """ConfigurationError when the cryptography package is missing."""
    try:
        import cryptography.hazmat.primitives.ciphers.aead  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            f"encrypt=True needs the cryptography package: {INSTALL_HINT}"
        ) from None


def _associated_data(task: str) -> bytes:
    return f"pgbaton args v{VERSION}\0{task}".encode("utf-8", "surrogatepass")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


@functools.lru_cache(maxsize=16)
def _cipher(key: bytes) -> Any:
    """AESGCM for a key, built once: building it costs more than sealing small args."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def seal(task: str, args_json: str, ring: Keyring) -> dict[str, Any]:
    """The stored form of a task's args (their JSON text), sealed with the first key."""
    kid, key = ring.keys[0]
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher(key).encrypt(nonce, args_json.encode("utf-8"), _associated_data(task))
    return {ENVELOPE: {"v": VERSION, "kid": kid, "nonce": _b64(nonce), "ct": _b64(sealed)}}


def is_sealed(args: object) -> bool:
    """Whether stored args are a sealed envelope (its shape; open() judges the rest)."""
    return isinstance(args, Mapping) and len(args) == 1 and ENVELOPE in args


def sealed_with(args: Mapping[str, Any]) -> str | None:
    """The key id of a sealed envelope, if it names one."""
    envelope = args.get(ENVELOPE)
    kid = envelope.get("kid") if isinstance(envelope, Mapping) else None
    return kid if isinstance(kid, str) else None


def open_sealed(task: str, args: Mapping[str, Any], ring: Keyring | None) -> dict[str, Any]:
    """The args a sealed envelope holds; ArgsRejected naming why they cannot be had (no
    key, not this task's, altered), never their content. ring None: no keys here."""
    envelope = args.get(ENVELOPE)
    fields = envelope if isinstance(envelope, Mapping) else {}
    kid, nonce, ct = fields.get("kid"), fields.get("nonce"), fields.get("ct")
    if fields.get("v") != VERSION or not all(isinstance(f, str) for f in (kid, nonce, ct)):
        raise ArgsRejected(
            f"the encrypted args of task {task!r} are not an envelope this version of "
            f"pgbaton reads (version {VERSION}, with kid, nonce and ct)"
        )
    assert isinstance(kid, str) and isinstance(nonce, str) and isinstance(ct, str)
    if ring is None:
        raise ArgsRejected(
            f"the args of task {task!r} are encrypted (key id {kid}) but this worker has "
            f"no {KEYS_VARIABLE}"
        )
    key = ring.key(kid)
    if key is None:
        raise ArgsRejected(
            f"the args of task {task!r} are encrypted with key id {kid}, which this "
            f"worker's {KEYS_VARIABLE} does not hold (it holds key ids "
            f"{', '.join(ring.ids())})"
        )
    try:
        from cryptography.exceptions import InvalidTag
    except ImportError:
        raise ArgsRejected(f"the args of task {task!r} are encrypted and this worker "
                           f"lacks the cryptography package: {INSTALL_HINT}") from None

    try:
        plain = _cipher(key).decrypt(
            base64.urlsafe_b64decode(nonce), base64.urlsafe_b64decode(ct),
            _associated_data(task),
        )
    except (binascii.Error, ValueError, InvalidTag):
        raise ArgsRejected(
            f"the encrypted args of task {task!r} do not open with key id {kid}: they "
            "were altered, or sealed for another task"
        ) from None
    opened = json.loads(plain)
    if not isinstance(opened, dict):
        raise ArgsRejected(f"the encrypted args of task {task!r} are not a JSON object")
    return opened


def reseal(task: str, args: Mapping[str, Any], ring: Keyring) -> dict[str, Any] | None:
    """A sealed envelope sealed again with the first key; None when it already is.
    ArgsRejected as open_sealed() when it cannot be opened."""
    if sealed_with(args) == ring.current:
        return None
    opened = open_sealed(task, args, ring)
    sealed = seal(task, json.dumps(opened, ensure_ascii=False, separators=(",", ":")), ring)
    # What lies beside the envelope stays (a batch callback's `batch`, added in SQL).
    return {**args, **sealed}


@dataclass
class ResealCounts:
    """What `pgbaton rotate-keys` (Queue.reseal_args) did: jobs sealed again with the
    first key, jobs claimed or changed before their turn (run it again), and the ids of
    jobs sealed with a key the ring lacks (left as they are)."""

    resealed: int = 0
    changed_meanwhile: int = 0
    unopenable: list[int] = field(default_factory=list)

"""Encrypted args (docs/howto/encryption.md): PGBATON_ENCRYPTION_KEYS's hostile forms
are each named, a sealed envelope holds no plaintext and opens only for its own task
with a key the worker holds, and rotation seals again with the first key."""

from __future__ import annotations

import base64
import json

import pytest

import pgbaton
from pgbaton import encryption
from pgbaton.errors import ArgsRejected, ConfigurationError

pytest.importorskip("cryptography")

# Fixed keys, not new_key(): parametrize ids hold them, and every xdist worker must
# collect the same ids.
OLD = base64.urlsafe_b64encode(bytes(range(32))).decode()
NEW = base64.urlsafe_b64encode(bytes(range(32, 64))).decode()
SECRET = "4111-1111-1111-1111"


@pytest.fixture
def keys(monkeypatch):
    def use(*keys: str) -> None:
        monkeypatch.setenv(encryption.KEYS_VARIABLE, ",".join(keys))
    return use


@pytest.mark.parametrize(("text", "says"), [
    ("", "is empty"),
    (f"{NEW},", "entry 2 of 2 is empty"),
    (f"{NEW},not base64!", "entry 2 of 2 is not URL-safe base64"),
    (base64.urlsafe_b64encode(b"x" * 16).decode(), "decodes to 16 bytes; a key is 32"),
    (base64.b64encode(b"\xfb" * 32).decode(), "not URL-safe base64"),  # '+' and '/'
    (f"{NEW}, {NEW}", "entry 2 of 2 repeats an earlier entry"),
])
def test_a_malformed_key_list_names_the_entry_and_why_never_the_key(text, says):
    with pytest.raises(ConfigurationError, match=says) as raised:
        encryption.parse_keys(text)
    assert NEW not in str(raised.value)


def test_keys_with_or_without_padding_and_spaces_are_read():
    ring = encryption.parse_keys(f" {NEW} ,{OLD.rstrip('=')}")
    assert len(ring.keys) == 2 and ring.current == encryption.key_id(
        base64.urlsafe_b64decode(NEW))


def test_sealed_args_hold_no_plaintext_and_open_again():
    ring = encryption.parse_keys(NEW)
    sealed = encryption.seal("charge", json.dumps({"card": SECRET}), ring)
    assert list(sealed) == ["$encrypted"] and sealed["$encrypted"]["kid"] == ring.current
    assert SECRET not in json.dumps(sealed) and "card" not in json.dumps(sealed)
    assert encryption.open_sealed("charge", sealed, ring) == {"card": SECRET}
    again = encryption.seal("charge", json.dumps({"card": SECRET}), ring)
    assert again != sealed  # a fresh nonce each time


def test_sealed_args_moved_to_another_task_or_altered_do_not_open():
    ring = encryption.parse_keys(NEW)
    sealed = encryption.seal("charge", json.dumps({"card": SECRET}), ring)
    with pytest.raises(ArgsRejected, match=r"do not open .* sealed for another task"):
        encryption.open_sealed("refund", sealed, ring)
    ct = sealed["$encrypted"]["ct"]
    flipped = ("A" if ct[0] != "A" else "B") + ct[1:]
    altered = {"$encrypted": {**sealed["$encrypted"], "ct": flipped}}
    with pytest.raises(ArgsRejected, match="were altered"):
        encryption.open_sealed("charge", altered, ring)
    for broken in ({"$encrypted": "x"}, {"$encrypted": {**sealed["$encrypted"], "v": 9}},
                   {"$encrypted": {**sealed["$encrypted"], "nonce": None}}):
        with pytest.raises(ArgsRejected, match="not an envelope"):
            encryption.open_sealed("charge", broken, ring)


def test_a_worker_without_the_key_is_told_which_key_is_missing():
    sealed = encryption.seal("charge", "{}", encryption.parse_keys(OLD))
    with pytest.raises(ArgsRejected, match=r"key id \w{16}, which this worker's "
                       r"PGBATON_ENCRYPTION_KEYS does not hold \(it holds key ids \w{16}\)"):
        encryption.open_sealed("charge", sealed, encryption.parse_keys(NEW))
    with pytest.raises(ArgsRejected, match="this worker has no PGBATON_ENCRYPTION_KEYS"):
        encryption.open_sealed("charge", sealed, None)


def test_reseal_uses_the_first_key_and_skips_what_it_already_sealed():
    old = encryption.seal("charge", json.dumps({"card": SECRET}), encryption.parse_keys(OLD))
    ring = encryption.parse_keys(f"{NEW},{OLD}")
    resealed = encryption.reseal("charge", old, ring)
    assert resealed is not None and encryption.sealed_with(resealed) == ring.current
    assert encryption.open_sealed("charge", resealed, encryption.parse_keys(NEW)) == {
        "card": SECRET}
    assert encryption.reseal("charge", resealed, ring) is None


def test_an_encrypted_task_seals_at_enqueue_and_opens_at_run(keys, monkeypatch):
    keys(NEW)
    app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")

    @app.task(encrypt=True)
    def charge(card: str, cents: int) -> None:
        pass

    stored = charge.stored_args({"card": SECRET, "cents": "250"})
    assert stored is not None and SECRET not in json.dumps(stored)
    assert charge.args_for_run(stored) == {"card": SECRET, "cents": 250}
    with pytest.raises(ArgsRejected, match="are not encrypted"):
        charge.args_for_run({"card": SECRET, "cents": 1})  # the SQL API's plaintext
    keys(f"{NEW},")
    with pytest.raises(ArgsRejected, match="entry 2 of 2 is empty"):
        charge.args_for_run(stored)
    monkeypatch.delenv(encryption.KEYS_VARIABLE)
    with pytest.raises(ConfigurationError, match="PGBATON_ENCRYPTION_KEYS is not set"):
        charge.stored_args({"card": SECRET, "cents": 1})
    with pytest.raises(ArgsRejected, match="this worker has no PGBATON_ENCRYPTION_KEYS"):
        charge.args_for_run(stored)


def test_unique_that_counts_args_is_refused_for_an_encrypted_task():
    app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(pgbaton.InvalidArgument, match=r"give Unique\(args=\[\]\)"):
        @app.task(encrypt=True, unique=pgbaton.Unique())
        def charge(card: str) -> None:
            pass

    @app.task(encrypt=True, unique=pgbaton.Unique(args=[]))
    def refund(card: str) -> None:
        pass

    with pytest.raises(pgbaton.InvalidArgument, match="cannot count them"):
        refund.job_options({"card": "x"}, {"unique": pgbaton.Unique(args=["card"])})


def test_encrypt_must_be_a_bool():
    app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(pgbaton.InvalidArgument, match="encrypt= must be True or False"):
        app.task(encrypt="yes")(lambda: None)  # type: ignore[call-overload]

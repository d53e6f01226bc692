"""Who may do what on the dashboard, and the guard on every action.

Access is "full" (read and act), "read-only" or "forbidden". It comes from, in order:
a resolver the embedding application passes to create_app (like Oban Web's), a bearer
token (PGBATON_DASHBOARD_TOKEN), HTTP basic auth (PGBATON_DASHBOARD_USER and
PGBATON_DASHBOARD_PASSWORD); with none of them configured, everyone who can reach the
port has full access, which is why the command binds to 127.0.0.1 and refuses any
other address without authentication. read_only=True caps every access at read-only.

Actions are POSTs carrying a CSRF token: a random nonce signed with the app's secret,
set as a cookie and repeated in the form (double submit). A page on another site can
make the browser send the cookie, never read it, so it cannot repeat it. Requests that
authenticate with the bearer token need no CSRF token: browsers never add that header
by themselves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request

Access = Literal["full", "read-only", "forbidden"]
ACCESS_LEVELS: tuple[Access, ...] = ("full", "read-only", "forbidden")
Resolver = Callable[[Request], Access | Awaitable[Access]]

TOKEN_VARIABLE = "PGBATON_DASHBOARD_TOKEN"
USER_VARIABLE = "PGBATON_DASHBOARD_USER"
PASSWORD_VARIABLE = "PGBATON_DASHBOARD_PASSWORD"
SECRET_VARIABLE = "PGBATON_DASHBOARD_SECRET"
CSRF_COOKIE = "pgbaton_csrf"
CSRF_FIELD = "csrf_token"
LOCAL_HOSTS = ("localhost",)


@dataclass(frozen=True)
class Decision:
    access: Access
    who: str
    # False when the caller proved itself with the bearer token (no CSRF needed).
    needs_csrf: bool = True
    challenge: bool = False  # answer 401 with a basic-auth challenge


class Guard:
    def __init__(
        self,
        *,
        token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        resolver: Resolver | None = None,
        read_only: bool = False,
        secret: str | None = None,
    ) -> None:
        if token is not None and not token:
            raise ValueError("the dashboard token is empty: set a long random string")
        if basic_auth is not None and not all(basic_auth):
            raise ValueError("basic auth needs both a user and a password")
        self.token = token
        self.basic_auth = basic_auth
        self.resolver = resolver
        self.read_only = read_only
        self._secret = (secret or secrets.token_hex(32)).encode()

    @classmethod
    def from_environment(
        cls, *, resolver: Resolver | None = None, read_only: bool = False
    ) -> Guard:
        user = os.environ.get(USER_VARIABLE) or None
        password = os.environ.get(PASSWORD_VARIABLE) or None
        if (user is None) != (password is None):
            raise ValueError(f"set both {USER_VARIABLE} and {PASSWORD_VARIABLE}, or neither")
        return cls(
            token=os.environ.get(TOKEN_VARIABLE) or None,
            basic_auth=(user, password) if user and password else None,
            resolver=resolver,
            read_only=read_only,
            secret=os.environ.get(SECRET_VARIABLE) or None,
        )

    @property
    def authenticates(self) -> bool:
        return bool(self.token or self.basic_auth or self.resolver)

    async def decide(self, request: Request) -> Decision:
        decision = await self._decide(request)
        if self.read_only and decision.access == "full":
            return Decision("read-only", decision.who, decision.needs_csrf)
        return decision

    async def _decide(self, request: Request) -> Decision:
        client = request.client.host if request.client else "unknown"
        if self.resolver is not None:
            access = self.resolver(request)
            if inspect.isawaitable(access):
                access = await access
            if access not in ACCESS_LEVELS:
                raise ValueError(
                    f"the dashboard's resolver returned {access!r}: return one of "
                    f"{', '.join(ACCESS_LEVELS)}"
                )
            user = request.scope.get("user")
            name = getattr(user, "display_name", None) or getattr(user, "username", None)
            return Decision(access, f"{name or 'resolver'}@{client}")
        if not (self.token or self.basic_auth):
            return Decision("full", f"anonymous@{client}")
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if self.token and scheme.lower() == "bearer" and _same(credentials, self.token):
            return Decision("full", f"token@{client}", needs_csrf=False)
        if self.basic_auth and scheme.lower() == "basic":
            user, password = _basic(credentials)
            if _same(user, self.basic_auth[0]) and _same(password, self.basic_auth[1]):
                return Decision("full", f"{user}@{client}")
        return Decision("forbidden", f"unauthenticated@{client}",
                        challenge=self.basic_auth is not None)

    # -- CSRF -----------------------------------------------------------------------

    def new_csrf_token(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign(nonce)}"

    def valid_csrf_token(self, token: str | None) -> bool:
        if not token or "." not in token:
            return False
        nonce, _, signature = token.partition(".")
        return hmac.compare_digest(signature, self._sign(nonce))

    def csrf_ok(self, cookie: str | None, submitted: str | None) -> bool:
        return (self.valid_csrf_token(cookie) and submitted is not None
                and hmac.compare_digest(cookie or "", submitted))

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _basic(credentials: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    user, _, password = decoded.partition(":")
    return user, password


def is_local(host: str) -> bool:
    """Whether binding to host exposes the dashboard to this machine only."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, guard: Guard) -> None:
    """Refuse to serve beyond this machine when nobody has to authenticate."""
    if not is_local(host) and not guard.authenticates:
        raise ValueError(
            f"refusing to bind the dashboard to {host}: anyone who reaches it could act on "
            f"jobs. Set {TOKEN_VARIABLE}, or {USER_VARIABLE} and {PASSWORD_VARIABLE}, or "
            "bind to 127.0.0.1"
        )

"""Who may do what on the dashboard, and the guard on every action.

Access is "full" (read and act), "read-only" or "forbidden". It comes from, in order:
a resolver the embedding application passes to create_app (like Oban Web's), a bearer
token (PGBATON_DASHBOARD_TOKEN), HTTP basic auth (PGBATON_DASHBOARD_USER and
PGBATON_DASHBOARD_PASSWORD); with none of them configured, everyone who can reach the
port has full access, which is why the command binds to 127.0.0.1 and refuses any
other address without authentication. read_only=True caps every access at read-only.

Binding to 127.0.0.1 is no wall against a page in the browser of this machine's user:
DNS rebinding points a name of the attacker's at 127.0.0.1, and the page then reads
the dashboard as its own origin. Hosts answers only requests whose Host header is a
loopback name, the bound address or one the operator allowed; Origins refuses an
unsafe method sent from a page of another origin.

Actions are POSTs carrying a CSRF token: the HMAC, by the app's secret, of a random
per-browser session id kept in an HttpOnly, SameSite=Strict cookie. A page on another
site can make the browser send the cookie, never read it; and a token read in one
browser is useless in another, whose session id differs. Requests that authenticate
with the bearer token need no CSRF token: browsers never add that header by themselves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import ipaddress
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import Request

Access = Literal["full", "read-only", "forbidden"]
ACCESS_LEVELS: tuple[Access, ...] = ("full", "read-only", "forbidden")
Resolver = Callable[[Request], Access | Awaitable[Access]]

TOKEN_VARIABLE = "PGBATON_DASHBOARD_TOKEN"
USER_VARIABLE = "PGBATON_DASHBOARD_USER"
PASSWORD_VARIABLE = "PGBATON_DASHBOARD_PASSWORD"
SECRET_VARIABLE = "PGBATON_DASHBOARD_SECRET"
ALLOWED_HOSTS_VARIABLE = "PGBATON_DASHBOARD_ALLOWED_HOSTS"
SESSION_COOKIE = "pgbaton_session"
CSRF_FIELD = "csrf_token"
LOCAL_HOSTS = ("localhost",)
# The names a browser on this machine reaches a loopback-bound dashboard by.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
TOKEN_MINIMUM = 16
TOKEN_RULE = (f"at least {TOKEN_MINIMUM} characters, printable ASCII, no whitespace "
              "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


def check_token(token: str) -> str:
    """The token, or a ValueError naming the rule: a short or blank token is a
    password anyone guesses, and it would unlock binding beyond this machine."""
    printable = all("!" <= c <= "~" for c in token)
    if len(token) < TOKEN_MINIMUM or not printable:
        problem = (f"is {len(token)} characters long" if printable
                   else "holds whitespace or a character that is not printable ASCII")
        raise ValueError(f"the dashboard token ({TOKEN_VARIABLE}) is weak: it "
                         f"{problem}; a token must be {TOKEN_RULE}")
    return token


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
        if token is not None:
            check_token(token)
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

    # -- the session and its CSRF token -----------------------------------------------

    @staticmethod
    def new_session() -> str:
        return secrets.token_urlsafe(32)

    @staticmethod
    def valid_session(session: str | None) -> bool:
        return session is not None and _SESSION_ID.fullmatch(session) is not None

    def csrf_token(self, session: str) -> str:
        """The token the pages of one browser session carry in their forms."""
        return hmac.new(self._secret, b"csrf:" + session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str | None, submitted: str | None) -> bool:
        if not self.valid_session(session) or submitted is None:
            return False
        return hmac.compare_digest(self.csrf_token(session or "").encode(),
                                   submitted.encode("utf-8", "replace"))

    def bearer(self, request: Request) -> bool:
        """Whether the request carries the bearer token: a script, not a browser."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        return bool(self.token) and scheme.lower() == "bearer" and _same(
            credentials, self.token or "")


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


# -- which Host and which Origin the dashboard answers ----------------------------------


def split_host(value: str) -> tuple[str, int | None]:
    """A Host header (or an allowed host) as its name and port: "Example.com:8000" is
    ("example.com", 8000), "[::1]" is ("[::1]", None); a port that is no number is kept
    in the name, which then matches nothing."""
    value = value.strip().lower()
    name, colon, port = value.rpartition(":")
    if not colon or (":" in name and not name.endswith("]")):
        return value, None  # no port, or a bare IPv6 address (never a valid Host)
    if port.isascii() and port.isdigit() and len(port) <= 5:
        return name, int(port)
    return value, None


class Hosts:
    """The Host headers the dashboard answers: loopback names on any port, the address
    it is bound to, and the operator's (a name with any port, name:port, "*.example.com"
    for the subdomains, "*" for any, when a proxy in front already checks the Host).
    Bound to every address (0.0.0.0, ::), any IP address is its bound address: no DNS
    rebinding comes in by an address, only by a name."""

    def __init__(self, allowed: Iterable[str] = (), *, bound: str | None = None) -> None:
        self.given: list[str] = []
        self.names: set[str] = set(LOOPBACK_NAMES)
        self.pairs: set[tuple[str, int]] = set()
        self.suffixes: list[str] = []
        self.everything = False
        self.any_address = bound in ("0.0.0.0", "::", "")
        if bound and not self.any_address:
            self.names.add(f"[{bound.lower()}]" if ":" in bound else bound.lower())
        for entry in allowed:
            self._add(entry)

    def _add(self, entry: str) -> None:
        text = entry.strip()
        if not text:
            return
        if any(c in text for c in "/ ,@?#\\") or not text.isascii() or not text.isprintable():
            raise ValueError(
                f"allowed host {entry!r} is not a host name: give the name only, as "
                "dash.example.com, dash.example.com:8443, *.example.com or *"
            )
        self.given.append(text)
        if text == "*":
            self.everything = True
        elif text.startswith("*."):
            self.suffixes.append(text[1:].lower())
        else:
            name, port = split_host(text)
            if port is None:
                self.names.add(name)
            else:
                self.pairs.add((name, port))

    @classmethod
    def from_environment(cls, allowed: Iterable[str] = (), *,
                         bound: str | None = None) -> Hosts:
        listed = os.environ.get(ALLOWED_HOSTS_VARIABLE, "").split(",")
        return cls([*allowed, *listed], bound=bound)

    def allows(self, host: str | None) -> bool:
        if host is None:
            return False
        if self.everything:
            return True
        name, port = split_host(host)
        if name in self.names or (port is not None and (name, port) in self.pairs):
            return True
        if any(name.endswith(suffix) and len(name) > len(suffix) for suffix in self.suffixes):
            return True
        return self.any_address and _is_address(name)

    def described(self) -> str:
        listed = ["localhost, 127.0.0.1 and [::1] on any port"]
        listed += sorted(self.names - set(LOOPBACK_NAMES))
        listed += [f"{name}:{port}" for name, port in sorted(self.pairs)]
        listed += [f"*{suffix}" for suffix in self.suffixes]
        if self.any_address:
            listed.append("any IP address")
        return ", ".join(listed)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return True


def cross_origin(request: Request) -> str | None:
    """Why an unsafe request comes from a page of another origin, or None. The Origin
    header says where the page was; without it, the Referer; without either (a script,
    curl), nothing to judge: the CSRF token still has to be right."""
    headers = request.headers
    if headers.get("sec-fetch-site", "").lower() == "cross-site":
        return ("the browser says this request comes from a page of another site "
                "(Sec-Fetch-Site: cross-site)")
    origin = headers.get("origin")
    what = "Origin"
    if origin is None:
        origin, what = headers.get("referer"), "Referer"
        if origin is None:
            return None
    host = headers.get("host", "")
    try:
        parsed = urlsplit(origin.strip())
    except ValueError:  # an unclosed IPv6 bracket
        parsed = urlsplit("")
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return (f"the page that sent it has no origin this dashboard can check "
                f"({what}: {origin!r})")
    default = 443 if parsed.scheme == "https" else 80
    source = split_host(parsed.netloc.rpartition("@")[2])
    target = split_host(host)
    if (source[0], source[1] or default) != (target[0], target[1] or default):
        return (f"it comes from a page of another origin ({what}: {origin!r}), not of "
                f"this dashboard ({host!r})")
    return None

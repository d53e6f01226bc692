"""Network namespaces for the fleet test: PostgreSQL in one, each worker host in its own,
each host joined to the database by a veth pair. Only namespaces this module made (named
after this process) are deleted.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"pgbprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, FileNotFoundError) as error:
        return f"`ip netns add` is not allowed here: {error}"
    _ip("netns", "del", probe)
    return None


@dataclass
class Fleet:
    """The database namespace and the hosts' namespaces; host n is 10.77.n.2, and the
    database is 10.77.n.1 on that host's link."""

    hosts: int
    prefix: str = field(default_factory=lambda: f"pgb{os.getpid()}")
    made: list[str] = field(default_factory=list)

    @property
    def database(self) -> str:
        return f"{self.prefix}db"

    def host(self, number: int) -> str:
        return f"{self.prefix}h{number}"

    def database_address(self, number: int) -> str:
        return f"10.77.{number}.1"

    def _link(self, number: int) -> str:
        return f"{self.prefix[-8:]}d{number}"  # interface names are at most 15 characters

    def build(self) -> None:
        _ip("netns", "add", self.database)
        self.made.append(self.database)
        _ip("-n", self.database, "link", "set", "lo", "up")
        for number in range(1, self.hosts + 1):
            host = self.host(number)
            _ip("netns", "add", host)
            self.made.append(host)
            _ip("-n", host, "link", "set", "lo", "up")
            near, far = self._link(number), f"{self.prefix[-8:]}h{number}"
            _ip("link", "add", near, "netns", self.database, "type", "veth", "peer", "name",
                far, "netns", host)
            _ip("-n", self.database, "addr", "add", f"10.77.{number}.1/24", "dev", near)
            _ip("-n", host, "addr", "add", f"10.77.{number}.2/24", "dev", far)
            _ip("-n", self.database, "link", "set", near, "up")
            _ip("-n", host, "link", "set", far, "up")

    def cut(self, number: int) -> None:
        """The host's link goes down at the database's end: packets are dropped, no reset."""
        _ip("-n", self.database, "link", "set", self._link(number), "down")

    def heal(self, number: int) -> None:
        _ip("-n", self.database, "link", "set", self._link(number), "up")

    def exec_prefix(self, namespace: str) -> list[str]:
        return ["ip", "netns", "exec", namespace]

    def destroy(self) -> None:
        for namespace in reversed(self.made):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        self.made.clear()

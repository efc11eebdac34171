"""Throwaway PostgreSQL servers for the tests: a loopback port, a temporary data directory, trust
authentication, started as the `postgres` user when the tests run as root (initdb refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

ENV = "AXON_TEST_PG_URL"


def pg_bin() -> Path | None:
    """The directory of initdb and pg_ctl (the newest installed major version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """One server; `start`/`stop` may be called again (the restart test)."""

    root: Path
    port: int
    bin: Path

    @property
    def url(self) -> str:
        return f"postgresql://axon@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, *cmd: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)

    @classmethod
    def create(cls) -> PgServer:
        """A new server in a new directory under /tmp (the postgres user cannot enter pytest's)."""
        binary = pg_bin()
        if binary is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb) on this machine")
        root = Path(tempfile.mkdtemp(prefix="axon-pg-"))
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        server = cls(root, free_port(), binary)
        subprocess.run(
            server._as_owner(
                str(binary / "initdb"), "-D", str(root / "data"), "-U", "axon", "--auth=trust", "-E", "UTF8"
            ),
            check=True,
            capture_output=True,
        )
        server.start()
        return server

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run(
            self._as_owner(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-o",
                options,
                "-l",
                str(self.root / "log"),
                "-w",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"),
            capture_output=True,
        )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def new_database(url: str) -> str:
    """A new empty database on the server of `url`; its URL."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name

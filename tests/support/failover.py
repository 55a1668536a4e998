"""A PostgreSQL 17 primary and a synchronous physical standby, for failover tests.

:class:`FailoverPair` starts, in a temporary directory of its own and on free ports:

* a **primary** with ``wal_level=logical``, a physical slot for the standby
  (:data:`STANDBY_SLOT`), ``synchronous_standby_names`` naming the standby (unless
  ``synchronous=False``) and ``synchronized_standby_slots`` naming its slot, so that a
  logical walsender of a failover slot never sends what the standby has not flushed;
* a **standby** streaming from it through that slot, with ``hot_standby_feedback``,
  ``sync_replication_slots`` and a ``dbname`` in ``primary_conninfo``: PostgreSQL 17's slot
  sync worker keeps a copy of every failover slot of the primary (``synced`` in
  ``pg_replication_slots``). Its own ``synchronous_standby_names`` and
  ``synchronized_standby_slots`` are empty, so it works alone once promoted.

The standby is made the way ``pg_basebackup -R`` makes one, with the low-level backup API
(``pg_backup_start`` … copy … ``pg_backup_stop``, then ``backup_label``, ``standby.signal``
and ``primary_conninfo``): the Maven builds of PostgreSQL that ``scripts/local-services``
fetches hold only the server, and its client tools (Debian's 15) include a pg_basebackup
that refuses a 17 server ("incompatible server version").

The binaries are the ones ``WALCAST_PG_VERSION=17 scripts/local-services start pg`` uses
(:func:`pg_bin`: that command fetches them on a clean machine, then prints their bin dir).
The servers run as the OS user that script runs PostgreSQL as (the server refuses root):
``postgres`` (or ``walcast-pg``) through ``runuser`` when we are root, else ourselves.

API (``with FailoverPair(pg_bin()) as pair:`` starts both and cleans up):

* :meth:`FailoverPair.multi_host_dsn`: both servers, ``target_session_attrs=primary``;
  ``pair.primary`` / ``pair.standby`` are :class:`Node` objects (``dsn()``, ``query()``,
  ``value()``, ``start()``, ``stop(mode)``); after :meth:`FailoverPair.promote` they swap
  (``pair.primary`` is the promoted server, ``pair.old_primary`` the former one);
* :meth:`FailoverPair.create_failover_slot` (or let ``walcast run --create-slot`` make it),
  :meth:`FailoverPair.wait_synced` (a persistent ``synced`` copy on the standby, optionally
  confirmed up to an LSN), :meth:`FailoverPair.sync_now` (``pg_sync_replication_slots()``,
  which PostgreSQL refuses while the slot sync worker runs), :meth:`FailoverPair.slot_on`;
* :meth:`FailoverPair.promote`, :meth:`FailoverPair.stop_old_primary` (``-m immediate``),
  or :meth:`FailoverPair.crash_primary` first (the other order);
* forensics: :meth:`FailoverPair.fork_lsn` (where the new timeline left the old one),
  :meth:`FailoverPair.walsenders` (``WaitForStandbyConfirmation`` shows a logical walsender
  held back for the standby), :meth:`FailoverPair.old_primary_wal` (the stopped old
  primary's WAL past a position, through pg_walinspect, on a port nobody else knows);
* :meth:`FailoverPair.close` (``keep=True`` leaves the directory: data dirs and logs).

Each step's wall-clock time is kept in :attr:`FailoverPair.events`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import psycopg

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parent.parent.parent
SERVICES = REPO / "scripts" / "local-services"
STANDBY_SLOT = "standby1"
"""The standby's physical slot on the primary, and its ``application_name``."""
SUPERUSER = "walcast"
DATABASE = "walcast"
READY_TIMEOUT = 60.0


def pg_bin(major: str = "17") -> Path:
    """The bin dir of PostgreSQL ``major`` as ``scripts/local-services`` runs it.

    ``env pg`` when that server already runs, else ``start pg`` (which fetches the build
    from Maven Central on a clean machine, and copies it where the server's OS user can
    read it). The server it starts is left running, like every local-services server.
    """
    env = {**os.environ, "WALCAST_PG_VERSION": major}
    env.pop("WALCAST_PG_PORT", None)
    failure = ""
    for command in ("env", "start"):
        done = subprocess.run(
            [str(SERVICES), command, "pg"],
            env=env, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            for line in done.stdout.splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                if name == "WALCAST_TEST_PG_BIN" and value:
                    return Path(shlex.split(value)[0])
        failure = done.stderr[-3000:]
    msg = f"WALCAST_PG_VERSION={major} scripts/local-services start pg failed:\n{failure}"
    raise RuntimeError(msg)


def pg_os_user() -> str | None:
    """The OS user the servers run as (None: the current user, when not root).

    The same choice as ``scripts/local-services`` (``pg_pick_user``).
    """
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "walcast-pg"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    msg = "no 'postgres' or 'walcast-pg' OS user: run scripts/local-services start pg first"
    raise RuntimeError(msg)


def lsn_int(text: str | None) -> int:
    """``'0/1A2B3C'`` → int (0 for None)."""
    if not text:
        return 0
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


@dataclass
class Node:
    """One PostgreSQL server of the pair."""

    name: str
    bin: Path
    root: Path
    port: int
    user: str | None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgresql.log"

    def dsn(self, dbname: str = DATABASE, **extra: str) -> str:
        parts = {"host": "127.0.0.1", "port": str(self.port), "user": SUPERUSER, "dbname": dbname}
        parts.update(extra)
        return " ".join(f"{k}={v}" for k, v in parts.items())

    # -- processes -----------------------------------------------------------------------------

    def run(
        self, *args: str | Path, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as the server's OS user, from ``/``."""
        command = [str(a) for a in args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(
            command, cwd="/", capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            msg = (
                f"{self.name}: {shlex.join(command)} exited {done.returncode}:\n"
                + (done.stdout + done.stderr)[-3000:]
                + "\n"
                + self.log_tail()
            )
            raise RuntimeError(msg)
        return done

    def write(self, relative: str, text: str, *, append: bool = False) -> None:
        """Write a file under the data dir, owned by the server's OS user, mode 0600."""
        path = self.data / relative
        with path.open("a" if append else "w") as f:
            f.write(text)
        path.chmod(0o600)
        if self.user is not None:
            shutil.chown(path, self.user, self.user)

    def start(self, *, port: int | None = None) -> None:
        """pg_ctl start, waiting until the server accepts connections.

        ``port``: listen there instead of :attr:`port` this once (to look at a server
        without letting the test's clients reach it).
        """
        options = ["-o", f"-p {port}"] if port is not None else []
        self.run(
            self.bin / "pg_ctl", "start", "-D", self.data, "-l", self.log_path, "-w",
            "-t", str(int(READY_TIMEOUT)), *options,
        )  # fmt: skip
        target = port or self.port
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._accepts(target):
            if time.monotonic() > deadline:
                msg = f"{self.name} does not accept connections on {target}\n{self.log_tail()}"
                raise TimeoutError(msg)
            time.sleep(0.2)

    @staticmethod
    def _accepts(port: int) -> bool:
        try:
            psycopg.connect(
                f"host=127.0.0.1 port={port} user={SUPERUSER} dbname=postgres", connect_timeout=2
            ).close()
        except psycopg.OperationalError:
            return False
        return True

    def stop(self, mode: str = "fast") -> None:
        if self.running():
            self.run(self.bin / "pg_ctl", "stop", "-D", self.data, "-m", mode, "-w", "-t", "60")

    def running(self) -> bool:
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
        except OSError:
            return False
        return state != "Z"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"---- {self.name} {self.log_path} ----\n" + "\n".join(text)

    # -- SQL -------------------------------------------------------------------------------------

    def query(
        self, sql: str, params: tuple[Any, ...] = (), *, dbname: str = DATABASE
    ) -> list[tuple[Any, ...]]:
        """Rows of one statement (autocommit, synchronous_commit on)."""
        with psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=5) as conn:
            conn.execute("SET synchronous_commit = on")
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def value(self, sql: str, params: tuple[Any, ...] = (), *, dbname: str = DATABASE) -> Any:
        rows = self.query(sql, params, dbname=dbname)
        return rows[0][0] if rows else None

    def in_recovery(self) -> bool:
        return bool(self.value("SELECT pg_is_in_recovery()", dbname="postgres"))

    def timeline_switch(self) -> int | None:
        """The LSN where this server's timeline left its parent (None: timeline 1)."""
        history = self.value(
            "SELECT pg_read_file('pg_wal/' || tli || '.history') FROM "
            "(SELECT left(pg_walfile_name(pg_current_wal_lsn()), 8) AS tli) t "
            "WHERE tli <> '00000001'",
            dbname="postgres",
        )
        if not history:
            return None
        return lsn_int(history.strip().splitlines()[-1].split()[1])


def _settings(values: dict[str, object]) -> str:
    lines = ["# written by tests/support/failover.py"]
    for key, value in values.items():
        if isinstance(value, str) and not value.isdigit():
            quoted = "'" + value.replace("'", "''") + "'"
            lines.append(f"{key} = {quoted}")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


@dataclass
class FailoverPair:
    """A primary and its synchronous physical standby (see the module docstring).

    ``settings``: more ``postgresql.conf`` settings for both servers (``primary_settings``:
    for the first primary only). ``synchronous=False``: an asynchronous standby. ``keep``: leave the
    directory behind on :meth:`close` (to look at the WAL and the logs afterwards).
    """

    bin: Path
    synchronous: bool = True
    settings: dict[str, object] = field(default_factory=dict)
    primary_settings: dict[str, object] = field(default_factory=dict)
    """Settings of the first primary only (e.g. ``synchronized_standby_slots = ''``)."""
    keep: bool = False
    root: Path = field(init=False)
    primary: Node = field(init=False)
    standby: Node = field(init=False)
    old_primary: Node | None = field(init=False, default=None)
    events: dict[str, float] = field(init=False, default_factory=dict)
    """Wall-clock time (``time.time()``) of each step: promote_started, promoted,
    old_primary_stopped, ..."""

    def __post_init__(self) -> None:
        user = pg_os_user()
        self.root = Path(tempfile.mkdtemp(prefix="walcast-failover-", dir="/tmp"))
        self.root.chmod(0o755)
        names = ("primary", "standby")
        for name in names:
            (self.root / name).mkdir(mode=0o700)
            if user is not None:
                shutil.chown(self.root / name, user, user)
        ports = [free_port(), free_port()]
        while ports[1] == ports[0]:
            ports[1] = free_port()
        self.primary = Node("primary", self.bin, self.root / "primary", ports[0], user)
        self.standby = Node("standby", self.bin, self.root / "standby", ports[1], user)

    # -- set-up ----------------------------------------------------------------------------------

    def start(self) -> FailoverPair:
        """initdb the primary, start it, make the standby from a base backup, start it."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        primary, standby = self.primary, self.standby
        primary.run(
            self.bin / "initdb", "-D", primary.data, "-A", "trust", "-U", SUPERUSER,
            "--encoding=UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        primary.write(
            "pg_hba.conf",
            "local all all trust\nlocal replication all trust\n"
            "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
        )
        primary.write("postgresql.conf", "\ninclude_if_exists = 'failover.conf'\n", append=True)
        primary.write("failover.conf", _settings(self._primary_settings()))
        primary.start()
        primary.query(f"CREATE DATABASE {DATABASE}", dbname="postgres")
        primary.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        primary.query(
            "SELECT pg_create_physical_replication_slot(%s, true)", (STANDBY_SLOT,),
            dbname="postgres",
        )  # fmt: skip
        self._base_backup()
        standby.write("failover.conf", _settings(self._standby_settings()))
        standby.write("standby.signal", "")
        standby.start()
        self.wait_streaming(want="async")
        if self.synchronous:  # only now: before, every commit would wait for the standby
            primary.write(
                "failover.conf", f"synchronous_standby_names = '{STANDBY_SLOT}'\n", append=True
            )
            primary.query("SELECT pg_reload_conf()")
            self.wait_streaming()

    def _common_settings(self) -> dict[str, object]:
        return {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": "",
            "wal_level": "logical",
            "max_wal_senders": 20,
            "max_replication_slots": 20,
            "hot_standby": "on",
            "hot_standby_feedback": "on",
            "sync_replication_slots": "on",
            "synchronous_commit": "on",
            "fsync": "off",  # no OS crash here: -m immediate still leaves the WAL written
            "wal_sender_timeout": "60s",
            "log_replication_commands": "on",
            "log_line_prefix": "%m [%p] %q%a ",
            "timezone": "UTC",
            "log_timezone": "UTC",
        }

    def _primary_settings(self) -> dict[str, object]:
        return {
            **self._common_settings(),
            "port": self.primary.port,
            "synchronized_standby_slots": STANDBY_SLOT,
            "synchronous_standby_names": "",  # set once the standby streams (_start)
            **self.settings,
            **self.primary_settings,
        }

    def _standby_settings(self) -> dict[str, object]:
        conninfo = self.primary.dsn(application_name=STANDBY_SLOT)
        return {
            **self._common_settings(),
            "port": self.standby.port,
            "primary_conninfo": conninfo,
            "primary_slot_name": STANDBY_SLOT,
            # once promoted it works alone: no synchronous standby, no standby slot to wait for
            "synchronized_standby_slots": "",
            "synchronous_standby_names": "",
            **self.settings,
        }

    def _base_backup(self) -> None:
        """What ``pg_basebackup`` does, with the low-level API: copy between start and stop."""
        source, target = self.primary.data, self.standby.data
        skip_contents = {"pg_wal", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial",
                         "pg_snapshots", "pg_stat_tmp", "pg_subtrans"}  # fmt: skip
        skip_files = {"postmaster.pid", "postmaster.opts"}
        with psycopg.connect(self.primary.dsn("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_backup_start('walcast-failover', true)")

            # as the OS user: the copy is then owned by it, with the same modes
            self.standby.run("cp", "-a", f"{source}/.", target)
            for name in skip_contents:
                for child in (target / name).iterdir():
                    if child.is_dir() and name == "pg_wal":
                        continue  # pg_wal/archive_status and pg_wal/summaries
                    if child.is_dir():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            for name in skip_files:
                (target / name).unlink(missing_ok=True)
            label, spcmap = conn.execute(
                "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)"
            ).fetchone()
        self.standby.write("backup_label", label)
        if spcmap:
            self.standby.write("tablespace_map", spcmap)

    def wait_streaming(self, timeout: float = 60, want: str | None = None) -> None:
        """Until the primary sees the standby streaming (``want``: with that sync_state;
        default: sync if the pair is synchronous, else async)."""
        want = want or ("sync" if self.synchronous else "async")
        deadline = time.monotonic() + timeout
        while True:
            rows = self.primary.query(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_SLOT,),
            )
            if rows and rows[0] == ("streaming", want):
                return
            if time.monotonic() > deadline:
                msg = f"standby not streaming ({rows})\n{self.standby.log_tail()}"
                raise TimeoutError(msg)
            time.sleep(0.2)

    # -- DSNs ------------------------------------------------------------------------------------

    def multi_host_dsn(self, **extra: str) -> str:
        """Both servers, primary first, ``target_session_attrs=primary`` unless overridden."""
        parts = {
            "host": "127.0.0.1,127.0.0.1",
            "port": f"{self.primary.port},{self.standby.port}",
            "user": SUPERUSER,
            "dbname": DATABASE,
            "target_session_attrs": "primary",
            "connect_timeout": "5",
        }
        parts.update(extra)
        return " ".join(f"{k}={v}" for k, v in parts.items())

    # -- slots -------------------------------------------------------------------------------------

    def create_failover_slot(self, name: str, *, two_phase: bool = False) -> int:
        """A pgoutput failover slot on the primary; its confirmed position."""
        self.primary.query(
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s, true)",
            (name, two_phase),
        )
        return lsn_int(self.primary.value(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (name,),
        ))  # fmt: skip

    def slot_on(self, node: Node, name: str) -> dict[str, Any] | None:
        """``pg_replication_slots``' row of ``name`` on ``node`` (LSNs as ints), or None."""
        rows = node.query(
            "SELECT slot_name, failover, synced, temporary, active_pid, "
            "restart_lsn::text, confirmed_flush_lsn::text, invalidation_reason, conflicting "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (name,),
        )
        if not rows:
            return None
        keys = ("slot_name", "failover", "synced", "temporary", "active_pid", "restart_lsn",
                "confirmed_flush_lsn", "invalidation_reason", "conflicting")  # fmt: skip
        row = dict(zip(keys, rows[0], strict=True))
        row["restart_lsn"] = lsn_int(row["restart_lsn"])
        row["confirmed_flush_lsn"] = lsn_int(row["confirmed_flush_lsn"])
        return row

    def sync_now(self) -> bool:
        """``pg_sync_replication_slots()`` on the standby; False when the worker is busy.

        With ``sync_replication_slots = on`` the slot sync worker runs and the function
        refuses to run beside it ("cannot synchronize replication slots concurrently").
        """
        try:
            self.standby.query("SELECT pg_sync_replication_slots()")
        except psycopg.Error:
            return False
        return True

    def wait_synced(self, name: str, *, at_least: int = 0, timeout: float = 60) -> dict[str, Any]:
        """Until the standby holds a persistent synced copy of slot ``name``.

        ``at_least``: and its confirmed position reached that LSN. Returns the copy's row.
        """
        deadline = time.monotonic() + timeout
        while True:
            copy = self.slot_on(self.standby, name)
            if (
                copy is not None
                and copy["synced"]
                and not copy["temporary"]
                and copy["confirmed_flush_lsn"] >= at_least
            ):
                return copy
            if time.monotonic() > deadline:
                primary = self.slot_on(self.primary, name)
                msg = (
                    f"slot {name!r} not synced to the standby within {timeout:g} s: standby "
                    f"{copy}, primary {primary}\n{self.standby.log_tail()}"
                )
                raise TimeoutError(msg)
            time.sleep(0.2)

    def walsenders(self, node: Node | None = None) -> list[dict[str, Any]]:
        """The walsenders of ``node`` (default: the primary): who, where, what they wait for.

        ``wait_event`` ``WaitForStandbyConfirmation`` is a logical walsender holding back
        what the standby of ``synchronized_standby_slots`` has not flushed yet.
        """
        node = node or self.primary
        rows = node.query(
            "SELECT r.application_name, r.state, r.sent_lsn::text, r.flush_lsn::text, "
            "r.sync_state, a.wait_event, a.backend_type FROM pg_stat_replication r "
            "JOIN pg_stat_activity a USING (pid)"
        )
        keys = ("application_name", "state", "sent_lsn", "flush_lsn", "sync_state",
                "wait_event", "backend_type")  # fmt: skip
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # -- failover ----------------------------------------------------------------------------------

    def promote(self) -> None:
        """Promote the standby (``pg_ctl promote -w``); it becomes :attr:`primary`."""
        self.events["promote_started"] = time.time()
        self.standby.run(self.bin / "pg_ctl", "promote", "-D", self.standby.data, "-w", "-t", "60")
        self.events["promoted"] = time.time()
        self.old_primary, self.primary, self.standby = self.primary, self.standby, self.primary

    def stop_old_primary(self, mode: str = "immediate") -> None:
        """Stop the former primary (``-m immediate``: no shutdown checkpoint, like a crash)."""
        old = self.old_primary if self.old_primary is not None else self.primary
        old.stop(mode)
        self.events["old_primary_stopped"] = time.time()

    def crash_primary(self) -> None:
        """Stop the primary ``-m immediate`` before any promotion (the usual failover order)."""
        self.primary.stop("immediate")
        self.events["old_primary_stopped"] = time.time()

    def fork_lsn(self) -> int | None:
        """Where the promoted server's timeline left the old one (its history file)."""
        node = self.primary if self.old_primary is not None else self.standby
        return node.timeline_switch()

    # -- forensics ---------------------------------------------------------------------------------

    def old_primary_wal(self, start: int, end: int | None = None) -> list[tuple[Any, ...]]:
        """WAL records of the stopped old primary from ``start`` (pg_walinspect).

        Starts it on a port nobody else knows (crash recovery, then it is a lone primary
        on its old timeline), reads, and stops it again.
        """
        old = self.old_primary
        assert old is not None, "no failover yet"
        port = free_port()
        old.start(port=port)
        try:
            dsn = f"host=127.0.0.1 port={port} user={SUPERUSER} dbname={DATABASE}"
            with psycopg.connect(dsn, autocommit=True) as conn:
                current = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                stop = end if end is not None else lsn_int(current[0])
                return conn.execute(
                    "SELECT start_lsn::text, end_lsn::text, xid::text, resource_manager, "
                    "record_type, description FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)",
                    (lsn_text(start), lsn_text(stop)),
                ).fetchall()
        finally:
            old.stop("fast")

    # -- tear-down -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop both servers (immediately) and remove the directory unless ``keep``."""
        for node in (self.primary, self.standby):
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                node.stop("immediate")
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

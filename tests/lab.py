"""A multi-node network "lab" on one Linux machine, for ddpdoctor's real-network tests.

Every node of a :class:`Lab` is a tiny fake host:

* its own **network namespace** ``ddl<id>-<node>`` with ``lo`` up and one veth
  ``eth0`` carrying ``198.18.X.<i>/24`` (``i`` = 1-based position of the node);
  **no default route**, so nothing can leave the lab;
* its own **UTS namespace** whose hostname is the node name;
* its own **mount namespace** (made by ``ip netns exec``) in which
  ``/etc/hosts`` is a bind mount of ``/etc/netns/<ns>/hosts``;
  ``/etc/nsswitch.conf`` (``hosts: files`` only) and ``/etc/resolv.conf``
  (no reachable DNS) are bind mounted the same way so name resolution is
  deterministic: a name missing from the node's /etc/hosts fails with
  ``[Errno -2] Name or service not known`` (EAI_NONAME), like a cluster whose DNS
  answers NXDOMAIN;
* all the ``eth0`` veths are ports of one bridge that lives in a private
  *switch* namespace ``ddl<id>_sw`` (not on the host: no host interface is
  created, and the host firewall / ``br_netfilter`` / Docker's FORWARD policy
  cannot interfere).

API at a glance (root only; see tests/conftest.py for the ``lab``/``make_lab`` fixtures)
    ``with Lab(("node1", "node2"), hosts="all") as lab:``
    ``lab.node(n)`` -> :class:`Node` (``.name .ns .addr .iface .cidr .holder_pid .etc_dir``),
    ``lab.addr(n)``, ``lab.names``, ``lab.subnet``, ``lab.decoy_cidr(k, "low"|"high")``,
    ``lab.run(n, argv, timeout=..)``, ``lab.popen(n, argv, **popen_kw)``, ``lab.kill(popen)``,
    ``lab.kill_all(n)`` (everything in the node except its holder), ``lab.set_hosts(n, {...} | lines)``,
    ``lab.iptables(n, *args)``, ``lab.ip(n, *args)``, ``lab.add_decoy(n, ifname, cidr)``,
    ``lab.mount_tmpfs(n, path, "64M")``, ``lab.set_mtu(n, 9000, switch_port=1500, offloads=False)``,
    ``lab.switch_port(n)``, ``lab.ip_switch(*args)``, ``lab.enable_ipv6()`` -> ``{n: ULA}``, ``lab.addr6(n)``,
    ``lab.ip6tables(n, *args)``, ``lab.close()``;
    ``run_torchrun_job(lab, master=, nodes=, port=, rdzv="c10d"|"static", env=, env_per_node=,
    job_timeout=, wall_timeout=, ...)`` -> :class:`JobResult`;  :func:`cleanup_stale`.

How a command enters a node
    Each node has a long-lived *holder* process, started as
    ``ip netns exec NS unshare --uts -- python -c <holder>``; the holder sets the
    hostname and sleeps.  Commands run as
    ``nsenter -t HOLDER -u -n -m --wd=<cwd> -- argv`` (nsenter execs, so the Popen
    pid is the command's pid).  If the test process dies (even by SIGKILL) the
    holder notices it was orphaned, SIGKILLs every process of its network
    namespace and exits; the namespaces themselves are removed by the stale
    cleanup of the next Lab (or :func:`cleanup_stale`).

Isolation between concurrent labs
    Every Lab owns one slot ``N`` (0..127) of ``198.18.0.0/15`` taken by an
    ``O_EXCL`` lock file ``/run/ddpdoctor-lab/slot-NNN.lock`` (JSON with the
    owner pid and its start time), created under an ``flock`` on
    ``/run/ddpdoctor-lab/.alloc``.  The lock also records the lab id: 4 random
    hex digits not used by any live lock or existing namespace (so names are unique,
    and a freed slot's names are not reused at once).  Slot ``N`` gives the /22 ``lab.block`` =
    ``198.18.0.0 + N*1024``: first /24 = low decoys, second /24 = ``lab.subnet``
    (node ``i`` is ``.i``), third /24 = high decoys (see :meth:`Lab.decoy_cidr`;
    no node has a route to a decoy subnet).  Before allocating, locks whose owner
    is dead (and namespaces / /etc/netns dirs of ids without a lock) are destroyed.

Processes
    Every process started through the lab carries ``DDPDOCTOR_LAB_TAG`` in its
    environment.  "Kill everything it started" means: SIGKILL every process whose
    environment carries that tag (this follows ``setsid``/reparented
    grandchildren such as torchrun workers), loop until none is left.
    :meth:`Lab.run` on timeout does exactly that and **raises**
    :class:`LabTimeout` (a ``subprocess.TimeoutExpired`` with ``.stdout``,
    ``.stderr`` as text and ``.node``); it never returns ``returncode=None``.

Environment of node commands
    ``os.environ`` minus variables that would leak the outer job's distributed
    configuration (MASTER_*, RANK, WORLD_SIZE, LOCAL_*, GLOO_/NCCL_/TP_SOCKET_IFNAME,
    TORCHELASTIC_*, PET_*, proxies), plus ``HOSTNAME=<node>``,
    ``PYTHONUNBUFFERED=1``, then the caller's ``env`` (a value of ``None`` deletes
    the variable).  Default cwd: the repository root; so
    ``[sys.executable, "-m", "ddpdoctor", ...]`` works.

Measured facts: torch 2.13.0+cpu, torchrun + Gloo, 2 nodes, in this lab
    node1 = master/endpoint ``node1:29400``, node2 = worker, pg timeout 15 s,
    times since launch (healthy job 4.7 s static / 5.9 s c10d).  Full table with
    exact lines: tests/lab_jobs/FINDINGS.md; reproduce with
    ``python tests/lab_jobs/scenarios.py``.  IFNAME = ``GLOO_SOCKET_IFNAME=eth0``.

    1. Worker's own hostname unresolvable.  c10d: node2's torchrun crashes in 2-5 s
       with ``socket.gaierror: [Errno -2] Name or service not known`` (from
       ``_matches_machine_hostname``), node1 hangs silently until join_timeout
       (600 s) -> ``RendezvousTimeoutError``; IFNAME does NOT help
       (``--rdzv-conf=is_host=0`` + IFNAME does).  static: Gloo falls back to
       loopback (warning ``Unable to resolve hostname to a (local) address. Using
       the loopback address as fallback...``); node1 fails at ~5 s with
       ``... timed out connecting: SO_ERROR: Connection refused,
       remote=[127.0.0.1]:P``, node2 at ~5x pg timeout with ``Connect timeout
       [none]``; IFNAME fixes it.
    2. Master name unresolvable on the worker.  Never fails fast: node2 logs
       ``[c10d] The IPv6 network addresses of (node1, 29400) cannot be retrieved
       (gai error: -2 - Name or service not known)`` again and again; c10d: node2
       fails at ~148 s (2 x read_timeout 60 s + back-off, ``RendezvousConnectionError``),
       node1 at join_timeout; static: both hang to the 900 s static timeout.
       c10d with the endpoint as an IP still fails (workers get MASTER_ADDR = rank
       0's fqdn) unless the master also gets ``--local-addr=<IP>``.
    3. Rendezvous port REJECTed: no fail-fast, torch never says "refused":
       c10d node2 fails at ~155 s (``The client socket has timed out after 60000ms
       while trying to connect to (node1, 29400)``, retried once), node1 at
       join_timeout; static: both hang to the static timeout.
    4. Rendezvous port DROPped: c10d node2 fails at 62.6 s (same line, no retry),
       node1 at join_timeout; static: both hang to the static timeout.
    5. Only the rendezvous port open on the master: c10d fails at ~21 s (workers
       use a second store on a random ephemeral port: ``timed out after 15000ms
       while trying to connect to (node1, 42891)`` / ``DistStoreError: wait timeout
       after 15000ms, keys: /default_pg/0//cpu//0/1``); static fails at ~5x pg
       timeout (80 s) with ``Connect timeout [none]`` (Gloo ports).  IFNAME: no.
    6. Hostname -> decoy NIC address on that node.  Depends on address order: Gloo's
       numerically larger address dials the smaller.  Decoy below the peer's
       address: peer fails at once with ``connect: Network is unreachable``
       (unroutable) or both at ~5x pg timeout with ``Connect timeout [none]``
       (black hole); 127.0.1.1 behaves the same (``Connection refused,
       remote=[127.0.1.1]:P`` in ~5 s).  Decoy above: the job works.  IFNAME fixes all.
    7. GLOO_SOCKET_IFNAME=eth9 (missing): that node fails at ~5 s with
       ``[enforce fail at .../gloo/transport/tcp/device.cc:84] ifa != nullptr.
       Unable to find address for: eth9``; the others at pg timeout
       (``DistStoreError: wait timeout after 15000ms``).
    8. Master port held by a listener that never answers: c10d hangs forever on
       both nodes with NO output (EADDRINUSE swallowed); static: node1 fails at
       ~3 s (``The server socket has failed to listen on any local network address.
       port: 29400, ... name: EADDRINUSE``), node2 hangs forever.  Held by a leftover
       torch TCPStore: c10d silently succeeds on the foreign store; static as above,
       node2 until the static timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import ipaddress
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

__all__ = [
    "Lab",
    "Node",
    "LabError",
    "LabUnavailable",
    "LabTimeout",
    "JobResult",
    "run_torchrun_job",
    "cleanup_stale",
    "lab_available",
    "REPO_ROOT",
    "ALLREDUCE_SCRIPT",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
ALLREDUCE_SCRIPT = Path(__file__).resolve().parent / "lab_jobs" / "allreduce.py"

PREFIX = "ddl"
LOCK_DIR = Path(os.environ.get("DDPDOCTOR_LAB_LOCK_DIR", "/run/ddpdoctor-lab"))
NETNS_RUN_DIR = Path("/run/netns")
NETNS_ETC_DIR = Path("/etc/netns")
SUPERNET = ipaddress.ip_network("198.18.0.0/15")
N_SLOTS = 128  # a /22 per lab: [decoy-low /24][nodes /24][decoy-high /24][spare /24]
TAG_VAR = "DDPDOCTOR_LAB_TAG"

# Variables that must not leak from the test process into the lab's nodes.
_SCRUB_EXACT = {
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE",
    "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT",
    "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
    "no_proxy", "NO_PROXY", TAG_VAR,
}
_SCRUB_PREFIXES = ("TORCHELASTIC_", "PET_", "SLURM_", "OMPI_", "PMI_")

_NODE_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_HOLDER_SRC = r"""
import os, signal, socket, sys, time
name, owner = sys.argv[1], int(sys.argv[2])
socket.sethostname(name)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
sys.stdout.write("ready %d\n" % os.getpid()); sys.stdout.flush()
while os.getppid() == owner:
    time.sleep(0.5)
# Orphaned: the test process died without tearing the lab down.  Kill every
# other process of this network namespace, then exit.
me = os.stat("/proc/self/ns/net")
for _ in range(200):
    left = 0
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            st = os.stat("/proc/%s/ns/net" % p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (me.st_dev, me.st_ino):
            left += 1
            try:
                os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
    if not left:
        break
    time.sleep(0.05)
"""


class LabError(RuntimeError):
    """The lab could not do what was asked (a setup command failed, ...)."""


class LabUnavailable(LabError):
    """This machine cannot host a lab (not root, no netns support, missing tools)."""


class LabTimeout(subprocess.TimeoutExpired):
    """:meth:`Lab.run` hit its timeout; every process it started has been killed.

    ``.stdout`` / ``.stderr`` hold what was captured (text), ``.node`` the node name.
    """

    def __init__(self, cmd, timeout, node, stdout, stderr):
        super().__init__(cmd, timeout, output=stdout, stderr=stderr)
        self.node = node

    def __str__(self):
        tail = (self.stderr or "")[-2000:]
        return f"on {self.node}: {super().__str__()} (all its processes were killed)\nstderr tail:\n{tail}"


@dataclasses.dataclass(frozen=True)
class Node:
    name: str            # node name == hostname inside the node
    ns: str              # network namespace name (``ip netns``)
    addr: str            # address of eth0, e.g. "198.18.4.1"
    iface: str           # "eth0"
    index: int           # 1-based position in the lab
    prefixlen: int       # 24
    etc_dir: Path        # /etc/netns/<ns>: files here are bind mounted over /etc/*
    holder_pid: int      # the process whose namespaces define the node

    @property
    def cidr(self) -> str:
        return f"{self.addr}/{self.prefixlen}"


# --------------------------------------------------------------------------- helpers

def _which(tool: str) -> str:
    path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if not path:
        raise LabUnavailable(f"required tool {tool!r} not found in PATH")
    return path


def _run_host(argv: Sequence[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a setup command on the host (never through a shell)."""
    proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise LabError(f"command failed (rc={proc.returncode}): {' '.join(argv)}\n{proc.stderr.strip()}")
    return proc


def _proc_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of ``pid``, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces/parens: fields after the last ')'
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def _pid_alive(pid: int, start: int | None) -> bool:
    now = _proc_start_time(pid)
    return now is not None and (start is None or now == start)


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def netns_pids(ns: str) -> list[int]:
    """Pids whose network namespace is ``ns`` (what ``ip netns pids NS`` prints)."""
    try:
        ref = os.stat(NETNS_RUN_DIR / ns)
    except OSError:
        return []
    out = []
    for pid in _all_pids():
        try:
            st = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (ref.st_dev, ref.st_ino):
            out.append(pid)
    return out


def _pids_with_tag(tag: str) -> list[int]:
    needle = f"{TAG_VAR}={tag}".encode()
    out = []
    me = os.getpid()
    for pid in _all_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(pid)
    return out


def _kill_until_gone(list_pids, what: str, timeout: float = 15.0, reap: Iterable[subprocess.Popen] = ()) -> None:
    """SIGKILL every pid ``list_pids()`` returns, again and again, until it returns nothing."""
    reap = list(reap)
    deadline = time.monotonic() + timeout
    while True:
        for p in reap:
            with contextlib.suppress(Exception):
                p.poll()
        pids = list_pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise LabError(f"could not kill all processes of {what}: still alive {pids}")
        time.sleep(0.02)


def _ns_names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


_LAB_NS_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{4}})[-_]")


def _destroy_lab_id(lab_id: str) -> list[str]:
    """Remove every namespace / /etc/netns dir of ``lab_id``; return problems (no raise)."""
    problems = []
    ip = _which("ip")
    names = [n for n in _ns_names() if n.startswith(f"{PREFIX}{lab_id}-") or n.startswith(f"{PREFIX}{lab_id}_")]
    for ns in names:
        try:
            _kill_until_gone(lambda ns=ns: netns_pids(ns), f"netns {ns}")
        except LabError as e:
            problems.append(str(e))
    for ns in names:
        r = _run_host([ip, "netns", "del", ns], check=False)
        if r.returncode != 0 and (NETNS_RUN_DIR / ns).exists():
            problems.append(f"ip netns del {ns}: {r.stderr.strip()}")
    if NETNS_ETC_DIR.is_dir():
        for d in NETNS_ETC_DIR.iterdir():
            if d.name.startswith(f"{PREFIX}{lab_id}-") or d.name.startswith(f"{PREFIX}{lab_id}_"):
                shutil.rmtree(d, ignore_errors=True)
                if d.exists():
                    problems.append(f"could not remove {d}")
    return problems


@contextlib.contextmanager
def _alloc_lock():
    LOCK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / ".alloc", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _slot_path(slot: int) -> Path:
    return LOCK_DIR / f"slot-{slot:03d}.lock"


def _read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # half-written/corrupt (the writer died between create and write)


def _cleanup_stale_locked() -> list[str]:
    """Destroy resources of dead owners.  Caller holds the allocation flock."""
    removed = []
    live_ids = set()
    for path in sorted(LOCK_DIR.glob("slot-*.lock")):
        info = _read_lock(path)
        if info is None:
            continue
        lab_id = str(info.get("id", ""))
        # A corrupt lock: its writer crashed between create and write (locks are
        # written under the flock, so nobody is writing it now).  Its namespaces, if
        # any, are found by the orphan scan below.
        dead = not info or not _pid_alive(int(info.get("pid", 0)), info.get("start"))
        if dead:
            if re.fullmatch(r"[0-9a-f]{4}", lab_id):
                _destroy_lab_id(lab_id)
                removed.append(lab_id)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            live_ids.add(lab_id)
    # Namespaces / etc dirs with our prefix but no live lock (lock already gone).
    orphan_ids = set()
    for n in _ns_names():
        m = _LAB_NS_RE.match(n)
        if m and m.group(1) not in live_ids:
            orphan_ids.add(m.group(1))
    if NETNS_ETC_DIR.is_dir():
        for d in NETNS_ETC_DIR.iterdir():
            m = _LAB_NS_RE.match(d.name)
            if m and m.group(1) not in live_ids:
                orphan_ids.add(m.group(1))
    for lab_id in sorted(orphan_ids):
        _destroy_lab_id(lab_id)
        removed.append(lab_id)
    return removed


def cleanup_stale() -> list[str]:
    """Remove leftovers of crashed labs (owner pid dead).  Returns the lab ids cleaned.

    Safe to call at any time from any process: live labs are never touched.
    """
    if os.geteuid() != 0 or not LOCK_DIR.parent.exists():
        return []
    with _alloc_lock():
        return _cleanup_stale_locked()


_AVAILABLE: tuple[bool, str] | None = None


def lab_available() -> tuple[bool, str]:
    """(True, "") if this machine can host a lab, else (False, reason).  Cached."""
    global _AVAILABLE
    if _AVAILABLE is not None:
        return _AVAILABLE
    if not sys.platform.startswith("linux"):
        _AVAILABLE = (False, "the lab needs Linux network namespaces")
    elif os.geteuid() != 0:
        _AVAILABLE = (False, "the lab needs root (network namespaces, iptables)")
    else:
        try:
            for tool in ("ip", "nsenter", "unshare", "iptables"):
                _which(tool)
            probe = f"{PREFIX}probe-{os.getpid()}"
            ip = _which("ip")
            r = _run_host([ip, "netns", "add", probe], check=False)
            _run_host([ip, "netns", "del", probe], check=False)
            if r.returncode != 0:
                _AVAILABLE = (False, f"'ip netns add' failed: {r.stderr.strip()}")
            else:
                _AVAILABLE = (True, "")
        except LabUnavailable as e:
            _AVAILABLE = (False, str(e))
    return _AVAILABLE


_LIVE_LABS: "set[Lab]" = set()  # strong refs: a lab nobody closed is still closed at exit


@atexit.register
def _close_all_labs() -> None:
    for lab in list(_LIVE_LABS):
        with contextlib.suppress(Exception):
            lab.close()


HostsSpec = Union[Mapping[str, str], Sequence[str], str]


# --------------------------------------------------------------------------- the lab

class Lab:
    """A set of fake hosts (see the module docstring).  Use as a context manager.

    ``hosts`` says what each node's /etc/hosts lists besides ``127.0.0.1 localhost``:
    ``"all"`` (default: every node name -> its address), ``"self"`` (only the node
    itself), ``"none"`` (nothing), or a dict ``{node: mapping-or-lines}`` for nodes
    that differ from ``"all"`` (see :meth:`set_hosts` for the forms).
    """

    def __init__(self, nodes: Sequence[str] = ("node1", "node2"), *, hosts: str | Mapping[str, HostsSpec] = "all"):
        nodes = list(nodes)
        if not nodes or len(nodes) > 200:
            raise ValueError("a lab needs 1..200 nodes")
        for n in nodes:
            if not _NODE_NAME_RE.match(n):
                raise ValueError(f"bad node name {n!r}: lowercase hostname label, <= 31 chars")
        if len(set(nodes)) != len(nodes):
            raise ValueError("duplicate node names")
        if not (hosts in ("all", "self", "none") or isinstance(hosts, Mapping)):
            raise ValueError(f"hosts must be 'all', 'self', 'none' or a dict, not {hosts!r}")
        ok, why = lab_available()
        if not ok:
            raise LabUnavailable(why)
        self._ip = _which("ip")
        self._nsenter = _which("nsenter")
        self._unshare = _which("unshare")
        self._iptables = _which("iptables")
        self._closed = False
        self._owner_pid = os.getpid()
        self._lock_path: Path | None = None
        self._nodes: dict[str, Node] = {}
        self._holders: dict[str, subprocess.Popen] = {}
        self._procs: list[tuple[str, str, subprocess.Popen]] = []  # (node, tag, popen)
        self._tag_counter = itertools.count(1)
        self._mutex = threading.Lock()
        self.slot = -1
        self.id = ""
        _LIVE_LABS.add(self)
        try:
            self._allocate()
            self._build(nodes, hosts)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        rng = random.SystemRandom()
        start = rng.randrange(N_SLOTS)
        with _alloc_lock():
            _cleanup_stale_locked()
            taken = {str((_read_lock(p) or {}).get("id")) for p in LOCK_DIR.glob("slot-*.lock")}
            taken |= {m.group(1) for m in map(_LAB_NS_RE.match, _ns_names()) if m}
            lab_id = next(i for i in (f"{rng.randrange(1 << 16):04x}" for _ in iter(int, 1)) if i not in taken)
            for k in range(N_SLOTS):
                slot = (start + k) % N_SLOTS
                path = _slot_path(slot)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue
                with os.fdopen(fd, "w") as f:
                    json.dump({"pid": os.getpid(), "start": _proc_start_time(os.getpid()), "id": lab_id,
                               "slot": slot, "argv": sys.argv[:4], "created": time.time()}, f)
                self._lock_path = path
                self.slot = slot
                self.id = lab_id
                break
            else:
                raise LabError(f"all {N_SLOTS} lab slots in {LOCK_DIR} are taken")
        base = int(SUPERNET.network_address) + self.slot * 1024
        self.block = ipaddress.ip_network((base, 22))
        self.decoy_low_subnet = ipaddress.ip_network((base, 24))
        self.subnet = ipaddress.ip_network((base + 256, 24))
        self.decoy_high_subnet = ipaddress.ip_network((base + 512, 24))
        self.switch_ns = f"{PREFIX}{self.id}_sw"
        self.bridge = f"{PREFIX}{self.id}br"

    def _build(self, names: list[str], hosts) -> None:
        ip = self._ip
        _run_host([ip, "netns", "add", self.switch_ns])
        sw = [ip, "-n", self.switch_ns]
        _run_host(sw + ["link", "add", self.bridge, "type", "bridge"])
        _run_host(sw + ["link", "set", self.bridge, "up"])
        _run_host(sw + ["link", "set", "lo", "up"])
        addrs = {n: str(self.subnet.network_address + i) for i, n in enumerate(names, 1)}
        self._addrs = addrs
        nsswitch = self._nsswitch_text()
        for i, name in enumerate(names, 1):
            ns = f"{PREFIX}{self.id}-{name}"
            etc = NETNS_ETC_DIR / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("127.0.0.1 localhost\n")
            (etc / "resolv.conf").write_text("# ddpdoctor lab node: no DNS server is reachable\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
            (etc / "nsswitch.conf").write_text(nsswitch)
            _run_host([ip, "netns", "add", ns])
            veth = f"{PREFIX}{self.id}v{i}"
            _run_host(sw + ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run_host(sw + ["link", "set", veth, "master", self.bridge])
            _run_host(sw + ["link", "set", veth, "up"])
            nn = [ip, "-n", ns]
            _run_host(nn + ["link", "set", "lo", "up"])
            _run_host(nn + ["addr", "add", f"{addrs[name]}/24", "dev", "eth0"])
            _run_host(nn + ["link", "set", "eth0", "up"])
            holder = self._start_holder(ns, name)
            self._nodes[name] = Node(name=name, ns=ns, addr=addrs[name], iface="eth0", index=i,
                                     prefixlen=24, etc_dir=etc, holder_pid=holder.pid)
        for name in names:
            if hosts == "all":
                self.set_hosts(name, addrs)
            elif hosts == "self":
                self.set_hosts(name, {name: addrs[name]})
            elif hosts == "none":
                self.set_hosts(name, {})
            elif isinstance(hosts, Mapping):
                self.set_hosts(name, hosts.get(name, addrs))
            else:
                raise ValueError(f"hosts must be 'all', 'self', 'none' or a dict, not {hosts!r}")
        # Sanity: the node really is what we think it is.
        for name, node in self._nodes.items():
            r = self.run(name, ["hostname"], timeout=10)
            if r.stdout.strip() != name:
                raise LabError(f"hostname inside {name} is {r.stdout.strip()!r}")
            st_in = self.run(name, ["stat", "-L", "-c", "%d:%i", "/etc/hosts"], timeout=10).stdout.strip()
            st = os.stat(node.etc_dir / "hosts")
            if st_in != f"{st.st_dev}:{st.st_ino}":
                raise LabError(f"/etc/hosts inside {name} is not {node.etc_dir / 'hosts'}")

    @staticmethod
    def _nsswitch_text() -> str:
        try:
            lines = Path("/etc/nsswitch.conf").read_text().splitlines()
        except OSError:
            lines = []
        out = [l for l in lines if not re.match(r"^\s*hosts\s*:", l)]
        out.insert(0, "# ddpdoctor lab node: names come from this node's /etc/hosts only")
        out.append("hosts: files")
        return "\n".join(out) + "\n"

    def _start_holder(self, ns: str, name: str) -> subprocess.Popen:
        argv = [self._ip, "netns", "exec", ns, self._unshare, "--uts", "--",
                sys.executable, "-S", "-c", _HOLDER_SRC, name, str(os.getpid())]
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), TAG_VAR: f"{self.id}:holder"}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd="/", env=env, start_new_session=True)
        self._holders[name] = p
        line = p.stdout.readline().decode()
        if not line.startswith("ready"):
            p.kill()
            err = p.stderr.read().decode()
            raise LabError(f"holder for {name} did not start: {line!r} {err.strip()}")
        if int(line.split()[1]) != p.pid:
            raise LabError("holder pid mismatch (ip netns exec / unshare forked?)")
        p.stdout.close()
        p.stderr.close()
        return p

    # ------------------------------------------------------------------ accessors
    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Lab {self.id} {self.subnet} nodes={list(self._nodes)}{' closed' if self._closed else ''}>"

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    @property
    def names(self) -> list[str]:
        return list(self._nodes)

    @property
    def namespaces(self) -> list[str]:
        """All namespaces of this lab (nodes + the switch)."""
        return [n.ns for n in self._nodes.values()] + [self.switch_ns]

    def node(self, name: str | Node) -> Node:
        if isinstance(name, Node):
            return name
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"no node {name!r} in lab (nodes: {list(self._nodes)})") from None

    def addr(self, name: str) -> str:
        return self.node(name).addr

    def decoy_subnet(self, side: str = "low") -> ipaddress.IPv4Network:
        """The /24 from which :meth:`decoy_cidr` takes addresses (no node routes to it)."""
        if side not in ("low", "high"):
            raise ValueError("side must be 'low' or 'high'")
        return self.decoy_low_subnet if side == "low" else self.decoy_high_subnet

    def decoy_cidr(self, k: int = 1, side: str = "low") -> str:
        """``A.B.C.k/24`` for :meth:`add_decoy`.  No node has a route to it, so from
        any other node a connect() fails at once with ENETUNREACH (add a route
        with :meth:`ip` + an iptables DROP to make it a silent black hole instead).

        ``side="low"``: the address sorts *below* every node address; ``"high"``:
        *above*.  This matters for Gloo: of two peers, the one whose advertised
        address is numerically larger initiates the TCP connection to the smaller
        one (gloo/transport/tcp/device.cc ``isInitiator``), so only a decoy that
        sorts low is ever dialled by the others.
        """
        if not 1 <= k <= 254:
            raise ValueError("k must be 1..254")
        return f"{self.decoy_subnet(side).network_address + k}/24"

    # ------------------------------------------------------------------ environment / entering
    def _env(self, node: Node, env: Mapping[str, str | None] | None, tag: str) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items()
               if k not in _SCRUB_EXACT and not k.startswith(_SCRUB_PREFIXES)}
        out["HOSTNAME"] = node.name
        out["PYTHONUNBUFFERED"] = "1"
        for k, v in (env or {}).items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = str(v)
        out[TAG_VAR] = tag
        return out

    def _enter_argv(self, node: Node, argv: Sequence[str], cwd) -> list[str]:
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a list of strings (no shell)")
        cwd = os.path.abspath(cwd if cwd is not None else REPO_ROOT)
        return [self._nsenter, "-t", str(node.holder_pid), "-u", "-n", "-m", f"--wd={cwd}", "--",
                *[str(a) for a in argv]]

    def _check_open(self) -> None:
        if self._closed:
            raise LabError("lab is closed")

    def popen(self, node: str, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None,
              cwd=None, **kw) -> subprocess.Popen:
        """Start ``argv`` inside ``node`` in a new session; killed (with everything it
        started) by :meth:`kill` / :meth:`close`.  ``kw`` goes to ``subprocess.Popen``
        (stdout=, stderr=, text=, ...).  ``popen.lab_tag`` holds its tag."""
        self._check_open()
        n = self.node(node)
        tag = f"{self.id}:{next(self._tag_counter)}"
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.pop("start_new_session", None)
        p = subprocess.Popen(self._enter_argv(n, argv, cwd), env=self._env(n, env, tag),
                             cwd=str(REPO_ROOT), start_new_session=True, **kw)
        p.lab_tag = tag  # type: ignore[attr-defined]
        p.lab_node = n.name  # type: ignore[attr-defined]
        with self._mutex:
            self._procs.append((n.name, tag, p))
        return p

    def kill(self, popen: subprocess.Popen) -> None:
        """SIGKILL ``popen`` and everything it started (tag scan), then reap it."""
        tag = getattr(popen, "lab_tag", None)
        if tag is None:
            raise ValueError("not a Popen started by this lab")
        _kill_until_gone(lambda: _pids_with_tag(tag), f"tag {tag}", reap=[popen])
        with contextlib.suppress(Exception):
            popen.wait(timeout=5)

    def run(self, node: str, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None,
            timeout: float, input: str | None = None, cwd=None, check: bool = False) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``node``; capture stdout/stderr as text.

        On timeout every process it started is SIGKILLed and :class:`LabTimeout`
        is raised (with the captured output).  ``check=True`` raises
        ``subprocess.CalledProcessError`` on a non-zero exit.
        """
        p = self.popen(node, argv, env=env, cwd=cwd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            try:
                out, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a pipe still held open: give up on the rest
                out, err = "", ""
            raise LabTimeout(list(argv), timeout, self.node(node).name, out, err) from None
        finally:
            with self._mutex:
                self._procs = [t for t in self._procs if t[2] is not p or p.returncode is None]
        cp = subprocess.CompletedProcess(list(argv), p.returncode, out, err)
        if check:
            cp.check_returncode()
        return cp

    def kill_all(self, node: str) -> None:
        """SIGKILL every process in ``node``'s network namespace except the node's
        holder; loop until none is left.  (The holder keeps hostname and mounts.)"""
        n = self.node(node)
        with self._mutex:
            mine = [p for nn, _, p in self._procs if nn == n.name]
        _kill_until_gone(lambda: [p for p in netns_pids(n.ns) if p != n.holder_pid], f"node {n.name}", reap=mine)
        with self._mutex:
            self._procs = [t for t in self._procs if t[2].poll() is None]

    # ------------------------------------------------------------------ node configuration
    def set_hosts(self, node: str, entries: HostsSpec) -> None:
        """Rewrite ``node``'s /etc/hosts in place (same inode: running processes and the
        node's mount namespace see the change at once).

        ``entries``: a dict ``{name: address}`` (a ``127.0.0.1 localhost`` line is
        prepended unless ``"localhost"`` is a key; several names may map to one
        address), or a list of raw lines / one string (written verbatim).
        """
        n = self.node(node)
        if isinstance(entries, Mapping):
            lines = [] if "localhost" in entries else ["127.0.0.1 localhost"]
            lines += [f"{addr} {name}" for name, addr in entries.items()]
            text = "\n".join(lines) + "\n"
        elif isinstance(entries, str):
            text = entries if entries.endswith("\n") or not entries else entries + "\n"
        else:
            text = "".join(l if l.endswith("\n") else l + "\n" for l in entries)
        with open(n.etc_dir / "hosts", "r+") as f:
            f.seek(0)
            f.write(text)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())

    def hosts_text(self, node: str) -> str:
        return (self.node(node).etc_dir / "hosts").read_text()

    def _in_netns(self, node: str, tool: str, args: Sequence[str], check: bool) -> subprocess.CompletedProcess:
        self._check_open()
        n = self.node(node)
        r = _run_host([self._ip, "netns", "exec", n.ns, tool, *map(str, args)], check=False)
        if check and r.returncode != 0:
            raise LabError(f"{os.path.basename(tool)} {' '.join(map(str, args))} in {n.name} failed: {r.stderr.strip()}")
        return r

    def iptables(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``iptables -w ARGS`` in ``node``'s network namespace, e.g.
        ``lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "29400", "-j", "DROP")``.
        (Local traffic, even to the node's own eth0 address, goes through ``lo``;
        add ``-i eth0`` to filter only what comes from other nodes.)"""
        return self._in_netns(node, self._iptables, ["-w", *args], check)

    def ip(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``ip ARGS`` in ``node``'s network namespace (routes, links, ...)."""
        return self._in_netns(node, self._ip, list(args), check)

    def addr6(self, node: str) -> str:
        """``node``'s IPv6 address on ``eth0`` once :meth:`enable_ipv6` ran: ULA ``fd64:6470:<slot>::<i>``."""
        return f"fd64:6470:{self.slot:x}::{self.node(node).index}"

    def enable_ipv6(self, nodes: Sequence[str] | None = None) -> dict[str, str]:
        """Give each node (default: all) an IPv6 ULA address ``addr6(n)/64`` on ``eth0`` (no DAD: usable
        at once), next to its IPv4 one; returns ``{node: address}``. /etc/hosts is left alone: map
        names to them with :meth:`set_hosts` (a list of lines may give a name both an A and an AAAA)."""
        out = {}
        for n in nodes or self.names:
            node = self.node(n)
            _run_host([self._ip, "netns", "exec", node.ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=0"],
                      check=False)
            _run_host([self._ip, "netns", "exec", node.ns, "sysctl", "-q", "-w", "net.ipv6.conf.eth0.disable_ipv6=0"],
                      check=False)
            self.ip(n, "addr", "add", f"{self.addr6(n)}/64", "dev", "eth0", "nodad")
            out[n] = self.addr6(n)
        return out

    def ip6tables(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``ip6tables -w ARGS`` in ``node``'s network namespace (like :meth:`iptables`)."""
        return self._in_netns(node, _which("ip6tables"), ["-w", *args], check)

    def switch_port(self, node: str) -> str:
        """The name of ``node``'s port (the veth peer of its ``eth0``) in the switch namespace."""
        return f"{PREFIX}{self.id}v{self.node(node).index}"

    def ip_switch(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``ip ARGS`` in the switch namespace (e.g. a port's MTU)."""
        self._check_open()
        r = _run_host([self._ip, "-n", self.switch_ns, *map(str, args)], check=False)
        if check and r.returncode != 0:
            raise LabError(f"ip {' '.join(map(str, args))} in the switch failed: {r.stderr.strip()}")
        return r

    def set_mtu(self, node: str, mtu: int, *, switch_port: int | None = None, offloads: bool = True) -> None:
        """Set ``node``'s ``eth0`` MTU (and its switch port's, when given). ``offloads=False`` turns
        TSO/GSO/GRO off on both ends with ethtool, so the kernel sends and receives real frames of
        that size instead of hiding them in large offloaded buffers."""
        self.ip(node, "link", "set", "eth0", "mtu", str(mtu))
        if switch_port is not None:
            self.ip_switch("link", "set", self.switch_port(node), "mtu", str(switch_port))
        if not offloads:
            ethtool = _which("ethtool")
            feats = ["tso", "off", "gso", "off", "gro", "off"]
            self._in_netns(node, ethtool, ["-K", "eth0", *feats], True)
            r = _run_host([self._ip, "netns", "exec", self.switch_ns, ethtool, "-K", self.switch_port(node), *feats],
                          check=False)
            if r.returncode != 0:
                raise LabError(f"ethtool -K in the switch failed: {r.stderr.strip()}")

    def add_decoy(self, node: str, ifname: str, cidr: str) -> None:
        """Add a decoy NIC to ``node``: a port-less bridge link named ``ifname`` with
        address ``cidr``, up.  The address is local to ``node`` only; use
        :meth:`decoy_cidr` for an address no other node can route to (their
        connect() gets ENETUNREACH at once)."""
        if len(ifname) > 15:
            raise ValueError("interface names are at most 15 characters")
        net = ipaddress.ip_interface(cidr)
        if net.ip not in SUPERNET:
            raise ValueError(f"lab addresses must be in {SUPERNET}")
        self.ip(node, "link", "add", ifname, "type", "bridge")
        self.ip(node, "addr", "add", str(net), "dev", ifname)
        self.ip(node, "link", "set", ifname, "up")

    def mount_tmpfs(self, node: str, path: str, size: str = "64M") -> None:
        """Mount a fresh tmpfs (``size`` like ``"64M"``) on ``path`` inside ``node`` only
        (the node's private mount namespace; the host and other nodes keep theirs).
        ``path`` must already exist (it is never created on the host)."""
        n = self.node(node)
        r = self.run(n.name, ["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(path)],
                     timeout=15, cwd="/")
        if r.returncode != 0:
            raise LabError(f"mount tmpfs on {path} in {n.name} failed: {r.stderr.strip()}")

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Kill every process, delete namespaces, /etc/netns dirs and the slot lock.
        Idempotent; tries every step and raises one LabError listing what failed."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner_pid:  # a forked child must not tear down its parent's lab
            return
        problems: list[str] = []
        with self._mutex:
            procs = list(self._procs)
            self._procs.clear()
        for _, tag, p in procs:
            try:
                _kill_until_gone(lambda tag=tag: _pids_with_tag(tag), f"tag {tag}", reap=[p])
            except LabError as e:
                problems.append(str(e))
        for n in self._nodes.values():
            try:
                _kill_until_gone(lambda n=n: netns_pids(n.ns), f"node {n.name}", reap=list(self._holders.values()))
            except LabError as e:
                problems.append(str(e))
        for p in list(self._holders.values()) + [p for _, _, p in procs]:
            with contextlib.suppress(Exception):
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        if self.id:
            problems += _destroy_lab_id(self.id)
        if self._lock_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._lock_path.unlink()
        _LIVE_LABS.discard(self)
        if problems:
            raise LabError("lab teardown incomplete:\n" + "\n".join(problems))


# --------------------------------------------------------------------------- torchrun jobs

@dataclasses.dataclass
class JobResult:
    ok: bool                       # every node exited 0 and printed ALLREDUCE OK
    timed_out: bool                # wall_timeout expired; everything was killed
    rc: dict[str, int | None]      # per node; None = killed at wall timeout
    output: dict[str, str]         # per node, stdout+stderr interleaved
    elapsed_s: float               # until the last node exited (or the wall timeout)
    node_elapsed_s: dict[str, float | None]  # when each node's torchrun exited
    argv: dict[str, list[str]]

    _KEY = re.compile(r"(Error|error|Exception|exception|Traceback|timed out|Timeout|refused|unreachable|"
                      r"Unable|failed|Failed|WARNING|Warning)")

    def key_lines(self, node: str, limit: int = 12) -> list[str]:
        """Lines of ``node``'s output that look like errors/warnings (deduplicated)."""
        seen, out = set(), []
        for line in self.output.get(node, "").splitlines():
            s = line.strip()
            if self._KEY.search(s) and s not in seen:
                seen.add(s)
                out.append(s)
        return out[:limit]

    def summary(self) -> str:
        parts = [f"ok={self.ok} timed_out={self.timed_out} elapsed={self.elapsed_s:.1f}s"]
        for n in self.rc:
            t = self.node_elapsed_s[n]
            parts.append(f"  {n}: rc={self.rc[n]} t={'-' if t is None else f'{t:.1f}s'}")
            parts += [f"    | {l[:300]}" for l in self.key_lines(n, 6)]
        return "\n".join(parts)


def torchrun_argv(*, nnodes: int, rdzv: str, endpoint_host: str, port: int, node_rank: int, rdzv_id: str,
                  script: str | os.PathLike = ALLREDUCE_SCRIPT, script_args: Sequence[str] = (),
                  rdzv_conf: str | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1",
            "--max-restarts=0", "--monitor-interval=0.5"]
    if rdzv == "c10d":
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint_host}:{port}", f"--rdzv-id={rdzv_id}"]
        if rdzv_conf:
            argv.append(f"--rdzv-conf={rdzv_conf}")
    elif rdzv == "static":
        argv += ["--rdzv-backend=static", f"--master-addr={endpoint_host}", f"--master-port={port}",
                 f"--node-rank={node_rank}"]
        if rdzv_conf:
            argv.append(f"--rdzv-conf={rdzv_conf}")
    else:
        raise ValueError("rdzv must be 'c10d' or 'static'")
    return argv + list(extra_args) + [str(script), *map(str, script_args)]


def run_torchrun_job(lab: Lab, *, master: str = "node1", nodes: Sequence[str] | None = None, port: int = 29400,
                     rdzv: str = "c10d", master_addr: str | None = None,
                     env: Mapping[str, str | None] | None = None,
                     env_per_node: Mapping[str, Mapping[str, str | None]] | None = None,
                     job_timeout: float = 15, wall_timeout: float = 90,
                     script: str | os.PathLike = ALLREDUCE_SCRIPT, script_args: Sequence[str] = (),
                     rdzv_conf: str | None = None, extra_args: Sequence[str] = (),
                     extra_args_per_node: Mapping[str, Sequence[str]] | None = None,
                     start_stagger_s: float = 0.0) -> JobResult:
    """Start one torchrun agent per node (all at once) running ``script``
    (default tests/lab_jobs/allreduce.py: gloo init + one all_reduce).

    ``rdzv="c10d"``: ``--rdzv-backend=c10d --rdzv-endpoint=<master_addr or master>:<port>``
    with a unique ``--rdzv-id``.  ``rdzv="static"``: ``--master-addr/--master-port`` and
    ``--node-rank`` = position in ``nodes`` (``master`` is moved first, so it is rank 0).
    ``job_timeout`` -> ``LAB_PG_TIMEOUT`` (init_process_group timeout, seconds).
    ``wall_timeout`` bounds everything: on expiry every process of the job on every
    node is killed and ``timed_out`` is True.  ``env`` applies to all nodes,
    ``env_per_node[node]`` on top.  ``extra_args`` (all nodes) and
    ``extra_args_per_node[node]`` are torchrun options placed before the script
    (e.g. ``["--local-addr=198.18.1.1"]``; a repeated option wins over an earlier one).
    """
    names = list(nodes) if nodes is not None else lab.names
    if master in names:
        names.remove(master)
        names.insert(0, master)
    host = master_addr or master
    rdzv_id = f"lab{lab.id}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    tmp = tempfile.mkdtemp(prefix=f"ddplab-{lab.id}-")
    procs: dict[str, subprocess.Popen] = {}
    files = {}
    argvs = {}
    t0 = time.monotonic()
    ended: dict[str, float | None] = {n: None for n in names}
    timed_out = False
    try:
        for rank, n in enumerate(names):
            e = {"LAB_PG_TIMEOUT": str(job_timeout), **(env or {}), **((env_per_node or {}).get(n, {}))}
            argv = torchrun_argv(nnodes=len(names), rdzv=rdzv, endpoint_host=host, port=port, node_rank=rank,
                                 rdzv_id=rdzv_id, script=script, script_args=script_args, rdzv_conf=rdzv_conf,
                                 extra_args=[*extra_args, *((extra_args_per_node or {}).get(n, ()))])
            argvs[n] = argv
            f = open(os.path.join(tmp, f"{n}.log"), "w+")
            files[n] = f
            procs[n] = lab.popen(n, argv, env=e, stdout=f, stderr=subprocess.STDOUT)
            if start_stagger_s:
                time.sleep(start_stagger_s)
        deadline = t0 + wall_timeout
        while True:
            for n, p in procs.items():
                if ended[n] is None and p.poll() is not None:
                    ended[n] = time.monotonic() - t0
            if all(v is not None for v in ended.values()):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        for p in procs.values():
            with contextlib.suppress(Exception):
                lab.kill(p)
        elapsed = time.monotonic() - t0
        outputs = {}
        for n, f in files.items():
            f.flush()
            f.seek(0)
            outputs[n] = f.read()
            f.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rc = {n: (procs[n].returncode if ended[n] is not None else None) for n in names}
    ok = (not timed_out and all(r == 0 for r in rc.values())
          and all("ALLREDUCE OK" in outputs[n] for n in names))
    if not timed_out:
        elapsed = max(v for v in ended.values() if v is not None)
    return JobResult(ok=ok, timed_out=timed_out, rc=rc, output=outputs, elapsed_s=elapsed,
                     node_elapsed_s=ended, argv=argvs)

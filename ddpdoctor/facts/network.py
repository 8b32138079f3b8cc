"""Facts `ddpdoctor network` judges, gathered lazily and once, shared by all its checks."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from ddpdoctor.facts import EnvContext
from ddpdoctor.probes import handshake
from ddpdoctor.memo import lazy
from ddpdoctor.probes import dns, pathmtu, sockets
from ddpdoctor.probes.nics import Nic, list_nics, nic_with_addr

# What the checks that judge these facts compare against (pure values and predicates, re-exported
# so that checks/ imports facts, never probes: tests/test_dependency_rules.py)
from ddpdoctor.probes.dns import is_loopback  # noqa: E402,F401
from ddpdoctor.probes.procs import PortHolder  # noqa: E402,F401
from ddpdoctor.probes.sockets import (ERROR, FILTERED, NO_ROUTE, OPEN, REFUSED,  # noqa: E402,F401
                                      UNREACHABLE)


@dataclass(frozen=True)
class Ping:
    state: str  # "ok", "lost", "unavailable"
    rtt_ms: float | None = None
    detail: str = ""


BULK_DEADLINE_S = 1.5  # per direction; a healthy LAN moves 1 MiB in milliseconds


@dataclass(frozen=True)
class PathMtu:
    local_if: str
    local_mtu: int
    full: pathmtu.Bulk | None      # segments as large as the interfaces allow
    clamped: pathmtu.Bulk | None   # segments that fit a 1500 MTU (only when the local MTU is larger)
    sweep: pathmtu.Sweep | None    # don't-fragment pings

    @property
    def peer_mtu(self) -> int:
        for b in (self.full, self.clamped):
            if b and b.supported and b.peer_mtu:
                return b.peer_mtu
        return 0

    @property
    def peer_if(self) -> str:
        for b in (self.full, self.clamped):
            if b and b.supported and b.peer_if:
                return b.peer_if
        return "?"


def nccl_conf_paths(env: Mapping[str, str]) -> tuple[str, ...]:
    """The files NCCL reads settings from, first one wins (NCCL src/misc/param.cc initEnv: the file
    NCCL_CONF_FILE names, else ~/.nccl.conf, then /etc/nccl.conf; a value in the environment wins
    over all of them, setenv(..., overwrite=0))."""
    if env.get("NCCL_CONF_FILE"):
        return (env["NCCL_CONF_FILE"],)
    home = env.get("HOME") or os.path.expanduser("~")
    return (os.path.join(home, ".nccl.conf"), "/etc/nccl.conf")


class NetworkFacts(EnvContext):
    """`nccl_conf`: the files NCCL reads its settings from (nccl_conf_paths), read when the environment
    is this process's own; a test that hands in `env` hands in the files too (default: none). What
    NCCL will see, the environment over the files, is `env`; `nccl_conf` keeps the files' part, so a
    finding can say where a value came from."""

    def __init__(self, master: str, port: int, *, env: Mapping[str, str] | None = None,
                 probe_timeout: float = 2.0, hostname: str | None = None,
                 nccl_conf: tuple[str, ...] | None = None):
        from ddpdoctor.probes.system import read_nccl_conf
        self.master = master
        self.port = port
        raw = dict(os.environ if env is None else env)
        if nccl_conf is None:
            nccl_conf = nccl_conf_paths(raw) if env is None else ()
        self.nccl_conf = read_nccl_conf(tuple(nccl_conf)) if nccl_conf else {}
        self.raw_env = raw
        self.env = {**self.nccl_conf, **raw}
        self.probe_timeout = probe_timeout
        self._hostname = hostname

    def prefetch(self, *names: str) -> None:
        """Gather several lazy facts at once (each in a daemon thread); returns when all are in.
        Two lookups that each wait for a slow resolver then cost one timeout, not two."""
        import threading
        threads = [threading.Thread(target=getattr, args=(self, n), name=f"fact-{n}", daemon=True) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    # --- this host -------------------------------------------------------------------------
    @lazy
    def hostname(self) -> str:
        return self._hostname or socket.gethostname()

    @lazy
    def local_res(self) -> dns.Resolution:
        return dns.resolve(self.hostname, timeout=self.probe_timeout)

    @lazy
    def fqdn(self) -> str:
        return dns.fqdn(self.hostname, timeout=self.probe_timeout)

    @lazy
    def fqdn_res(self) -> dns.Resolution:
        return dns.resolve(self.fqdn, timeout=self.probe_timeout)

    @lazy
    def nics(self) -> list[Nic]:
        return list_nics()

    @lazy
    def local_addrs(self) -> set[str]:
        return {a for n in self.nics for a in n.addrs}

    # --- the master ------------------------------------------------------------------------
    @lazy
    def master_res(self) -> dns.Resolution:
        return dns.resolve(self.master, timeout=self.probe_timeout)

    @lazy
    def master_addr(self) -> str | None:
        """The address torch would connect to first: a literal as given (a scope id kept), the
        first of c10d's order when the name has IPv6 addresses (DD210), else the first IPv4 one."""
        if self.master_literal:
            return self.master
        r = self.master_res
        if len(r.ipv4) != len(r.addrs) and self.c10d_order.addrs:
            return self.c10d_order.addrs[0]
        return (r.ipv4 or r.addrs or (None,))[0]

    @lazy
    def master_literal(self) -> bool:
        return ":" in self.master or self.master.replace(".", "").isdigit()

    @lazy
    def c10d_order(self) -> dns.Resolution:
        """The master's addresses in the order torch's c10d client tries them."""
        return dns.c10d_order(self.master, timeout=self.probe_timeout)

    @lazy
    def family_probes(self) -> dict[str, sockets.TcpProbe]:
        """A TCP probe of the rendezvous port on every address of the master (both families), at once."""
        addrs = list(dict.fromkeys([*self.c10d_order.addrs, *self.master_res.addrs]))
        out: dict[str, sockets.TcpProbe] = {}
        threads = [threading.Thread(target=lambda a=a: out.__setitem__(
            a, sockets.tcp_probe(a, self.port, timeout=self.probe_timeout)), daemon=True) for a in addrs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.probe_timeout + 1.0)
        return out

    @lazy
    def master_reverse(self) -> dns.Reverse | None:
        return dns.reverse(self.master_addr, timeout=self.probe_timeout) if self.master_addr else None

    @lazy
    def master_is_local(self) -> bool:
        """True on the master itself: its name resolves to loopback or to one of our addresses."""
        a = self.master_addr
        return bool(a) and (dns.is_loopback(a) or a in self.local_addrs)

    @lazy
    def local_listener(self) -> bool:
        """On the master: `ddpdoctor network --listen` holds the rendezvous port here (its handshake
        answers). The README's worker line run on the master then probes that listener like a worker
        does (and counts as its arrival) instead of reporting the port as taken."""
        return bool(self.master_is_local and not self.port_bind.free and self.hello and self.hello.is_ddpdoctor)

    @lazy
    def route(self) -> sockets.Route | None:
        return sockets.route_to(self.master_addr, self.port) if self.master_addr else None

    @lazy
    def route_nic(self) -> Nic | None:
        r = self.route
        if not r or not r.ok:
            return None
        return nic_with_addr(self.nics, r.src_addr)

    @lazy
    def tcp(self) -> sockets.TcpProbe | None:
        if not self.master_addr:
            return None
        return sockets.tcp_probe(self.master_addr, self.port, timeout=self.probe_timeout)

    @lazy
    def port_bind(self) -> sockets.BindResult:
        """Whether the rendezvous port can be bound here (DD105, on the master)."""
        return sockets.try_bind(self.port)

    @lazy
    def port_holders(self) -> list:
        """The processes listening on the rendezvous port (psutil; pids need root for others' sockets)."""
        from ddpdoctor.probes.procs import listeners_on
        return listeners_on(self.port)

    @lazy
    def hello(self) -> handshake.Hello | None:
        """The ddpdoctor handshake on the rendezvous port, when something listens there."""
        t = self.tcp
        if not t or t.state != sockets.OPEN:
            return None
        return handshake.hello(self.master_addr, self.port, self.hostname, timeout=self.probe_timeout)

    @lazy
    def ephemeral(self) -> sockets.TcpProbe | None:
        h = self.hello
        if not h or not h.is_ddpdoctor or not h.eport:
            return None
        # The listener stops once a worker completed both ports (--expect): measure the path MTU
        # first, while it still answers.
        _ = self.path_mtu
        return handshake.ephemeral(self.master_addr, h.eport, self.hostname, timeout=self.probe_timeout)

    @lazy
    def path_mtu(self) -> PathMtu | None:
        """Bulk TCP both ways at the full segment size and clamped to 1500, plus a DF ping sweep,
        all at once against the listener (None without one); see probes/pathmtu.py."""
        h = self.hello
        if not h or not h.is_ddpdoctor:
            return None
        nic = self.route_nic
        local = nic.mtu if nic else 0
        fam = pathmtu.family_of(self.master_addr)
        out: dict[str, object] = {}
        jobs = {"full": lambda: pathmtu.bulk(self.master_addr, self.port, self.hostname,
                                             deadline_s=BULK_DEADLINE_S, connect_timeout=self.probe_timeout)}
        if local > 1500:
            jobs["clamped"] = lambda: pathmtu.bulk(self.master_addr, self.port, self.hostname,
                                                   deadline_s=BULK_DEADLINE_S, connect_timeout=self.probe_timeout,
                                                   mss=1500 - pathmtu.TCP_OVERHEAD[fam])
        jobs["sweep"] = lambda: pathmtu.df_sweep(self.master_addr, local_mtu=local or 1500)
        threads = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f()), daemon=True)
                   for k, f in jobs.items()]
        for t in threads:
            t.start()
        end = time.monotonic() + 3 * BULK_DEADLINE_S + 2 * self.probe_timeout + 4
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        return PathMtu(local_if=nic.name if nic else "?", local_mtu=local, full=out.get("full"),
                       clamped=out.get("clamped"), sweep=out.get("sweep"))

    @lazy
    def ping(self) -> Ping:
        exe = shutil.which("ping")
        if not exe:
            return Ping("unavailable", None, "no `ping` program on this host")
        if not self.master_addr:
            return Ping("unavailable", None, "master does not resolve")
        wait = max(1, int(self.probe_timeout + 0.999))
        t0 = time.monotonic()
        try:
            p = subprocess.run([exe, "-n", "-c", "1", "-W", str(wait), "--", self.master_addr],
                               capture_output=True, text=True, timeout=wait + 1.0, stdin=subprocess.DEVNULL)
        except (subprocess.TimeoutExpired, OSError) as e:
            return Ping("lost", None, str(e))
        out = (p.stdout + p.stderr).strip()
        if p.returncode == 0:
            rtt = None
            for tok in out.split():
                if tok.startswith("time="):
                    try:
                        rtt = float(tok[5:])
                    except ValueError:
                        pass
            return Ping("ok", rtt if rtt is not None else (time.monotonic() - t0) * 1000)
        low = out.lower()
        if "permitted" in low or "permission" in low or "socket:" in low:
            return Ping("unavailable", None, out.splitlines()[-1] if out else "ICMP not permitted")
        return Ping("lost", None, out.splitlines()[-1] if out else f"ping exit {p.returncode}")

"""Path MTU between this host and a `ddpdoctor network --listen`: bulk TCP both ways, and DF pings.

Why both: jumbo frames (MTU 9000 on the hosts) behind a switch port or tunnel that carries 1500
let every small packet through (rendezvous works) and silently drop every full-size one. With
no router in between nobody sends ICMP "fragmentation needed", so TCP never learns a smaller
size (Linux's `tcp_mtu_probing` is 0 by default) and the first large Gloo/NCCL transfer stalls.

* `bulk()` sends N bytes on a TCP connection to the listener and gets N bytes back, each with a
  deadline; the listener says how many bytes arrived in order and its interface's MTU. Zero
  bytes of a full-size transfer while the protocol lines (small segments) pass is the black hole
  signature; a part of it is a slow link. With `mss=` the connection is clamped (TCP_MAXSEG
  before connect: both directions then use segments no larger), so a clamped transfer that
  passes where the default one stalls proves the size is the problem, without needing ICMP.
* `df_sweep()` runs `ping -M do -s SIZE` (don't fragment) at candidate sizes in parallel, then
  once more between the largest that passed and the smallest that did not: the largest IP packet
  that passes, within a few bytes, in about two ping timeouts.

The protocol is additive to handshake.py's, on the rendezvous port:
    worker: DDPDOCTOR/1 BULK <host> <nbytes> <ms>      listener: DDPDOCTOR/1 READY
    worker: <nbytes of payload, until its deadline>
    listener: DDPDOCTOR/1 GOT <n-received> <ifname> <mtu> <ms-taken>, then <nbytes of payload>
A listener that predates it closes the connection without a word (-> supported=False).
"""
from __future__ import annotations

import select
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ddpdoctor.probes.handshake import PROTO, clean_token, read_line

BULK_BYTES = 1 << 20      # 1 MiB: far above one jumbo frame, small enough for a slow link in 2 s
MAX_BULK_BYTES = 16 << 20  # what a listener accepts
MAX_BULK_MS = 10_000
# IP + TCP header bytes under the MSS; TCP timestamps (on by default on Linux) take 12 more per
# segment, which only makes segments smaller than `MTU - overhead`.
TCP_OVERHEAD = {socket.AF_INET: 40, socket.AF_INET6: 60}
ICMP_OVERHEAD = {socket.AF_INET: 28, socket.AF_INET6: 48}
# Common MTUs (IPv6 minimum, VXLAN/Geneve overlays, Ethernet, IPoIB, RoCE, jumbo).
CANDIDATE_MTUS = (1280, 1450, 1500, 2044, 4092, 4200, 8192, 9000)


@dataclass(frozen=True)
class Bulk:
    """One bulk exchange. `sent_ok`/`back_ok`: bytes delivered in order each way before the deadline."""
    supported: bool
    nbytes: int = 0
    mss: int | None = None      # the clamp, when one was asked for
    sent_ok: int = 0            # worker -> listener, as the listener counted them
    back_ok: int = 0            # listener -> worker
    up_s: float = 0.0
    down_s: float = 0.0
    peer_if: str = ""
    peer_mtu: int = 0
    error: str = ""

    @property
    def complete(self) -> bool:
        return self.supported and self.sent_ok >= self.nbytes and self.back_ok >= self.nbytes

    @property
    def stalled(self) -> bool:
        """Nothing of the payload arrived in at least one direction: packets of that size vanish."""
        return self.supported and not self.error and (self.sent_ok == 0 or self.back_ok == 0)


@dataclass(frozen=True)
class Sweep:
    available: bool
    largest_ok: int | None = None     # largest IP packet (bytes, headers included) that passed
    smallest_lost: int | None = None  # smallest that did not
    tried: dict[int, bool] = field(default_factory=dict)
    detail: str = ""


def family_of(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def bulk(addr: str, port: int, me: str, *, nbytes: int = BULK_BYTES, deadline_s: float = 2.0,
         mss: int | None = None, connect_timeout: float = 2.0) -> Bulk:
    """Exchange `nbytes` each way with the listener at addr:port, each direction within `deadline_s`."""
    fam = family_of(addr)
    ms = int(deadline_s * 1000)
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        if mss:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        s.settimeout(connect_timeout)
        s.connect((addr, port))
        s.sendall(f"{PROTO} BULK {clean_token(me)} {nbytes} {ms}\n".encode("ascii"))
        # The listener reads its request line in chunks: payload sent before READY could be eaten with it.
        ready = read_line(s, connect_timeout)
        if ready != f"{PROTO} READY":
            return Bulk(False, nbytes, mss, error=(f"unexpected answer {ready[:60]!r}" if ready else
                                                   "no answer to BULK (a listener older than this ddpdoctor)"))
        # worker -> listener: send until done or the deadline (a black hole fills the send buffer, then blocks)
        t0 = time.monotonic()
        end = t0 + deadline_s
        payload = memoryview(b"\xa5" * min(nbytes, 1 << 16))
        sent = 0
        s.setblocking(False)
        while sent < nbytes:
            left = end - time.monotonic()
            if left <= 0:
                break
            _, w, _ = select.select([], [s], [], left)
            if not w:
                break
            try:
                sent += s.send(payload[: min(len(payload), nbytes - sent)])
            except BlockingIOError:
                continue
        # the listener answers after it got everything or its own deadline passed
        buf = b""
        end_reply = time.monotonic() + deadline_s + connect_timeout + 1.0
        while b"\n" not in buf and len(buf) < 4096:
            left = end_reply - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([s], [], [], left)
            if not r:
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        if b"\n" not in buf:
            if not buf:
                return Bulk(False, nbytes, mss, error="no answer to BULK (a listener older than this ddpdoctor)")
            return Bulk(False, nbytes, mss, error=f"unexpected answer {buf[:60]!r}")
        line, rest = buf.split(b"\n", 1)
        parts = line.decode("ascii", "replace").split()
        # DDPDOCTOR/1 GOT <n> <ifname> <mtu> <ms>
        if len(parts) != 6 or parts[:2] != [PROTO, "GOT"] or not parts[2].isdigit() or not parts[4].isdigit():
            return Bulk(False, nbytes, mss, error=f"unexpected answer {line[:60]!r}")
        got, peer_if, peer_mtu, up_ms = int(parts[2]), clean_token(parts[3]), int(parts[4]), parts[5]
        up_s = int(up_ms) / 1000 if up_ms.isdigit() else 0.0
        # listener -> worker
        t1 = time.monotonic()
        back = len(rest)
        end = t1 + deadline_s
        while back < nbytes:
            left = end - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([s], [], [], left)
            if not r:
                break
            try:
                chunk = s.recv(1 << 18)
            except BlockingIOError:
                continue
            if not chunk:
                break
            back += len(chunk)
        return Bulk(True, nbytes, mss, got, min(back, nbytes), up_s, time.monotonic() - t1, peer_if, peer_mtu)
    except OSError as e:
        return Bulk(False, nbytes, mss, error=e.strerror or str(e))
    finally:
        s.close()


def serve_bulk(conn: socket.socket, parts: list[str], *, ifname: str, mtu: int) -> int | None:
    """The listener's side of BULK (called by listen.ProbeServer after the request line).

    Reads up to `nbytes` for the worker's deadline, answers `GOT <n> <ifname> <mtu> <ms>`, then sends
    `nbytes` back within the same deadline. Sizes and times are capped so a stranger cannot make the
    listener work for long. Returns the bytes received, or None for a malformed request.
    """
    if len(parts) != 5 or not parts[3].isdigit() or not parts[4].isdigit():
        return None
    nbytes = min(int(parts[3]), MAX_BULK_BYTES)
    deadline = min(int(parts[4]), MAX_BULK_MS) / 1000
    conn.sendall(f"{PROTO} READY\n".encode("ascii"))
    t0 = time.monotonic()
    got = 0
    conn.settimeout(None)
    conn.setblocking(False)
    end = t0 + deadline
    while got < nbytes:
        left = end - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([conn], [], [], left)
        if not r:
            break
        try:
            chunk = conn.recv(min(1 << 18, nbytes - got))
        except BlockingIOError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += len(chunk)
    up_ms = int((time.monotonic() - t0) * 1000)
    reply = f"{PROTO} GOT {got} {clean_token(ifname)} {int(mtu)} {up_ms}\n".encode("ascii")
    payload = memoryview(b"\x5a" * (1 << 16))
    data_left = nbytes
    out = memoryview(reply)
    end = time.monotonic() + deadline + 1.0  # + the reply line
    while len(out) or data_left:
        left = end - time.monotonic()
        if left <= 0:
            break
        _, w, _ = select.select([], [conn], [], left)
        if not w:
            break
        try:
            if len(out):
                out = out[conn.send(out):]
            else:
                data_left -= conn.send(payload[: min(len(payload), data_left)])
        except BlockingIOError:
            continue
        except OSError:
            break  # the worker went away: nothing more to send
    return got


def _ping_df(exe: str, addr: str, size: int, fam: int, timeout_s: float) -> bool:
    """One don't-fragment echo of an IP packet of `size` bytes; True when the answer came back."""
    payload = size - ICMP_OVERHEAD[fam]
    argv = [exe, "-n", "-c", "1", "-W", str(max(1, int(timeout_s + 0.999))), "-M", "do", "-s", str(payload)]
    argv += ["-6"] if fam == socket.AF_INET6 else ["-4"]
    try:
        p = subprocess.run([*argv, "--", addr], capture_output=True, text=True, timeout=timeout_s + 2,
                           stdin=subprocess.DEVNULL)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return p.returncode == 0


def df_sweep(addr: str, *, local_mtu: int, peer_mtu: int = 0, timeout_s: float = 1.0) -> Sweep:
    """Largest don't-fragment IP packet that reaches `addr` and comes back, in two parallel rounds."""
    exe = shutil.which("ping")
    if not exe:
        return Sweep(False, detail="no `ping` program on this host")
    fam = family_of(addr)
    top = max(local_mtu, peer_mtu or 0)
    if top < 1280:
        top = 1500
    floor = 1280 if fam == socket.AF_INET6 else 576
    sizes = sorted({m for m in CANDIDATE_MTUS if floor <= m <= top} | {top, local_mtu, peer_mtu or top, floor})
    sizes = [m for m in sizes if floor <= m <= top]
    tried: dict[int, bool] = {}

    def round_(cands):
        with ThreadPoolExecutor(max_workers=len(cands)) as ex:
            for m, ok in zip(cands, ex.map(lambda m: _ping_df(exe, addr, m, fam, timeout_s), cands)):
                tried[m] = ok

    round_(sizes)
    if not any(tried.values()):
        return Sweep(True, None, min(tried), tried, "no size passed: ICMP is filtered or the host is down")
    ok = max(m for m, v in tried.items() if v)
    lost = [m for m, v in tried.items() if not v and m > ok]
    if lost:
        hi = min(lost)
        step = max(1, (hi - ok) // 9)
        mids = [m for m in range(ok + step, hi, step) if m not in tried][:8]
        if mids:
            round_(mids)
            ok = max(m for m, v in tried.items() if v)
            lost = [m for m, v in tried.items() if not v and m > ok]
    return Sweep(True, ok, min(lost) if lost else None, dict(sorted(tried.items())))

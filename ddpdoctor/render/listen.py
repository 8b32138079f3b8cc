"""`network --listen`: the arrivals as they happen, and the summary at the end (text and JSON).

Reports in, text out: what counts as a failure (a worker that reached the rendezvous port but not the
ephemeral one, workers that never came) is decided by the caller (cli/network.py) and handed in.
"""
from __future__ import annotations

from typing import Any, Sequence


def banner(host: str, port: int, expect: int | None, timeout: float) -> str:
    return (f"ddpdoctor listening on {host}:{port}" + (f", waiting for {expect} worker(s)" if expect else "")
            + f" for up to {timeout:g} s")


def arrival(kind: str, w, port: int) -> str:
    """One line per event: a worker reached a port, or its bulk (path-MTU) probe arrived."""
    if kind == "bulk":
        b = w.bulk[-1]
        return (f"  {w.host} ({w.addr}) bulk probe: {b['bytes']} of {b['asked']} bytes arrived "
                f"via {b['interface']} (MTU {b['mtu']})")
    what = f"port {port}" if kind == "rendezvous" else "the ephemeral port"
    return f"  {w.host} ({w.addr}) reached {what} via {w.interface}"


def summary(res, *, port: int, expect: int | None, partial: Sequence, partial_fix: Sequence[str],
            missing: int, probe_cmd: str) -> list[str]:
    """The closing lines. `partial_fix[i]` is the command that opens the ephemeral range for partial[i];
    `missing` workers never arrived (with `expect`), -1 when nobody came and none was expected."""
    done = sum(w.complete for w in res.workers)
    out = [f"{done} worker(s) reached both ports" + (f" of {expect} expected" if expect else "")
           + f" in {res.duration_s:.1f} s" + (" (timed out)" if res.timed_out else "")
           + (f" (stopped by {res.interrupted})" if res.interrupted else "")]
    out += [f"✓ {w.host} from {w.addr} via {w.interface}" for w in res.workers if w.complete]
    lo, hi = res.eport_range
    for w, fix in zip(partial, partial_fix):
        # From here a dropped ephemeral port and a peer that never tried it (it died, it is an old
        # ddpdoctor, or not one at all: any process may say HELLO) look the same: no connection. The
        # worker's own probe tells them apart (its connect times out), so that is what we ask for.
        out.append(f"? {w.host} from {w.addr} reached port {port} but never came to ephemeral port {res.eport}: "
                   f"a firewall dropping {lo}-{hi}, or the peer stopped after its first probe")
        out.append(f"    decide: run `{probe_cmd}` on {w.host}: it names a dropped port")
        out.append(f"    if it does: {fix}")
    if missing > 0:
        out.append(f"✗ {missing} worker(s) never arrived: run `{probe_cmd}` on them; its report names what blocks them")
    elif missing < 0:
        out.append(f"✗ no worker arrived: run `{probe_cmd}` on them")
    return out


def to_json(res, *, host: str, code: int, expect: int | None) -> dict[str, Any]:
    return {"schema": 1, "command": "network-listen", "host": host, "exit_code": code,
            "port": res.port, "eport": res.eport, "eport_range": list(res.eport_range), "expect": expect,
            "timed_out": res.timed_out, "interrupted": res.interrupted or None, "duration_s": round(res.duration_s, 3),
            "workers": [{"host": w.host, "addr": w.addr, "interface": w.interface,
                         "rendezvous_port": w.rdzv_at is not None, "ephemeral_port": w.eph_at is not None,
                         "bulk": w.bulk}
                        for w in res.workers]}

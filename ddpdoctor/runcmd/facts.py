"""Facts about one launch command, for the DD82x checks (ddpdoctor/checks/launch.py) to judge.

Plain data derived from the parsed command (parse.py) and this host: node counts, the
rendezvous endpoint split into host and port, the GPUs NVML sees (lazily: only DD824 asks), the
script path. Nothing here judges.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ddpdoctor.memo import lazy

if TYPE_CHECKING:  # the registry reads this class at start-up (commands.py): argparse only when `run` parses
    from ddpdoctor.runcmd.parse import LaunchSpec

C10D_DEFAULT_PORT = 29400  # torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py


@dataclass
class Endpoint:
    text: str
    host: str = ""
    port: int | None = None
    problem: str = ""


def split_endpoint(text: str, default_port: int | None) -> Endpoint:
    """`host:port`, `[v6]:port`, or `host` (torch's parse_rendezvous_endpoint grammar)."""
    ep = Endpoint(text)
    t = text.strip()
    if not t:
        ep.problem = "empty endpoint"
        return ep
    if t.startswith("["):
        end = t.find("]")
        if end < 0:
            ep.problem = f"{text!r}: unbalanced '[' in an IPv6 endpoint"
            return ep
        ep.host, rest = t[1:end], t[end + 1:]
        port = rest[1:] if rest.startswith(":") else None
        if rest and not rest.startswith(":"):
            ep.problem = f"{text!r}: expected ':port' after ']'"
            return ep
    elif t.count(":") == 1:
        ep.host, port = t.split(":")
    elif ":" in t:
        ep.host, port = t, None  # a bare IPv6 literal
    else:
        ep.host, port = t, None
    if port is None or port == "":
        if port == "":
            ep.problem = f"{text!r}: empty port after ':'"
            return ep
        ep.port = default_port
    else:
        try:
            ep.port = int(port)
        except ValueError:
            ep.problem = f"{text!r}: port {port!r} is not a number"
            return ep
        if not 0 <= ep.port <= 65535:
            ep.problem = f"{text!r}: port {ep.port} is out of range (0-65535)"
            return ep
    if not ep.host:
        ep.problem = f"{text!r}: no host before ':'"
    return ep


@dataclass
class LaunchFacts:
    spec: LaunchSpec
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: Path = field(default_factory=Path.cwd)
    gpu_probe: object = None  # () -> int | None; tests pass their own (NVML is faked there)

    @property
    def args(self):
        return self.spec.torchrun

    @lazy
    def nnodes(self) -> tuple[int, int] | str:
        """(min, max), or the parse error torch would raise."""
        if self.args is None:
            return (1, 1)
        from ddpdoctor.runcmd import torchrun_parser
        ns, _ = torchrun_parser.load()
        try:
            return ns["parse_min_max_nnodes"](self.args.nnodes)
        except (ValueError, RuntimeError) as e:
            return f"--nnodes={self.args.nnodes!r}: {e}"

    @property
    def multi_node(self) -> bool:
        n = self.nnodes
        return isinstance(n, tuple) and n[1] > 1

    @lazy
    def endpoint(self) -> Endpoint | None:
        a = self.args
        if a is None or a.standalone:
            return None
        if a.rdzv_backend == "static" and not a.rdzv_endpoint:
            port = a.master_port if a.master_port is not None else 29500
            return split_endpoint(f"{a.master_addr}:{port}", None)
        return split_endpoint(a.rdzv_endpoint or "", C10D_DEFAULT_PORT if a.rdzv_backend == "c10d" else None) \
            if a.rdzv_endpoint else None

    @lazy
    def gpus(self) -> int | None:
        """GPUs this node's workers can use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES. None: unknown."""
        if self.gpu_probe is not None:
            n = self.gpu_probe()
        else:
            from ddpdoctor.probes import nvml
            snap = nvml.snapshot(names=False)
            n = len(snap.gpus) if snap.available else None
        if n is None:
            return None
        cvd = self.env.get("CUDA_VISIBLE_DEVICES")
        if cvd is not None:
            visible = [x for x in cvd.split(",") if x.strip() and x.strip() != "-1"]
            return min(n, len(visible))
        return n

    @property
    def script_path(self) -> Path | None:
        if not self.spec.script:
            return None
        p = Path(self.spec.script)
        chdir = self.spec.srun_opts.get("--chdir") or self.spec.srun_opts.get("-D")
        base = Path(chdir) if chdir else self.cwd
        return p if p.is_absolute() else base / p

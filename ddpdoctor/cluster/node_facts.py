"""This node's fingerprint: what must agree across nodes (versions, NCCL_/GLOO_ settings, key
variables) and the addresses and MTUs its peers reach it on."""
from __future__ import annotations

import platform
from typing import Mapping

from ddpdoctor import __version__

ENV_PREFIXES = ("NCCL_", "GLOO_")


def versions(gpus=None) -> dict[str, str]:
    """torch, NCCL, CUDA, NVIDIA driver, Python, ddpdoctor: what must agree across nodes."""
    v = {"python": platform.python_version(), "ddpdoctor": __version__}
    try:
        import torch
        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda or "none"
        try:
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:  # noqa: BLE001 - a CPU build has no NCCL
            v["nccl"] = "none"
    except ImportError:
        v["torch"] = "not installed"
    if gpus is not None:
        v["driver"] = gpus.driver if gpus.available else "none"
    return v


def settings(env: Mapping[str, str], nccl_conf: Mapping[str, str]) -> dict[str, str]:
    """NCCL_*/GLOO_* as the job would see them (the environment wins over /etc/nccl.conf)."""
    out = {k: f"{v} (nccl.conf)" for k, v in nccl_conf.items()}
    out.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIXES)})
    return dict(sorted(out.items()))


KEY_ENV_PREFIXES = ("TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "CUDA_")
KEY_ENV = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS", "PYTHONPATH")


def key_env(env: Mapping[str, str]) -> dict[str, str]:
    """Variables beyond NCCL_/GLOO_ that change what a rank loads or does (the fingerprint, DD720)."""
    return dict(sorted((k, v) for k, v in env.items() if k.startswith(KEY_ENV_PREFIXES) or k in KEY_ENV))


def local_addrs() -> list[str]:
    from ddpdoctor.probes.nics import list_nics
    return sorted({a for n in list_nics() if not n.is_loopback for a in n.ipv4 + n.ipv6})


def addr_mtus() -> dict[str, int]:
    """address -> MTU of the interface carrying it (DD719 compares the MTUs nodes reach each other on)."""
    from ddpdoctor.probes.nics import list_nics
    return {a: n.mtu for n in list_nics() if not n.is_loopback for a in n.ipv4 + n.ipv6}

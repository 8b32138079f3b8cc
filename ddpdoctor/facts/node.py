"""The node facts `ddpdoctor prolog` (and each node of `ddpdoctor cluster`) judges.

A NetworkFacts aimed at the job's first node (the usual rendezvous host: `MASTER_ADDR=$(scontrol
show hostnames | head -1)`), plus node facts: /dev/shm, RLIMIT_MEMLOCK, RDMA devices, NVML GPUs, and
what Slurm gave the job (SLURM_JOB_GPUS). Everything is read lazily, once, by whichever check asks
first, and nothing here calls scontrol or squeue.
"""
from __future__ import annotations

import os
import socket
from typing import Mapping

from ddpdoctor.memo import lazy
from ddpdoctor.facts.network import NetworkFacts
from ddpdoctor.probes import system
from ddpdoctor.siteconfig import SiteConfig, Thresholds

RENDEZVOUS_PORT = 29400  # only named in messages: the prolog never connects anywhere


def job_nodes(env: Mapping[str, str]) -> list[str]:
    """The job's nodes in Slurm's order, [] outside a job or when the list does not parse."""
    expr = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if not expr.strip():
        return []
    from ddpdoctor import hostlist
    from ddpdoctor.validate import BadInput
    try:
        return hostlist.expand(expr)
    except BadInput:
        return []


def job_gpus(env: Mapping[str, str]) -> tuple[str, ...]:
    """The GPUs Slurm gave the job on this node: NVML indices (or UUIDs), from the prolog's environment.

    Slurm sets SLURM_JOB_GPUS in the Prolog (the gres indices, which follow NVML's PCI order when
    gres.conf uses AutoDetect=nvml); CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL are fallbacks.
    """
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
        v = env.get(var)
        if v is not None and v.strip() and v.strip().lower() not in ("none", "nodevfiles"):
            return tuple(p.strip() for p in v.split(",") if p.strip())
    return ()


class PrologFacts(NetworkFacts):
    def __init__(self, env: Mapping[str, str] | None = None, config: SiteConfig | None = None, *,
                 hostname: str | None = None, shm_path: str = "/dev/shm",
                 infiniband: str = "/sys/class/infiniband", nccl_conf: tuple[str, ...] | None = None,
                 nodes: list[str] | None = None):
        raw = dict(os.environ if env is None else env)
        self.config = config or SiteConfig()
        self.nodes = list(nodes) if nodes is not None else job_nodes(raw)
        host = hostname or socket.gethostname()
        # NCCL reads its configuration files for variables the environment does not set: judge what
        # NCCL will see (the shared fact in facts/network.py; the prolog reads them for its own env
        # even when a test hands in `env`, unless it names the files)
        if nccl_conf is None:
            from ddpdoctor.facts.network import nccl_conf_paths
            nccl_conf = nccl_conf_paths(raw)
        super().__init__(self.nodes[0] if self.nodes else host, RENDEZVOUS_PORT, env=raw,
                         probe_timeout=self.config.probe_timeout, hostname=host, nccl_conf=nccl_conf)
        self.node_name = raw.get("SLURMD_NODENAME") or host
        self.job_id = raw.get("SLURM_JOB_ID", "")
        self._shm_path = shm_path
        self._infiniband = infiniband

    @property
    def thresholds(self) -> Thresholds:
        return self.config.thresholds

    @lazy
    def shm(self) -> system.ShmInfo:
        return system.shm_info(self._shm_path)

    @lazy
    def memlock(self) -> system.Limit:
        return system.memlock()

    @lazy
    def rdma(self) -> tuple[str, ...]:
        return system.rdma_devices(self._infiniband)

    @lazy
    def job_gpus(self) -> tuple[str, ...]:
        return job_gpus(self.raw_env)

    @lazy
    def gpus(self):
        from ddpdoctor.probes import nvml
        return nvml.snapshot(names=True)

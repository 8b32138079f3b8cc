"""What every rank runs, in order: the same list on every rank, so a phase index is comparable.

The plan depends only on the configuration and the backend the ranks agreed on, both identical
on every rank; a rank that computes another plan would issue other collectives and hang the group.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from ddpdoctor import units
from ddpdoctor.smoke.budget import SmokeBudget
from ddpdoctor.units import KiB, MiB, fmt_bytes

DEFAULT_MAX_SIZE = 64 * MiB
DEFAULT_TIMEOUT = 30.0
# What to run when torch is missing: pinned (an unpinned `pip install torch` pulls the newest CUDA
# wheels, gigabytes); the user's cluster may need the version matching its CUDA instead.
# the version pin does not choose CPU vs CUDA, the index does (PyPI's default on Linux x86-64 is CUDA)
TORCH_INSTALL = ("install the torch your job uses; without a GPU the CPU build: "
                 "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")

START, IMPORT, STORE, BACKEND, PREAMBLE, INIT = "start", "import torch", "store", "backend", "preamble", "init"
NVML_BEFORE, NVML_AFTER_INIT, NVML_AFTER_FIRST = "before init", "after init", "after first collective"
REPORT, DONE = "report", "done"
# Phases that wait for the slowest rank to start (importing torch, connecting to the store: in
# "backend" every rank waits until all have arrived) or run the user's own set-up code: they get
# the start-up allowance (SmokeBudget.startup). From "init" on, every rank is there and --timeout applies.
STARTUP_PHASES = (START, IMPORT, STORE, BACKEND, PREAMBLE)


@dataclasses.dataclass(frozen=True)
class SmokeConfig:
    """Options that shape the run; travels to every worker as JSON (DDPDOCTOR_SMOKE_CONFIG)."""

    timeout: float = DEFAULT_TIMEOUT
    max_size: int = DEFAULT_MAX_SIZE
    quick: bool = False
    backend: str = "auto"  # auto | gloo | nccl
    expect_busbw: float | None = None  # GB/s
    fix: bool = False
    fix_round: bool = False  # this run is the --fix re-run: set_device first, device_id, empty_cache
    preamble: str | None = None  # a Python file each rank runs before init_process_group
    verbose: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SmokeConfig":
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}})

    @property
    def budget(self) -> SmokeBudget:
        """Every time limit of the run, derived from --timeout (ddpdoctor/smoke/budget.py); not a field,
        so the config every rank is sent, and the report's `config`, stay as they were."""
        return SmokeBudget(self.timeout)

    def limit_for(self, phase: str) -> float:
        """Seconds a rank may stay in `phase` before it counts as stuck."""
        return self.budget.startup if phase in STARTUP_PHASES else self.budget.phase


def parse_size(text: str) -> int:
    """'64M', '64MiB', '4096', '1g' -> bytes (binary units, like nccl-tests' -e 64M)."""
    try:
        return units.parse_size(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 4096, 64K, 64M, 1G)") from None


def correctness_sizes(cfg: SmokeConfig) -> list[int]:
    """A few bytes up to --max-size, x64 apart: 4 B, 4 KiB, 256 KiB, 4 MiB, 64 MiB."""
    if cfg.quick:
        return [min(4 * KiB, cfg.max_size)]
    sizes, s = [], 4
    while s < cfg.max_size:
        sizes.append(s)
        s *= 64
    return sizes + [cfg.max_size]


def bandwidth_sizes(cfg: SmokeConfig) -> list[int]:
    """64 KiB up to --max-size, x16 apart (the range where bandwidth, not latency, dominates)."""
    if cfg.quick or cfg.fix_round:
        return []
    sizes, s = [], 64 * KiB
    while s < cfg.max_size:
        sizes.append(s)
        s *= 16
    return sizes + [cfg.max_size]


def bandwidth_iters(size: int) -> tuple[int, int]:
    """(warm-up, timed) iterations for one size: fixed by the size alone, so every rank agrees
    without a message (a count computed from local timings would differ and hang the group)."""
    iters = max(5, min(20, (256 * MiB) // max(size, 1)))
    return (1 if size >= 16 * MiB else 2), iters


def contribution(rank: int, world_size: int, dtype: str) -> tuple[int, int, bool]:
    """(what rank contributes to an all_reduce sum, the exact sum, whether every rank sends 1).

    rank+1 makes a missing or doubled rank show as a difference of exactly its value. bfloat16
    holds integers exactly only up to 256: past that sum, every rank sends 1 instead.
    """
    total = world_size * (world_size + 1) // 2
    if dtype == "bfloat16" and total > 256:
        return 1, world_size, True
    return rank + 1, total, False


def dtypes(backend: str) -> list[str]:
    # bf16 only where NCCL reduces it on the GPU; Gloo's CPU bf16 sum is not what training uses.
    return ["float32", "int64"] + (["bfloat16"] if backend == "nccl" else [])


@dataclasses.dataclass(frozen=True)
class Step:
    """One collective of the correctness pass."""

    op: str  # all_reduce | broadcast | barrier
    dtype: str = ""
    size: int = 0
    src: int = 0

    @property
    def phase(self) -> str:
        if self.op == "barrier":
            return "barrier"
        what = f"{self.op} {self.dtype} {fmt_bytes(self.size)}"
        return what + (f" from rank {self.src}" if self.op == "broadcast" else "")


def correctness_steps(cfg: SmokeConfig, backend: str, world_size: int) -> list[Step]:
    steps: list[Step] = []
    for k, size in enumerate(correctness_sizes(cfg)):
        for dt in dtypes(backend):
            steps.append(Step("all_reduce", dt, size))
            # the broadcast source moves with the size, so more than rank 0 gets to send
            steps.append(Step("broadcast", dt, size, src=k % max(world_size, 1)))
        steps.append(Step("barrier"))
    return steps


def phases(cfg: SmokeConfig, backend: str, world_size: int) -> list[str]:
    """Every phase name in order; a rank's progress is its index in this list."""
    out = [START, IMPORT, STORE, BACKEND]
    if cfg.preamble:
        out.append(PREAMBLE)
    out.append(INIT)
    out += [s.phase for s in correctness_steps(cfg, backend, world_size)]
    if backend == "nccl":
        out.append("gloo all_reduce")
    out += [f"bandwidth {fmt_bytes(s)}" for s in bandwidth_sizes(cfg)]
    out += [REPORT, DONE]
    return out


def to_dict(cfg: SmokeConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)

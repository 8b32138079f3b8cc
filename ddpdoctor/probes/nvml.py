"""GPU facts from NVML (the nvidia-ml-py package, module `pynvml`): which process holds how much
memory on which GPU. No judgement here: ddpdoctor/checks/gpu.py decides what is wrong.

NVML sees every process on the host, unlike CUDA, which sees only its own context: this is how
a rank's pid is found on a GPU that is not its own. pynvml is imported on first use (~10 ms), and
a host without the NVIDIA driver gives `available=False` with NVML's own reason.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any


_lock = threading.Lock()
_state: dict[str, Any] = {}  # "nvml": module, or "error": why NVML is unusable in this process


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    used: int | None  # bytes; None where NVML cannot tell (WDDM, some MIG set-ups)
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    total: int
    used: int
    processes: tuple[GpuProcess, ...] = ()


@dataclasses.dataclass(frozen=True)
class Snapshot:
    available: bool
    error: str = ""
    driver: str = ""
    gpus: tuple[Gpu, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _nvml():
    """The initialised pynvml module, or raise RuntimeError with NVML's reason."""
    with _lock:
        if "nvml" in _state:
            return _state["nvml"]
        if "error" in _state:
            raise RuntimeError(_state["error"])
        try:
            import pynvml
        except ImportError as e:
            _state["error"] = f"pynvml (nvidia-ml-py) is not installed: {e}"
            raise RuntimeError(_state["error"]) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            _state["error"] = f"NVML: {e}"
            raise RuntimeError(_state["error"]) from None
        _state["nvml"] = pynvml
        return pynvml


def _process_name(nvml, pid: int) -> str:
    try:
        import psutil
        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another container's pid, or gone: ask NVML
        pass
    try:
        name = nvml.nvmlSystemGetProcessName(pid)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001
        return ""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def snapshot(names: bool = True) -> Snapshot:
    """Every GPU on this host with its memory and compute processes (pid, bytes, name)."""
    try:
        nvml = _nvml()
    except RuntimeError as e:
        return Snapshot(False, str(e))
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            procs = []
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                procs.append(GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                                        _process_name(nvml, int(p.pid)) if names else ""))
            gpus.append(Gpu(i, _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h)),
                            int(mem.total), int(mem.used), tuple(procs)))
    except nvml.NVMLError as e:
        return Snapshot(False, f"NVML: {e}")
    return Snapshot(True, "", driver, tuple(gpus))

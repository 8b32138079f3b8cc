"""A fake `pynvml` (nvidia-ml-py) for hosts without an NVIDIA GPU: the NVML boundary only.

It mimics the real module's API exactly where ddpdoctor touches it (checked against
nvidia-ml-py 13's pynvml.py): `nvmlInit`, `nvmlShutdown`, `nvmlSystemGetDriverVersion` (str),
`nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex` (an opaque handle), `nvmlDeviceGetUUID` and
`nvmlDeviceGetName` (str, like the real @convertStrBytes wrappers), `nvmlDeviceGetMemoryInfo`
(an object with `total`, `free`, `used` in bytes), `nvmlDeviceGetComputeRunningProcesses` (objects
with `pid`, `usedGpuMemory` in bytes or None, `gpuInstanceId`, `computeInstanceId`),
`nvmlSystemGetProcessName`, and `NVMLError` whose constructor maps an error code to its subclass
(`NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)` is an `NVMLError_LibraryNotFound`) with `.value`.

What the fake host holds comes from a JSON file named by FAKE_PYNVML_STATE (so worker processes
started by a test see the same host), or from `configure(state)` in-process:

    {"driver": "550.54.15",
     "init_error": "LIBRARY_NOT_FOUND",            # optional: nvmlInit raises this
     "gpus": [{"uuid": "GPU-0000...", "name": "NVIDIA H100", "total_mib": 81559,
               "procs": [{"pid": 4121, "used_mib": 512},
                         {"pid": {"env": {"RANK": "1"}}, "used_mib": 300}]}]}

A pid given as {"env": {...}} is the real process whose environment holds those variables (and
FAKE_PYNVML_TAG when the state sets "tag"; "env_contains": {VAR: text} also requires VAR's value to
contain text), looked up in /proc on every call, as NVML reports live processes: a test can place a
real rank's real pid on a GPU before knowing the pid.
"""
from __future__ import annotations

import json
import os
import string
import sys

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: dict = {}

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return _STRINGS.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes():  # as pynvml._extractNVMLErrorsAsClasses does
    mod = sys.modules[__name__]
    for name in [n for n in dir(mod) if n.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        val = getattr(mod, name)

        def gen_new(v):
            def new(typ, *args):
                return NVMLError.__new__(typ, v)
            return new
        cls = type(cls_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(mod, cls_name, cls)
        NVMLError._valClassMapping[val] = cls


_make_error_classes()

MiB = 1 << 20
_configured: dict | None = None
_initialised = 0


def configure(state: dict | None) -> None:
    """In-process tests: set the fake host (None: read FAKE_PYNVML_STATE again)."""
    global _configured, _initialised
    _configured = state
    _initialised = 0


def _host() -> dict:
    if _configured is not None:
        return _configured
    path = os.environ.get("FAKE_PYNVML_STATE")
    if not path:
        return {"init_error": "LIBRARY_NOT_FOUND"}
    with open(path) as f:
        return json.load(f)


def _check_init():
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


class c_nvmlDevice_t:  # the real one is a ctypes pointer; only identity matters to callers
    def __init__(self, index):
        self._index = index

    def __repr__(self):
        return f"<fake nvmlDevice {self._index}>"


class c_nvmlMemory_t:
    def __init__(self, total, used):
        self.total, self.used, self.free = total, used, total - used


class _ProcessInfo:  # what nvmlStructToFriendlyObject gives for c_nvmlProcessInfo_v3_t
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF

    def __repr__(self):
        return f"{{'pid': {self.pid}, 'usedGpuMemory': {self.usedGpuMemory}}}"


def nvmlInit():
    global _initialised
    err = _host().get("init_error")
    if err:
        raise NVMLError(globals()[f"NVML_ERROR_{err}"])
    _initialised += 1


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    global _initialised
    _check_init()
    _initialised -= 1


def nvmlSystemGetDriverVersion():
    _check_init()
    return _host().get("driver", "550.54.15")


def nvmlDeviceGetCount():
    _check_init()
    return len(_host().get("gpus", []))


def _gpu(handle):
    _check_init()
    gpus = _host().get("gpus", [])
    if not isinstance(handle, c_nvmlDevice_t) or not 0 <= handle._index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpus[handle._index]


def nvmlDeviceGetHandleByIndex(index):
    _check_init()
    if not 0 <= index < len(_host().get("gpus", [])):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return c_nvmlDevice_t(index)


def nvmlDeviceGetUUID(handle):
    return _gpu(handle).get("uuid") or f"GPU-{handle._index:08x}-0000-0000-0000-000000000000"


def nvmlDeviceGetName(handle):
    return _gpu(handle).get("name", "NVIDIA Fake GPU")


def _pids_with_env(match: dict, tag: str | None, contains: dict | None = None) -> list[int]:
    want = [f"{k}={v}".encode() for k, v in match.items()]
    if tag:
        want.append(f"FAKE_PYNVML_TAG={tag}".encode())
    parts = [(f"{k}=".encode(), v.encode()) for k, v in (contains or {}).items()]
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(w in env for w in want) and all(
                any(e.startswith(k) and v in e for e in env) for k, v in parts):
            out.append(int(p))
    return out


def _procs(gpu: dict) -> list[_ProcessInfo]:
    out = []
    for p in gpu.get("procs", []):
        used = None if p.get("used_mib") is None else int(p["used_mib"] * MiB)
        pid = p["pid"]
        pids = (_pids_with_env(pid.get("env", {}), _host().get("tag"), pid.get("env_contains"))
                if isinstance(pid, dict) else [pid])
        out += [_ProcessInfo(pid, used) for pid in pids]
    return out


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _procs(_gpu(handle))


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _gpu(handle)
    used = sum(p.usedGpuMemory or 0 for p in _procs(gpu)) + int(gpu.get("base_mib", 0) * MiB)
    return c_nvmlMemory_t(int(gpu.get("total_mib", 81559) * MiB), used)


def nvmlSystemGetProcessName(pid):
    _check_init()
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        raise NVMLError(NVML_ERROR_NOT_FOUND) from None

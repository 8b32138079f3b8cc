"""The most common failure of all: one rank raises an ordinary exception in the job's own code, and the
launcher stops the others (issue 23). The log then holds that rank's traceback *and* the fallout on the
other ranks (a Gloo peer that closed its connection, a watchdog timeout, SIGTERM, exit code -15); the
headline must be the first rank's exception and the file:line in the job's code that raised it.

While the log streams by, `Tracker` keeps (bounded) per writer (host, rank) the last frame of the job's own
code, and the first exception lines that no catalog signature explains. `user_code_rule` then decides,
through the ranker's `add`, with the evidence and a note that is the headline.

What counts as the job's code: a traceback frame (CPython traceback.py: `File "{path}", line {n}, in {func}`)
whose file is not installed library code (site-packages, dist-packages, the interpreter's lib/pythonX.Y,
frozen modules). What counts as unexplained: an `...Error:` line on which no cause or symptom signature of
the catalog matched, that is not one of torch.distributed's own error types (those are the distributed
failures the catalog describes), and whose message is not about CUDA, NCCL, sockets or timeouts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ddpdoctor.catalog.model import CAUSE, CLUE
from ddpdoctor.logscan.quoted import Evidence

KEEP = 8            # unexplained exceptions kept (the first ones: the first failure is the cause)
NEAR = 200          # lines between the last frame of a traceback and its exception line
KEEP_WRITERS = 64   # writers (host, rank) whose last frame is kept
ID = "USER_CODE_EXCEPTION"
FRAMEWORK_ID = "TRAINING_FRAMEWORK_EXCEPTION"

# Installed code: site/dist-packages, the interpreter's lib, frozen modules, and the big frameworks' packages
# wherever they were copied (a vendored `.../accelerate/state.py` is still accelerate, not the job).
_LIBRARY = re.compile(r"(?i)[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<|\\lib\\[^\\]+\.py$|"
                      r"[/\\](?:torch|accelerate|transformers|deepspeed|lightning|pytorch_lightning|lightning_fabric|"
                      r"megatron|vllm|ray|trl|peft|datasets|colossalai|apex|fairseq|mmcv|mmengine|detectron2)[/\\]")
# The training frameworks whose own code raising is TRAINING_FRAMEWORK_EXCEPTION (the raising frame, the traceback's
# last, is in their package): the package directory names the framework.
_FRAMEWORK = re.compile(r"[/\\](?P<fw>accelerate|transformers|deepspeed|lightning|pytorch_lightning|lightning_fabric|"
                        r"megatron|trl|peft|colossalai|fairseq|mmengine|mmcv|detectron2|torchtune|llamafactory|verl|"
                        r"swift|nemo|ignite)[/\\]")
# torch.distributed's own exceptions and the launcher's wrappers: distributed failures or their echo.
# torch's own device, process-group and process-spawning code: a traceback that ends there is the set-up's
_SETUP = re.compile(r"[/\\]torch[/\\](?:cuda|distributed|multiprocessing)[/\\]")
_DIST_TYPES = re.compile(r"(?:ChildFailedError|SignalException|Rendezvous\w*Error|Dist\w*Error|ProcessRaisedException|"
                         r"ProcessExitedException|RayTaskError|ActorDiedError|OutOfMemoryError|CalledProcessError)$")
_DIST_WORDS = re.compile(r"(?i)\bcuda\b|nccl|cudnn|cublas|\bc10d\b|gloo|socket|timed? ?out|out of memory|connection|"
                         r"store|rendezvous|process group|init_process_group|device-side assert|illegal memory|"
                         r"killed by signal|\b(?:LOCAL_)?RANK\b|WORLD_SIZE|MASTER_(?:ADDR|PORT)")

# A tensor on the wrong device is the job's own code even though the message names CUDA devices: ATen's
# TORCH_CHECKs "Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!"
# (TensorIterator / native ops, torch 1.7+) and, before, "Expected object of device type cuda but got device type
# cpu for argument #1".
_PLACEMENT = re.compile(r"Expected all tensors to be on the same device|Expected object of device type \w+ but got")

# The distributed stack's own error text, as the line under an exception whose message ends in ':' (torch's
# C10D_NCCL_CHECK: "NCCL error in: <file>:<line>, <reason>, NCCL version ..."; C10_CUDA_CHECK: "CUDA error: ...";
# Gloo's enforce: "[enforce fail at .../gloo/..."), not any line that mentions CUDA.
_STACK_ERROR = re.compile(r"NCCL error in:|CUDA error: |\benforce fail at [^\n]*gloo|ProcessGroup\w*\.cpp:\d+")

# A paste that lost its newlines glues the next log records onto the exception line; a person reads each record
# header as a new line: a glog header (torch's C++ and elastic logs: `W0227 23:25:08.126000 227320 `), a rank
# prefix (`[rank3]:`, `[default0]:`).
_NEXT_RECORD = re.compile(r"\s(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{3,9} +\d+ |\[rank\d+\]:|\[[a-z]+\d+\]:)")


def _own_record(msg: str) -> str:
    m = _NEXT_RECORD.search(msg)
    return msg[:m.start()] if m else msg


@lru_cache(maxsize=4096)   # bounded: a log of tracebacks names few files, many times
def is_user_frame(path: str) -> bool:
    return path.endswith(".py") and not _LIBRARY.search(path)


@lru_cache(maxsize=4096)
def _setup_frame(path: str) -> bool:
    """_SETUP.search(path), kept per path (bounded like is_user_frame's): every frame of a traceback asks."""
    return _SETUP.search(path) is not None


@dataclass(slots=True)   # one per matched line: cheaper to make and to read
class Frame:
    file: str
    lineno: str
    func: str
    ev: Evidence
    source: str = ""   # the quoted source line under it (CPython prints it when the file is readable)


@dataclass
class Raised:
    exc: str
    msg: str
    ev: Evidence
    frame: Frame | None          # the last frame of the job's code in the traceback above it
    raiser: Frame | None = None  # the traceback's last frame (where it was raised), when it is near


@dataclass
class Tracker:
    raised: list[Raised] = field(default_factory=list)
    open_tb: dict[tuple, Frame] = field(default_factory=dict)   # writer -> last user frame, no exception yet
    _last_user: dict[tuple, Frame] = field(default_factory=dict)
    _into_setup: set = field(default_factory=set)   # writers whose open traceback reached torch's set-up code
    stops: int = 0              # "Sending process N closing signal SIGTERM"
    stop_ev: Evidence | None = None
    # line where the launcher forwarded SIGINT to its workers: torch elastic's agent stops its workers with the
    # signal it received itself (agent/server/api.py run: SignalException -> "Received %s death signal, shutting
    # down workers", _shutdown(e.sigval)) and with SIGTERM when a worker failed, so SIGINT means someone pressed
    # Ctrl-C (often on a hang); the KeyboardInterrupt tracebacks that follow are the teardown, not the job's error
    interrupted: int | None = None
    last_frame: dict[tuple, Frame] = field(default_factory=dict)   # writer -> last frame not yet followed by its error

    def frame(self, groups: dict, ev: Evidence) -> None:
        key = (ev.host, ev.rank)
        file, lineno, func = groups.get("file", ""), groups.get("lineno", "?"), groups.get("func", "?")
        if key in self.last_frame or len(self.last_frame) < KEEP_WRITERS:
            self.last_frame[key] = Frame(file, lineno, func, ev, groups.get("after", "").strip()[:300])
        if key in self.open_tb and _setup_frame(file):
            # the traceback went on into torch's device / process-group / spawn code: the distributed set-up
            # raised, not the job's code (a catalog mode's line was cut off with the traceback's end)
            self.open_tb.pop(key)
            self._into_setup.add(key)
        if is_user_frame(file):
            f = Frame(groups["file"], lineno, func, ev)
            self._last_user[key] = f
            if key not in self._into_setup:
                self.open_tb[key] = f

    def exception(self, groups: dict, ev: Evidence, explained: bool) -> None:
        key = (ev.host, ev.rank)
        raiser = self.last_frame.pop(key, None)
        if raiser is not None and not 0 <= ev.line - raiser.ev.line <= NEAR:
            raiser = None
        frame = self._last_user.get(key)
        self.open_tb.pop(key, None)
        self._into_setup.discard(key)
        if frame is not None and not 0 <= ev.line - frame.ev.line <= NEAR:
            frame = None
        exc, msg = groups.get("exc", ""), _own_record(groups.get("msg") or "").strip()
        if explained or len(self.raised) >= KEEP or _DIST_TYPES.search(exc) or (
                _DIST_WORDS.search(msg + " " + exc) and not _PLACEMENT.search(msg)):
            return
        self.raised.append(Raised(exc, msg, ev, frame, raiser))

    def next_line(self, ev: Evidence, explained: bool) -> None:
        """A message that ends in `:` (or is empty) goes on over the next line(s): CPython prints a multi-line
        message as it is, and c10's errors (`NCCL error in: ...`) put the cause under a first line that is only
        the failing call. When the line right under it is a catalog signature's or names the distributed stack,
        the exception is theirs, not the job's code."""
        if not self.raised:
            return
        last = self.raised[-1]
        if (last.ev.host, last.ev.rank) == (ev.host, ev.rank) and ev.line == last.ev.line + 1 \
                and (not last.msg or last.msg.endswith(":")) and (explained or _STACK_ERROR.search(ev.text)):
            self.raised.pop()

    def stop(self, ev: Evidence, sig: str = "") -> None:
        if sig == "SIGINT" and self.interrupted is None:
            self.interrupted = ev.line
        self.stops += 1
        if self.stop_ev is None:
            self.stop_ev = ev


def _where(f: Frame) -> str:
    return f"{f.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.lineno} in {f.func}"


def _who(ev: Evidence) -> str:
    parts = [f"rank {ev.rank}" if ev.rank is not None else "", f"on {ev.host}" if ev.host else ""]
    return " ".join(p for p in parts if p) or "a rank"


def user_code_rule(col, add, root_rank: int | None = None) -> None:
    """Name the first rank's exception in the job's code as the cause, the rest as its fallout.

    Without a frame of the job's code (or without the exception line) the log says less: then only when no
    catalog signature names a cause, and with low confidence."""
    t: Tracker = col.user
    sigs = [st.signature for st in col.sigs.values()]
    strong_cause = any(s.role == CAUSE and s.weight >= 0.5 for s in sigs)
    any_signal = any(s.role != CLUE for s in sigs)
    stopped = f"; the launcher then stopped {t.stops} other worker{'s' if t.stops != 1 else ''} (SIGTERM)" \
        if t.stops else ""
    cut = t.interrupted if t.interrupted is not None else float("inf")   # after it: the teardown's tracebacks
    raised = [r for r in t.raised if r.ev.line < cut]
    open_tb = {k: f for k, f in t.open_tb.items() if f.ev.line < cut}
    if raised:
        # torchrun's summary names the first failing rank: its exception first, else the first in the log
        pick = next((r for r in raised if root_rank is not None and r.ev.rank == root_rank), raised[0])
        msg = f": {pick.msg[:160]}" if pick.msg else ""
        evs = [pick.ev] + ([pick.frame.ev] if pick.frame else []) + ([t.stop_ev] if t.stop_ev else [])
        fw = _FRAMEWORK.search(pick.raiser.file) if pick.raiser is not None else None
        if fw and not is_user_frame(pick.raiser.file):
            # raised inside a training framework's own code: name the framework's line, and the job's call into it
            called = f" (called from {_where(pick.frame)})" if pick.frame else ""
            add(FRAMEWORK_ID, 0.7 if pick.msg else 0.45,
                f"{'' if pick.msg else 'low confidence: '}{_who(pick.ev)} raised {pick.exc} in {fw.group('fw')}'s code at "
                f"{_where(pick.raiser)}{called}{msg}{stopped}", [pick.ev, pick.raiser.ev] + evs[1:])
        elif pick.frame is not None:
            add(ID, 0.7, f"{_who(pick.ev)} raised {pick.exc} at {_where(pick.frame)}{msg}{stopped}", evs)
        elif not strong_cause and ("traceback" in col.facts or "torchrun_failed" in col.facts):
            # a bare `ValueError: ...` line alone is any program's error; a traceback or a failed worker makes
            # it a rank's
            add(ID, 0.45, f"low confidence: {_who(pick.ev)} raised {pick.exc}{msg}, and no frame of the job's own "
                          f"code is in the log to say where{stopped}; the full traceback of that rank decides", evs)
        return
    if open_tb and not any_signal:   # a traceback cut before its last line: its last frame names the place
        key, f = min(open_tb.items(), key=lambda kv: kv[1].ev.line)
        add(ID, 0.4, f"low confidence: {_who(f.ev)}'s traceback is cut before its exception line; its last frame in "
                     f"the job's code is {_where(f)}{stopped}. The traceback's last line decides", [f.ev])


# A traceback cut after the frame that raised (a paste that stops there, a log tail): torch functions whose errors
# are few enough that the raising call names the likely one (and, where the function makes several calls, the quoted
# source line under the frame names the call: _SOURCE). torch/cuda/__init__.py set_device raises
# `invalid device ordinal` when the index is >= the GPUs this process sees (torch._C._cuda_setDevice).
_CUT_AT = {("set_device", re.compile(r"[/\\]torch[/\\]cuda[/\\]__init__\.py$")): (
    "NPROC_EXCEEDS_GPUS", "torch.cuda.set_device", "`invalid device ordinal`: a local rank >= the GPUs this process sees "
    "(more processes per node than visible GPUs, or CUDA_VISIBLE_DEVICES narrower than --nproc_per_node)",
    "the traceback's last line, `nvidia-smi -L` and `echo $CUDA_VISIBLE_DEVICES` against --nproc_per_node"),
    # torch/distributed/rendezvous.py _env_rendezvous_handler._get_env_or_raise (torch 1.13 .. 2.13): it raises only
    # `environment variable RANK expected, but not set` (ValueError) for a variable a launcher sets.
    ("_get_env_or_raise", re.compile(r"[/\\]torch[/\\]distributed[/\\]rendezvous\.py$")): (
    "SCRIPT_WITHOUT_LAUNCHER", "the env:// rendezvous", "`environment variable RANK expected, but not set`: the script "
    "was started without torchrun (or another launcher) to set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
    "the traceback's last line, and how the script was started (torchrun / accelerate launch / srun)"),
    # distributed_c10d.py _new_process_group_helper building the NCCL backend (`backend_class = ProcessGroupNCCL(...)`,
    # `pg = ProcessGroupNCCL(...)` in 1.x): the constructor's first check (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
    # TORCH_CHECK, TORCH_CHECK_WITH(ValueError, ...) in 2.x) is `at::cuda::getNumGPUs() != 0`.
    ("_new_process_group_helper", re.compile(r"[/\\]torch[/\\]distributed[/\\]distributed_c10d\.py$")): (
    "TORCH_SEES_NO_GPU", "ProcessGroupNCCL's constructor", "`ProcessGroupNCCL is only supported with GPUs, no GPUs "
    "found!`: torch counts no CUDA device in this process (a CPU-only torch, CUDA_VISIBLE_DEVICES empty, or no driver "
    "in reach)", "the traceback's last line, and `python -c 'import torch; print(torch.cuda.device_count())'` run the "
    "way the job runs")}
# calls a frame's quoted source line must make for its _CUT_AT entry (functions that make several risky calls)
_SOURCE = {"_new_process_group_helper": re.compile(r"\bProcessGroupNCCL\(")}


def cut_traceback_rule(col, add) -> None:
    """A traceback that ends in a torch call whose usual error is known, without the error line: that error, with low
    confidence and what would decide; only when no line of the log names a cause itself."""
    if any(st.signature.role != CLUE and st.signature.weight >= 0.5 for st in col.sigs.values()):
        return
    for f in sorted(col.user.last_frame.values(), key=lambda f: f.ev.line):
        for (func, path), (fid, call, usual, decide) in _CUT_AT.items():
            if f.func == func and path.search(f.file) and (func not in _SOURCE or _SOURCE[func].search(f.source)):
                add(fid, 0.4, f"low confidence: {_who(f.ev)}'s traceback is cut right where {call} raises "
                              f"({_where(f)}); its usual error there is {usual}; what would decide: {decide}", [f.ev])
                return

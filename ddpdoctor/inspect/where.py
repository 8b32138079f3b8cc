"""Where a rank's main thread is: the torch.distributed call it is in and the user's line that made it.

Read from a py-spy stack (innermost frame first). The call is the outermost frame inside
torch/distributed/ (the public API the script called: `all_reduce`, `barrier`, `init_process_group`;
c10d's logging wrapper is skipped), the line is the first frame outside torch that called it.
This is description, not judgement: checks/inspect.py decides who is odd.
"""
from __future__ import annotations

from typing import Any

from ddpdoctor.probes.pyspy import Frame, Thread

COLLECTIVES = frozenset({
    "all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather", "all_gather_into_tensor",
    "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce", "gather",
    "scatter", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list", "send_object_list",
    "recv_object_list", "all_reduce_coalesced", "all_gather_coalesced", "wait", "new_group", "destroy_process_group",
})
_INIT = frozenset({"init_process_group", "rendezvous", "_create_c10d_store", "_store_based_barrier", "init_device_mesh"})
_WRAPPERS = ("c10d_logger.py",)


def _in_torch(f: Frame) -> bool:
    return f.file.startswith("torch/") or "/site-packages/torch/" in f.path


def _user_frame(frames: tuple[Frame, ...], start: int) -> Frame | None:
    for f in frames[start:]:
        if not _in_torch(f) and not f.file.startswith("<"):
            return f
    return None


def locate(thread: Thread | None) -> dict[str, Any]:
    """{"kind": collective|init|ddp|backward|dataloader|python|unknown, "call", "file", "line", "func"}."""
    if thread is None or not thread.frames:
        return {"kind": "unknown", "call": "", "file": "", "line": 0, "func": "", "active": False}
    frames = thread.frames
    api_i = None
    for i, f in enumerate(frames):
        if f.file.startswith("torch/distributed/") and not f.file.endswith(_WRAPPERS):
            api_i = i  # keep going: the outermost one is the API the script called
        elif api_i is not None and not f.file.startswith("torch/distributed/"):
            break
    kind, call, start = "python", "", 0
    if api_i is not None:
        call = frames[api_i].name.rsplit(".", 1)[-1]
        kind = "init" if call in _INIT or "rendezvous" in frames[api_i].file else (
            "collective" if call in COLLECTIVES else "distributed")
        start = api_i + 1
    else:
        for i, f in enumerate(frames):
            if f.file.startswith("torch/utils/data/"):
                kind, call, start = "dataloader", f.name, i + 1
            elif f.file.startswith("torch/nn/parallel/distributed"):
                kind, call, start = "ddp", f.name, i + 1
            elif f.file.startswith("torch/autograd/") and f.name in ("backward", "_engine_run_backward"):
                kind, call, start = "backward", "backward", i + 1
        if kind == "python":
            call = frames[0].name
    user = _user_frame(frames, start) or frames[min(start, len(frames) - 1)]
    return {"kind": kind, "call": call, "file": user.file, "line": user.line, "func": user.name,
            "active": thread.active}


def signature(thread: Thread | None) -> tuple:
    """The whole stack: equal in two samples means the thread did not move between them."""
    if thread is None:
        return ()
    return tuple((f.name, f.path, f.line) for f in thread.frames)

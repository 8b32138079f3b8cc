"""What an armed job left for `inspect` to read: flight-recorder dumps and watchdog lines in logs.

Read through ddpdoctor.flightrec's stable API (load_dir/analyze, watchdog.scan_many), never copied:
the verdicts come back as plain dicts (flightrec.render.to_dict) for checks/inspect.py (DD516, DD517).
The dump directory is the one the ranks were started with (TORCH_FR_DUMP_TEMP_FILE, or its old name
TORCH_NCCL_DEBUG_INFO_TEMP_FILE, which `ddpdoctor arm` and `prolog --task` point into a per-job
directory), or the one `--fr DIR` names.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


def dump_dirs(ranks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The directories the ranks' environments say dumps go to (torch appends the rank to the prefix)."""
    out: list[str] = []
    for r in ranks:
        env = r.get("env") or {}
        for k in PREFIX_VARS:
            if env.get(k):
                d = os.path.dirname(env[k]) or "."
                if d not in out:
                    out.append(d)
                break
    return out


def flight_recorder(dirs: Iterable[str]) -> dict[str, Any]:
    """{} when no directory is known; else the first directory's verdict, or why there is none."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec.render import to_dict

    dirs = list(dirs)
    if not dirs:
        return {}
    for d in dirs:
        if not os.path.isdir(d):
            continue
        try:
            dumps, skipped = flightrec.load_dir(d)
        except flightrec.BadDump as e:
            if any(os.scandir(d)):
                return {"dir": d, "error": str(e)}
            continue
        return {"dir": d, "verdict": to_dict(flightrec.analyze(dumps, skipped))}
    return {"dir": dirs[0], "empty": True}


def watchdog_lines(paths: Sequence[str]) -> dict[str, Any]:
    """The watchdog's per-rank lines of the logs the user named (--log), judged together."""
    from ddpdoctor.flightrec.render import to_dict
    from ddpdoctor.flightrec.watchdog import scan_many

    logs = []
    for p in paths:
        with open(p, "rb") as f:  # OSError: the caller turns it into one line, exit 2
            data = f.read(64 << 20)
        logs.append((os.path.basename(p), data.decode("utf-8", "replace").splitlines()))
    return {"logs": list(paths), **to_dict(scan_many(logs))}

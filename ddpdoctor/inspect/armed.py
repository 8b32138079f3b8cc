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

from ddpdoctor.readfile import read_prefix

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


def _loaded(dirs: Iterable[str]):
    """(dir, dumps, skipped, error) for each directory that exists, in order: `dumps` empty and
    `error` set when flightrec cannot read it (BadDump: no dump yet, or unreadable ones)."""
    from ddpdoctor import flightrec

    for d in dirs:
        if not os.path.isdir(d):
            continue
        try:
            dumps, skipped = flightrec.load_dir(d)
        except flightrec.BadDump as e:
            yield d, [], [], str(e)
            continue
        yield d, dumps, skipped, ""


def flight_recorder(dirs: Iterable[str]) -> dict[str, Any]:
    """{} when no directory is known; else the first directory's verdict, or why there is none."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec.render import to_dict

    dirs = list(dirs)
    if not dirs:
        return {}
    for d, dumps, skipped, error in _loaded(dirs):
        if error:
            if any(os.scandir(d)):
                return {"dir": d, "error": error}
            continue
        return {"dir": d, "verdict": to_dict(flightrec.analyze(dumps, skipped))}
    return {"dir": dirs[0], "empty": True}


def node_dumps(dirs: Iterable[str]) -> list[dict[str, Any]]:
    """This node's dumps as plain data (flightrec.dumps.to_wire) for `inspect --gather`: the first
    node judges every node's together, so dumps on node-local disks count too."""
    from ddpdoctor.flightrec.dumps import to_wire

    for d, dumps, _, error in _loaded(dirs):
        if not error:
            return [{**to_wire(x), "dir": d} for x in dumps]
    return []


def gathered_flight_recorder(nodes: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> dict[str, Any]:
    """The verdict over the dumps every node sent ((node, wire dumps) pairs), or {} when none did.
    A rank sent by two nodes (one shared directory seen twice) counts once."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec.dumps import parse
    from ddpdoctor.flightrec.render import to_dict

    dumps, skipped, seen, where = [], [], set(), []
    for node, wires in nodes:
        for w in wires:
            try:
                d = parse(w, f"{node}:{w.get('dir', '?')}", w.get("rank") if type(w.get("rank")) is int else None)
            except flightrec.BadDump as e:
                skipped.append(str(e))
                continue
            if d.rank in seen:
                continue
            seen.add(d.rank)
            dumps.append(d)
            if node not in where:
                where.append(node)
    if not dumps:
        return {}
    dumps.sort(key=lambda d: d.rank)
    return {"dir": f"dumps from {len(where)} node(s): {', '.join(where)}",
            "verdict": to_dict(flightrec.analyze(dumps, skipped))}


def watchdog_lines(paths: Sequence[str]) -> dict[str, Any]:
    """The watchdog's per-rank lines of the logs the user named (--log), judged together."""
    from ddpdoctor.flightrec.render import to_dict
    from ddpdoctor.flightrec.watchdog import scan_many

    logs = []
    for p in paths:
        data = read_prefix(p, 64 << 20)  # OSError (a FIFO, a device): the caller turns it into one line, exit 2
        logs.append((os.path.basename(p), data.decode("utf-8", "replace").splitlines()))
    return {"logs": list(paths), **to_dict(scan_many(logs))}

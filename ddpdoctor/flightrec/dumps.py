"""Read flight-recorder dump files (pickle or JSON) into RankDump.

Format (torch 2.4 - 2.13, dump `version` "2.x"): a dict with `version`, `pg_config`
({pg_name: {"name", "desc", "ranks": "[0, 1]"}}), `pg_status` ({pg_id: {"last_enqueued_collective", ...}}),
`comm_lib_version` and `entries`: one dict per recorded op with `pg_id`, `process_group` (name, desc),
`collective_seq_id`, `p2p_seq_id`, `is_p2p`, `profiling_name` ("nccl:all_reduce"), `input_sizes`,
`input_dtypes`, `output_sizes`, `state`, `record_id`, `frames` (see torch/csrc/distributed/c10d/
FlightRecorderDetail.hpp, `dump_entries`). Gloo dumps (torch 2.13) key pg_config by the group's name, which is
"" for the default group, and leave every entry's `state` at "scheduled": we key groups by the entries' `pg_id`
and never trust a Gloo state. The file is named `<TORCH_FR_DUMP_TEMP_FILE><global rank>`.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re

from ddpdoctor.flightrec import safe_pickle
from ddpdoctor.flightrec.entries import wire_entry
from ddpdoctor.flightrec.model import BadDump, RankDump
from ddpdoctor.readfile import read_limited

MAX_DUMP_BYTES = 512 * 1024 * 1024  # a 20k-entry buffer is a few MB; refuse anything absurd
# A dump is read only through typed accessors (entries.entry, wire_entry, _text, _ranks): each takes
# torch's types (int64, str, a list of shapes) and nothing else, so a value nested 10**5 deep, an
# integer of 5000 digits or a list shared by every entry through pickle memo references (600 KB that
# expand to gigabytes) is never walked, printed or copied.
MAX_RANKS = 1 << 17           # 131072: more ranks than any job has had
_INT64 = 1 << 64
_NOT_RANK_LIST = str.maketrans("", "", "0123456789, \t\n\r")  # deletes what "[0, 1]" may hold
_TRAILING_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")


def rank_from_name(path: str) -> int | None:
    """torch names a dump `<prefix><rank>` (FlightRecorder.cpp `DebugInfoWriter`): the trailing digits."""
    m = _TRAILING_RANK.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def _decode(data: bytes, path: str):
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data)
        except ValueError as e:
            raise BadDump(f"{path}: not valid JSON ({e.msg} at byte {e.pos}): truncated?") from None
    if not data:
        raise BadDump(f"{path}: empty file")
    if data[:1] != b"\x80":
        raise BadDump(f"{path}: not a flight-recorder dump (neither a pickle nor JSON)")
    try:
        return safe_pickle.loads(data)
    except safe_pickle.UnsafePickle as e:
        raise BadDump(f"{path}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, TypeError, KeyError,
            AttributeError, RecursionError, MemoryError, OverflowError) as e:
        raise BadDump(f"{path}: unreadable pickle ({type(e).__name__}: {str(e)[:80]}): truncated?") from None


def _text(v, limit: int = 200) -> str:
    """A string or an int64 of a dump as text ('' for anything else: str() of a nested value recurses)."""
    if type(v) is str:
        return v[:limit]
    return str(v) if type(v) is int and -_INT64 < v < _INT64 else ""


def _scalar(v) -> bool:
    t = type(v)
    return (t is int and -_INT64 < v < _INT64) or t is bool or v is None or (t is str and len(v) <= 200) \
        or (t is float and math.isfinite(v))


def _ranks(text) -> tuple:
    # pg_config ranks is a string "[0, 1, 2]" (str(vector)); JSON dumps may hold a list. Parsed by
    # hand: ast.literal_eval builds a whole syntax tree (gigabytes for a 20 MB string) to read ints.
    if isinstance(text, (list, tuple)):
        return tuple(dict.fromkeys(r for r in text[:MAX_RANKS] if type(r) is int and 0 <= r < _INT64))
    if not isinstance(text, str):
        return ()
    s = text.strip()
    if len(s) < 2 or s[0] not in "[(" or s[-1] not in "])" or len(s) > MAX_RANKS * 12:
        return ()
    body = s[1:-1].strip().rstrip(",")
    if not body or body.translate(_NOT_RANK_LIST):  # (no regex: sre keeps state per repetition, O(n) memory)
        return ()
    try:
        ranks = tuple(dict.fromkeys(map(int, body.split(","))))  # int() takes the spaces; a rank listed once
    except ValueError:  # "1 2", ",,", 5000 digits
        return ()
    return ranks if len(ranks) <= MAX_RANKS and max(ranks) < _INT64 else ()


def parse(obj, path: str, rank: int | None = None) -> RankDump:
    """Turn a decoded dump (dict) into a RankDump; BadDump when it is not one."""
    if not isinstance(obj, dict) or "entries" not in obj:
        raise BadDump(f"{path}: not a flight-recorder dump (no 'entries')")
    raw = obj.get("entries")
    if not isinstance(raw, list):
        raise BadDump(f"{path}: not a flight-recorder dump ('entries' is not a list)")
    names = {n for e in raw if type(e) is dict and type(n := e.get("profiling_name")) is str}
    backends = {n.split(":", 1)[0] for n in names if isinstance(n, str) and ":" in n}
    backend = backends.pop() if len(backends) == 1 else ("mixed" if backends else "")
    pg_ranks = {}
    cfgs = obj.get("pg_config")
    for key, cfg in (cfgs.items() if isinstance(cfgs, dict) else ()):
        if isinstance(cfg, dict) and type(key) in (str, int):
            pg_ranks[_text(key)] = _ranks(cfg.get("ranks"))
    sts = obj.get("pg_status")
    status = {_text(k): {_text(kk): vv for kk, vv in v.items() if type(kk) is str and _scalar(vv)}
              for k, v in (sts.items() if isinstance(sts, dict) else ()) if isinstance(v, dict) and type(k) in (str, int)}
    if rank is None:
        rank = rank_from_name(path)
    if rank is None:
        raise BadDump(f"{path}: cannot tell which rank wrote it (torch names dumps <prefix><rank>)")
    return RankDump(rank=rank, path=path, backend=backend, version=_text(obj.get("version", "")),
                    comm_lib_version=_text(obj.get("comm_lib_version", "")), pg_ranks=pg_ranks,
                    pg_status=status, raw_entries=tuple(raw))


def to_wire(d: RankDump, last: int = 500) -> dict:
    """A dump as plain JSON data that `parse` reads back (the last `last` entries): how `inspect
    --gather` carries each node's dumps to the first node, which judges them together."""
    return {"rank": d.rank, "version": d.version, "comm_lib_version": d.comm_lib_version,
            "pg_config": {pg: {"ranks": list(r)} for pg, r in d.pg_ranks.items()}, "pg_status": d.pg_status,
            "entries": [w for w in map(wire_entry, d.raw_entries[-last:]) if w] if last else []}


def load_file(path: str, rank: int | None = None) -> RankDump:
    """Read one dump file. Raises BadDump (one line) on anything that is not a readable dump."""
    try:
        data = read_limited(path, MAX_DUMP_BYTES)  # a FIFO, a device, a link to /proc/kmsg: refused, never waited on
    except OSError as e:
        raise BadDump(f"cannot read {path}: {e.strerror or e}") from None
    return parse(_decode(data, path), path, rank)


def load_dir(path: str) -> tuple[list[RankDump], list[str]]:
    """Read every dump in a directory: (dumps sorted by rank, one note per file skipped).

    Raises BadDump when the directory is unreadable, holds no readable dump, or mixes jobs (two dumps
    claim the same rank, or the dumps disagree on the ranks of the world).
    """
    if os.path.isfile(path):
        return [load_file(path)], []
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise BadDump(f"cannot read directory {path}: {e.strerror or e}") from None
    dumps, skipped = [], []
    for name in names:
        full = os.path.join(path, name)
        if not os.path.isfile(full) or name.startswith("."):
            continue
        try:
            dumps.append(load_file(full))
        except BadDump as e:
            if rank_from_name(full) is not None:  # a README or a log beside the dumps is not worth a note
                skipped.append(str(e))
    if not dumps:
        why = f" ({skipped[0]})" if len(skipped) == 1 else (f" ({len(skipped)} files unreadable)" if skipped else "")
        raise BadDump(f"{path}: no flight-recorder dump found{why}; enable them with TORCH_FR_BUFFER_SIZE=2000 "
                      f"TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=<dir>/fr_rank")
    by_rank: dict[int, RankDump] = {}
    for d in dumps:
        if d.rank in by_rank:
            raise BadDump(f"{path}: two dumps for rank {d.rank} ({os.path.basename(by_rank[d.rank].path)}, "
                          f"{os.path.basename(d.path)}): mixed jobs? give one job's dumps")
        by_rank[d.rank] = d
    worlds = {d.world for d in dumps if d.world}
    if len(worlds) > 1:
        sizes = sorted({len(w) for w in worlds})
        raise BadDump(f"{path}: dumps disagree on the ranks of the job (world sizes {sizes}): mixed jobs? "
                      f"give one job's dumps")
    return sorted(dumps, key=lambda d: d.rank), skipped


def job_dirs(path: str) -> list[str]:
    """The per-job folders below `path` that hold dumps (`ddpdoctor arm --dir D` writes D/<job id>/
    fr_rank_<N>), newest dump first; [] when `path` itself holds dumps or is not a directory."""
    def dump_files(d: str) -> list[str]:
        try:
            return [os.path.join(d, n) for n in os.listdir(d) if not n.startswith(".")
                    and rank_from_name(n) is not None and os.path.isfile(os.path.join(d, n))]
        except OSError:
            return []
    if not os.path.isdir(path) or dump_files(path):
        return []
    found = []
    try:
        subs = [os.path.join(path, n) for n in os.listdir(path) if not n.startswith(".")]
    except OSError:
        return []
    for sub in subs:
        files = dump_files(sub) if os.path.isdir(sub) else []
        if files:
            found.append((max(_mtime(f) for f in files), sub))
    return [d for _, d in sorted(found, reverse=True)]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0

"""One flight-recorder entry: torch's entry dict (torch/csrc/distributed/c10d/FlightRecorder*.hpp,
`entries` of a dump) read into an Entry, and the per-group index of collectives by sequence id."""
from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """One collective (or p2p op) as one rank recorded it (a NamedTuple: 128k of them load in a blink).

    `seq` is the collective sequence id within its process group (`collective_seq_id`, or `p2p_seq_id` when
    `is_p2p`); `op` the profiling name without its backend prefix ("all_reduce"); `state` is what the dump
    says ("scheduled" / "started" / "completed") and is NOT trusted for Gloo, which never updates it.
    """
    pg: str                       # process-group id as a string ("0")
    pg_desc: str                  # "default_pg", or "" when unknown
    seq: int
    op: str
    is_p2p: bool
    input_sizes: tuple            # tuple of shapes, each a tuple of ints
    output_sizes: tuple
    dtypes: tuple                 # input dtypes ("Float", ...)
    state: str
    record_id: int = -1
    frames: tuple = ()            # torch's frame dicts {"filename", "line", "name"}, innermost first

    def frame_lines(self) -> list:
        """The recorded Python stack as "file:line name" strings."""
        return [f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}"
                for f in self.frames if isinstance(f, dict)]


def _shape_list(v) -> tuple:
    if not isinstance(v, (list, tuple)):
        return ()
    try:  # the common case, fast: a list of lists of ints (128k entries for 64 ranks x 2000)
        t = tuple(map(tuple, v))
        hash(t)
        return t
    except TypeError:
        return tuple(tuple(x for x in s if isinstance(x, int)) if isinstance(s, (list, tuple)) else ()
                     for s in v)


def _int(v, default=-1) -> int:
    return v if type(v) is int else default


def entry(e: dict, names: dict) -> Entry | None:
    """One of torch's entry dicts as an Entry; None when it lacks a group or a sequence id."""
    if type(e) is not dict:
        return None
    get = e.get
    name = get("profiling_name") or ""
    op = names.get(name)
    if op is None:  # "nccl:all_reduce" -> "all_reduce", once per distinct name
        name = str(name)
        op = names[name] = name.split(":", 1)[1] if ":" in name else name
    pgt = get("process_group")
    desc = str(pgt[1]) if isinstance(pgt, (list, tuple)) and len(pgt) > 1 else ""
    pg = get("pg_id")
    if pg is None and isinstance(pgt, (list, tuple)) and pgt:
        pg = pgt[0]
    is_p2p = bool(get("is_p2p"))
    seq = _int(get("p2p_seq_id") if is_p2p else get("collective_seq_id"))
    if seq < 0 or pg is None:
        return None
    frames = get("frames")
    dtypes = get("input_dtypes") or ()
    return Entry(str(pg), desc, seq, op, is_p2p, _shape_list(get("input_sizes")), _shape_list(get("output_sizes")),
                 tuple(dtypes) if all(type(d) is str for d in dtypes) else tuple(map(str, dtypes)),
                 str(get("state") or ""), _int(get("record_id")), tuple(frames) if isinstance(frames, list) else ())


def _pg_of(e: dict):
    pg = e.get("pg_id")
    if pg is None:
        pgt = e.get("process_group")
        if isinstance(pgt, (list, tuple)) and pgt:
            pg = pgt[0]
    return pg


def index(raw) -> dict:
    """pg id (str) -> collective seq id -> entry dict. A tight loop: it runs over every entry of every rank."""
    out: dict = {}
    keys: dict = {}
    for e in raw:
        if type(e) is not dict or e.get("is_p2p"):
            continue
        seq = e.get("collective_seq_id")
        if type(seq) is not int or seq < 0:
            continue
        pg = e.get("pg_id")
        key = keys.get(pg)
        if key is None:
            pg = _pg_of(e)
            if pg is None or isinstance(pg, (list, dict)):
                continue
            key = keys[e.get("pg_id")] = str(pg)
        d = out.get(key)
        if d is None:
            d = out[key] = {}
        d[seq] = e
    return out

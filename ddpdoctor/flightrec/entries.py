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


MAX_TENSORS = 1 << 17   # tensors of one collective (a list all_gather has world-size of them)
MAX_DIMS = 64           # torch's limit on a tensor's dimensions
MAX_FRAMES = 256
_INT64 = 1 << 64


def _shape_list(v) -> tuple:
    """A collective's tensor shapes: each a tuple of ints. A shape list that is not that (floats,
    nesting, more tensors or dimensions than torch has) reads as () "unknown": never materialised,
    since one list shared by every entry through pickle memo references is gigabytes once copied."""
    if not isinstance(v, (list, tuple)) or len(v) > MAX_TENSORS:
        return ()
    if not all(isinstance(s, (list, tuple)) and len(s) <= MAX_DIMS for s in v):
        return ()
    try:  # the common case, fast: a list of lists of ints (128k entries for 64 ranks x 2000)
        t = tuple(map(tuple, v))
        if all(type(x) is int for s in t for x in s):  # a float (NaN, inf) or a bool is no dimension
            return t
    except TypeError:
        pass
    return ()


def _int(v, default=-1) -> int:
    return v if type(v) is int and -_INT64 < v < _INT64 else default


def _str(v) -> str:
    return v[:200] if type(v) is str else (str(v) if type(v) is int and -_INT64 < v < _INT64 else "")


def _frames(v) -> tuple:
    """torch's frame dicts, each with only its str / int values (frame_lines formats them)."""
    if not isinstance(v, list):
        return ()
    return tuple({k: x for k, x in f.items() if type(k) is str and (type(x) is str or type(x) is int)}
                 for f in v[:MAX_FRAMES] if type(f) is dict)


def entry(e: dict, names: dict) -> Entry | None:
    """One of torch's entry dicts as an Entry; None when it lacks a group or a sequence id."""
    if type(e) is not dict:
        return None
    get = e.get
    name = get("profiling_name") or ""
    if type(name) is not str:
        name = ""
    op = names.get(name)
    if op is None:  # "nccl:all_reduce" -> "all_reduce", once per distinct name
        op = names[name] = name.split(":", 1)[1] if ":" in name else name
    pgt = get("process_group")
    desc = _str(pgt[1]) if isinstance(pgt, (list, tuple)) and len(pgt) > 1 else ""
    pg = _pg_of(e)
    is_p2p = bool(get("is_p2p"))
    seq = _int(get("p2p_seq_id") if is_p2p else get("collective_seq_id"))  # -1 when not an int64
    if seq < 0 or pg is None:
        return None
    dtypes = get("input_dtypes")
    dtypes = tuple(d if type(d) is str else "?" for d in dtypes[:MAX_TENSORS]) if isinstance(dtypes, (list, tuple)) else ()
    return Entry(str(pg), desc, seq, op, is_p2p, _shape_list(get("input_sizes")), _shape_list(get("output_sizes")),
                 dtypes, _str(get("state")), _int(get("record_id")), _frames(get("frames")))


def _pg_of(e: dict):
    """The entry's process-group id (an int or a str), None when it names none."""
    pg = e.get("pg_id")
    if pg is None:
        pgt = e.get("process_group")
        if isinstance(pgt, (list, tuple)) and pgt:
            pg = pgt[0]
    return _str(pg) if type(pg) in (int, str) else None


_WIRE_INTS = ("pg_id", "collective_seq_id", "p2p_seq_id", "record_id", "op_id", "time_created_ns", "timeout_ms")
_WIRE_STRS = ("profiling_name", "state", "thread_name", "thread_id")


def wire_entry(e) -> dict | None:
    """One entry as plain JSON data holding what `entry` and `index` read, each value of torch's
    type: how `inspect --gather` carries entries (a raw dict could hold anything json.dumps chokes on)."""
    if type(e) is not dict:
        return None
    out: dict = {k: e[k] for k in _WIRE_INTS if type(e.get(k)) is int and -_INT64 < e[k] < _INT64}
    out.update({k: _str(e[k]) for k in _WIRE_STRS if type(e.get(k)) is str})
    out["is_p2p"] = bool(e.get("is_p2p") is True)
    pgt = e.get("process_group")
    if isinstance(pgt, (list, tuple)):
        out["process_group"] = [_str(x) for x in pgt[:2]]
    for k in ("input_sizes", "output_sizes"):
        out[k] = [list(s) for s in _shape_list(e.get(k))]
    d = e.get("input_dtypes")
    out["input_dtypes"] = [x if type(x) is str else "?" for x in d[:MAX_TENSORS]] if isinstance(d, (list, tuple)) else []
    out["frames"] = list(_frames(e.get("frames")))
    return out


def index(raw) -> dict:
    """pg id (str) -> collective seq id -> entry dict. A tight loop: it runs over every entry of every rank."""
    out: dict = {}
    keys: dict = {}
    for e in raw:
        if type(e) is not dict or e.get("is_p2p"):
            continue
        seq = e.get("collective_seq_id")
        if type(seq) is not int or not 0 <= seq < _INT64:
            continue
        pg = e.get("pg_id")
        key = keys.get(pg) if type(pg) in (int, str, type(None)) else None  # an unhashable id is no key
        if key is None:
            key = _pg_of(e)
            if key is None:
                continue
            if type(pg) in (int, str):
                keys[pg] = key
        d = out.get(key)
        if d is None:
            d = out[key] = {}
        d[seq] = e
    return out

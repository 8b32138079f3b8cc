"""The site configuration: `/etc/ddpdoctor.toml` (or `--config FILE`), the way NHC sites tune checks.

    [prolog]
    select = []                 # run only checks whose id starts with one of these (default: all prolog checks)
    ignore = ["DD304"]          # never run these
    warn_only = ["DD303"]       # run and log them, but never fail the node for them
    deadline = 5.0              # seconds for everything, Python start-up included
    probe_timeout = 2.0         # seconds one name lookup may take (above DD207's 1 s "slow" mark:
                                # a slow answer is a warning, not a timeout)
    drain = false               # on a fault, also set the drain reason with scontrol
    drain_on_timeout = false    # a check that overruns, or a resolver that does not answer within
                                # probe_timeout, counts as a node fault
    report_file = ""            # JSON report for audit; %n = node name, %j = job id

    [thresholds]
    min_dev_shm = "1GiB"        # K/M/G/T are powers of 1024; a plain integer is bytes
    min_memlock = "unlimited"   # RLIMIT_MEMLOCK required where RDMA devices exist
    max_idle_gpu_memory = "1GiB"  # memory a GPU may hold before the job starts
    expected_gpus = 0           # GPUs this node must show (0: only check those the job was given)

    [task]
    variables = ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]   # what the task prolog may export
    arm = true              # also export `ddpdoctor arm`'s flight-recorder variables (docs/inspect.md)
    fr_entries = 2000       # flight-recorder entries per process group
    fr_dir = "/tmp/ddpdoctor-fr"   # where per-job dump directories go (default $TMPDIR/ddpdoctor-fr-<uid>)
    pg_timeout = 10         # minutes: print init_process_group(timeout=...) advice in each task's output

    [checks]
    silenced = ["DD101.refused"]  # findings never reported, by any command (a finding's id: check id + kind,
                                  # in the JSON report and `ddpdoctor explain DDnnn`); as Django's
                                  # SILENCED_SYSTEM_CHECKS. The prolog's ignore/warn_only act on whole checks.

Unknown sections or keys are an error (a typo must not silently leave a check on), reported as a
usage error: the prolog logs it and does not fail the node.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from ddpdoctor import units
from ddpdoctor.model import KIND_RE
from ddpdoctor.readfile import read_limited
from ddpdoctor.units import GiB
from ddpdoctor.validate import BadInput

DEFAULT_PATH = "/etc/ddpdoctor.toml"
TASK_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


class ConfigError(BadInput):
    """The site configuration cannot be used; the message names the file and the key."""


def parse_size(value: Any, what: str, *, allow_unlimited: bool = False) -> int | None:
    """`"64M"`, `"1GiB"`, `1073741824` -> bytes; `"unlimited"` -> None where allowed."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{what}: {value} is negative")
        return value
    if isinstance(value, str):
        s = value.strip().lower()
        if s in ("unlimited", "infinity") and allow_unlimited:
            return None
        try:
            return units.parse_size(s)
        except OverflowError:
            raise ConfigError(f"{what}: {value!r} is too large") from None
        except ValueError:
            pass
    raise ConfigError(f"{what}: {value!r} is not a size like \"64M\" or \"1GiB\""
                      + (" or \"unlimited\"" if allow_unlimited else ""))


@dataclass(frozen=True)
class Thresholds:
    min_dev_shm: int = 1 * GiB
    min_memlock: int | None = None  # None: unlimited
    max_idle_gpu_memory: int = 1 * GiB
    expected_gpus: int = 0


@dataclass(frozen=True)
class SiteConfig:
    path: str | None = None  # the file it came from; None: built-in defaults
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    warn_only: tuple[str, ...] = ()
    deadline: float = 5.0
    probe_timeout: float = 2.0
    drain: bool = False
    drain_on_timeout: bool = False
    report_file: str = ""
    thresholds: Thresholds = field(default_factory=Thresholds)
    task_variables: tuple[str, ...] = TASK_VARIABLES
    task_arm: bool = True
    task_fr_entries: int = 2000
    task_fr_dir: str = ""
    task_pg_timeout: float | None = None
    silenced: frozenset[str] = frozenset()  # finding ids, "DD101.refused"

    def is_warn_only(self, check_id: str) -> bool:
        return check_id.upper().startswith(tuple(p.upper() for p in self.warn_only)) if self.warn_only else False


_PROLOG_KEYS = {"select", "ignore", "warn_only", "deadline", "probe_timeout", "drain", "drain_on_timeout", "report_file"}
_TASK_KEYS = {"variables", "arm", "fr_entries", "fr_dir", "pg_timeout"}
_THRESHOLD_KEYS = {f.name for f in dataclasses.fields(Thresholds)}
_ID_PREFIX = re.compile(r"^DD\d{0,3}$", re.I)
_FINDING_ID = re.compile(rf"^(D[DL]\d{{3}})\.({KIND_RE})$", re.I)  # a finding's id: check id + kind


def _ids(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: want a list of check ids or prefixes, like [\"DD6\", \"DD702\"]")
    bad = [v for v in value if not _ID_PREFIX.match(v.strip())]
    if bad:
        raise ConfigError(f"{what}: {', '.join(map(repr, bad))} is not a check id or prefix (DD + up to 3 digits)")
    return tuple(v.strip().upper() for v in value)


def _number(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"{what}: want a number of seconds in {lo:g}-{hi:g}, not {value!r}")
    return float(value)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{what}: want true or false, not {value!r}")
    return value


def from_mapping(data: Mapping[str, Any], path: str | None = None) -> SiteConfig:
    where = path or "config"
    unknown = set(data) - {"prolog", "thresholds", "task", "checks"}
    if unknown:
        raise ConfigError(f"{where}: unknown section [{sorted(unknown)[0]}] (known: [prolog], [thresholds], [task], [checks])")
    kw: dict[str, Any] = {"path": path}
    pro = data.get("prolog", {})
    if not isinstance(pro, Mapping):
        raise ConfigError(f"{where}: [prolog] must be a table")
    for key in set(pro) - _PROLOG_KEYS:
        raise ConfigError(f"{where}: unknown key prolog.{key} (known: {', '.join(sorted(_PROLOG_KEYS))})")
    for key in ("select", "ignore", "warn_only"):
        if key in pro:
            kw[key] = _ids(pro[key], f"{where}: prolog.{key}")
    if "deadline" in pro:
        kw["deadline"] = _number(pro["deadline"], f"{where}: prolog.deadline", 0.5, 600)
    if "probe_timeout" in pro:
        kw["probe_timeout"] = _number(pro["probe_timeout"], f"{where}: prolog.probe_timeout", 0.05, 60)
    for key in ("drain", "drain_on_timeout"):
        if key in pro:
            kw[key] = _bool(pro[key], f"{where}: prolog.{key}")
    if "report_file" in pro:
        if not isinstance(pro["report_file"], str):
            raise ConfigError(f"{where}: prolog.report_file: want a path")
        kw["report_file"] = pro["report_file"]
    th = data.get("thresholds", {})
    if not isinstance(th, Mapping):
        raise ConfigError(f"{where}: [thresholds] must be a table")
    for key in set(th) - _THRESHOLD_KEYS:
        raise ConfigError(f"{where}: unknown key thresholds.{key} (known: {', '.join(sorted(_THRESHOLD_KEYS))})")
    tkw: dict[str, Any] = {}
    if "min_dev_shm" in th:
        tkw["min_dev_shm"] = parse_size(th["min_dev_shm"], f"{where}: thresholds.min_dev_shm")
    if "min_memlock" in th:
        tkw["min_memlock"] = parse_size(th["min_memlock"], f"{where}: thresholds.min_memlock", allow_unlimited=True)
    if "max_idle_gpu_memory" in th:
        tkw["max_idle_gpu_memory"] = parse_size(th["max_idle_gpu_memory"], f"{where}: thresholds.max_idle_gpu_memory")
    if "expected_gpus" in th:
        v = th["expected_gpus"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1024:
            raise ConfigError(f"{where}: thresholds.expected_gpus: want an integer 0-1024, not {v!r}")
        tkw["expected_gpus"] = v
    kw["thresholds"] = Thresholds(**tkw)
    task = data.get("task", {})
    if not isinstance(task, Mapping):
        raise ConfigError(f"{where}: [task] must be a table")
    for key in set(task) - _TASK_KEYS:
        raise ConfigError(f"{where}: unknown key task.{key} (known: {', '.join(sorted(_TASK_KEYS))})")
    if "arm" in task:
        kw["task_arm"] = _bool(task["arm"], f"{where}: task.arm")
    if "fr_entries" in task:
        v = task["fr_entries"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1_000_000:
            raise ConfigError(f"{where}: task.fr_entries: want an integer 1-1000000, not {v!r}")
        kw["task_fr_entries"] = v
    if "fr_dir" in task:
        if not isinstance(task["fr_dir"], str) or not task["fr_dir"].startswith("/"):
            raise ConfigError(f"{where}: task.fr_dir: want an absolute path")
        kw["task_fr_dir"] = task["fr_dir"]
    if "pg_timeout" in task:
        v = task["pg_timeout"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1440:
            raise ConfigError(f"{where}: task.pg_timeout: want minutes in (0, 1440], not {v!r}")
        kw["task_pg_timeout"] = float(v)
    if "variables" in task:
        v = task["variables"]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or not set(v) <= set(TASK_VARIABLES):
            raise ConfigError(f"{where}: task.variables: want a list drawn from {list(TASK_VARIABLES)}")
        kw["task_variables"] = tuple(v)
    chk = data.get("checks", {})
    if not isinstance(chk, Mapping):
        raise ConfigError(f"{where}: [checks] must be a table")
    for key in set(chk) - {"silenced"}:
        raise ConfigError(f"{where}: unknown key checks.{key} (known: silenced)")
    if "silenced" in chk:
        kw["silenced"] = _finding_ids(chk["silenced"], f"{where}: checks.silenced")
    return SiteConfig(**kw)


def _finding_ids(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: want a list of finding ids, like [\"DD101.refused\"]")
    out = set()
    for v in value:
        m = _FINDING_ID.match(v.strip())
        if not m:
            raise ConfigError(f"{what}: {v!r} is not a finding id (a check id, a dot and a kind: \"DD101.refused\"; "
                              "a whole check is prolog.ignore or --ignore)")
        out.add(f"{m.group(1).upper()}.{m.group(2).lower()}")
    return frozenset(out)


def silenced() -> frozenset[str]:
    """The finding ids the site silences for every command (the default configuration file's).

    A broken file does not stop a user's diagnosis on a node they do not administer: one warning on
    stderr, nothing silenced (the prolog reads the same file itself and reports the error its way)."""
    try:
        return load().silenced
    except ConfigError as e:
        try:
            sys.stderr.write(f"ddpdoctor: warning: {e}; no finding silenced\n")
        except (OSError, ValueError, AttributeError):
            pass
        return frozenset()


MAX_CONFIG_BYTES = 1 << 20


def load(path: str | None = None) -> SiteConfig:
    """The configuration from `path` (else $DDPDOCTOR_CONFIG); without either, /etc/ddpdoctor.toml
    when it exists, else the defaults. A file named explicitly must exist; the default one is optional.
    """
    if path is None:
        path = os.environ.get("DDPDOCTOR_CONFIG") or None
    explicit = path is not None
    path = path or DEFAULT_PATH
    try:
        # never waits on a FIFO, only a regular file is read, and over 1 MiB is an error: a silent cut
        # would drop the keys after it (a hung NFS mount can still block: the prolog's watchdog covers that)
        raw = read_limited(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such file") from None
        return SiteConfig()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    from ddpdoctor import tomlread as toml
    try:
        data = toml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except toml.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    try:
        return from_mapping(data, path)
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError) as e:  # any value we did not foresee
        raise ConfigError(f"{path}: a value cannot be used: {type(e).__name__}: {e}") from None

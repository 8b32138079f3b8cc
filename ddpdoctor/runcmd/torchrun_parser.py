"""torchrun's own argument parser, without paying for `import torch`.

`torch.distributed.run.get_args_parser()` is the parser torchrun uses; importing that module imports
torch (1-2 s, measured in benchmarks/bench_lint.py --run), far over the 0.3 s `ddpdoctor run` may
spend before it execs the job. The parser itself needs only argparse: so we locate the installed
torch *without importing it* (`importlib.util.find_spec`), read the source of
`torch/distributed/run.py`, and execute just `get_args_parser` and the helpers it names
(`torch/distributed/argparse_util.py` for the `env` action, `AffinityMode` from
`torch/numa/binding.py`). Same code, same defaults, same `TORCHRUN_*`/`PET_*` environment
fallbacks as the installed torch; no hand-written copy to drift. If torch's layout ever changes so
that this fails, we fall back to the real import (slow but right) and say so in `how`.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from pathlib import Path

_cache: dict = {}

# Module-level functions of run.py we take along (all pure Python over their arguments).
_FUNCS = ("get_args_parser", "parse_min_max_nnodes", "get_rdzv_endpoint", "get_use_env")


class ParserUnavailable(RuntimeError):
    pass


def _torch_root() -> Path:
    spec = importlib.util.find_spec("torch")  # finds the package, executes nothing
    if spec is None or not spec.submodule_search_locations:
        raise ParserUnavailable("torch is not installed here: cannot read torchrun's argument parser")
    return Path(list(spec.submodule_search_locations)[0])


def _from_source(root: Path) -> dict:
    ns: dict = {"__name__": "ddpdoctor._torchrun_parser", "os": os, "sys": sys,
                "ArgumentParser": argparse.ArgumentParser, "REMAINDER": argparse.REMAINDER}
    util = root / "distributed" / "argparse_util.py"
    exec(compile(util.read_text(), str(util), "exec"), ns)  # defines env, check_env (argparse Actions)
    binding = root / "numa" / "binding.py"
    if binding.exists():
        tree = ast.parse(binding.read_text())
        cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AffinityMode"]
        if cls:
            from enum import Enum
            ns["Enum"] = Enum
            exec(compile(ast.Module(body=cls, type_ignores=[]), str(binding), "exec"), ns)
            ns["_AffinityMode"] = ns["AffinityMode"]
    run = root / "distributed" / "run.py"
    tree = ast.parse(run.read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _FUNCS]
    if not any(f.name == "get_args_parser" for f in funcs):
        raise ParserUnavailable(f"{run} has no get_args_parser()")
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(run), "exec"), ns)
    ns["get_args_parser"]()  # fail here, not later, if a name it needs is missing
    return ns


def load() -> tuple[dict, str]:
    """({name: function} with get_args_parser & co, how it was obtained)."""
    if "ns" in _cache:
        return _cache["ns"], _cache["how"]
    root = _torch_root()
    try:
        ns, how = _from_source(root), f"torch source at {root} (not imported)"
    except ParserUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 - a torch whose layout moved: the real module still works
        try:
            import torch.distributed.run as tdr  # slow path: imports torch
        except Exception as e2:  # noqa: BLE001
            raise ParserUnavailable(f"cannot load torchrun's parser: {e}; importing it failed too: {e2}") from None
        ns = {n: getattr(tdr, n) for n in _FUNCS if hasattr(tdr, n)}
        how = f"torch.distributed.run imported (reading its source failed: {type(e).__name__}: {e})"
    _cache["ns"], _cache["how"] = ns, how
    return ns, how


def parse(args: list[str]) -> argparse.Namespace:
    """torchrun's parse of `args` (everything after `torchrun`); argparse errors -> ValueError."""
    ns, _ = load()
    parser = ns["get_args_parser"]()
    parser.exit_on_error = False

    def error(message):  # argparse would print usage and exit 2: we report it in one line instead
        raise ValueError(message)

    parser.error = error
    try:
        return parser.parse_args(args)
    except argparse.ArgumentError as e:
        raise ValueError(str(e)) from None

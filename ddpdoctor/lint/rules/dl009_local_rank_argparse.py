"""DL009: the local rank taken from an argparse option that torchrun never passes."""
from __future__ import annotations

import ast
import dataclasses

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import LOCAL_RANK_VARS, env_key
from ddpdoctor.lint.module import Module, const_str, kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity

FIXED = 'add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))'


def _version_gated(mod: Module, node: ast.AST) -> bool:
    """Under `if TORCH_VERSION < 2:` or similar: the author chose the spelling per torch version."""
    p = mod.parents.get(node)
    while p is not None and not isinstance(p, ast.Module):
        if isinstance(p, ast.If):
            test = mod.source(p.test, 200).lower()
            if "version" in test or "major" in test or "torch" in test:
                return True
        p = mod.parents.get(p)
    return False


def _default_from_env(expr) -> bool:
    return expr is not None and any(env_key(n) in LOCAL_RANK_VARS for n in ast.walk(expr))


@rule("DL009", "--local_rank parsed with argparse only", severity=Severity.ERROR, fix="safe")
def local_rank_argparse(ctx: Context):
    """## What it checks
    `parser.add_argument("--local_rank", ...)` (or `--local-rank`) in a script that never reads
    `LOCAL_RANK` from the environment, neither as the option's default nor anywhere else: an error
    (under torchrun every rank keeps the default). With the environment read, only the missing
    `--local-rank` spelling is reported, as a warning. An option declared under a torch-version test
    is the author's choice and is left alone.

    ## Why it matters
    torchrun passes no argument at all (only `LOCAL_RANK`): every rank keeps the default (`0`, or
    `-1`) and uses the same GPU. `python -m torch.distributed.launch` on torch >= 2.0 passes
    `--local-rank=N`, which argparse rejects: "error: unrecognized arguments: --local-rank=0".

    ## Fix
    Accept both spellings with the environment as default:
    `add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))`.
    `--fix` writes exactly that (both spellings, the environment default; the old literal default
    becomes the fallback) when the module imports `os`; otherwise the fix is manual.
    """
    g = ctx.group
    env_elsewhere = bool(g.env_reads & LOCAL_RANK_VARS)
    for mod, call, q in g.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        names = [const_str(a) for a in call.args]
        if "--local_rank" not in names and "--local-rank" not in names:
            continue
        if _version_gated(mod, call):
            continue
        default = kwarg(call, "default")
        env_default = _default_from_env(default)
        if "--local-rank" in names and (env_default or env_elsewhere):
            continue  # torch >= 2.0's launch spelling, and torchrun's variable is read
        can_fix = mod.aliases.get("os") == "os" and not any(k.arg is None for k in call.keywords)
        kind = "safe" if can_fix else "manual"
        if env_default or env_elsewhere:
            f = ctx.finding("DL009", mod, call,
                            "--local_rank has no --local-rank spelling: torch.distributed.launch >= 2.0 passes "
                            "--local-rank=N and argparse rejects it (torchrun is fine: the script reads LOCAL_RANK)",
                            "accept both spellings", FIXED, fix_kind=kind)
            yield dataclasses.replace(f, severity=Severity.WARNING)
            continue
        d = mod.source(default) if default is not None else "None"
        yield ctx.finding("DL009", mod, call,
                          f"the local rank comes only from an argparse option (default {d}) and the script never "
                          "reads LOCAL_RANK: torchrun passes no option, so every rank keeps the default and uses the "
                          "same GPU (torch.distributed.launch >= 2.0 passes --local-rank)",
                          'default to the environment and accept both spellings', FIXED, fix_kind=kind)

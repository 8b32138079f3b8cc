"""DL003: the global rank used as a CUDA device index."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.module import Module, const_str
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity

BINDERS = ("torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device")


def device_uses(mod: Module, call: ast.Call, q: str):
    """(expression used as a device, how it is used: a function giving the text) for one call."""
    f = call.func
    src = mod.source
    if q in BINDERS and call.args:
        yield call.args[0], lambda: f"{q.rsplit('.', 1)[-1]}({src(call.args[0])})"
    if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda") and call.args and not q.startswith("torch."):
        yield call.args[0], lambda: f".{f.attr}({src(call.args[0])})"
    if q == "torch.device" and call.args:
        yield call, lambda: src(call)
    for k in call.keywords:
        if k.arg == "device_ids" and isinstance(k.value, (ast.List, ast.Tuple)):
            for e in k.value.elts:
                yield e, (lambda e=e: f"device_ids=[{src(e)}]")
        elif k.arg in ("output_device", "device", "map_location", "device_id"):
            yield k.value, (lambda k=k: f"{k.arg}={src(k.value)}")


def _device_strings(mod: Module):
    """`device = f"cuda:{rank}"` / `"cuda:%d" % rank` / `"cuda:" + str(rank)`: a device written as a string."""
    got = mod.memo.get("DL003.device_strings")
    if got is None:
        got = mod.memo["DL003.device_strings"] = list(_find_device_strings(mod))
    return got


def _find_device_strings(mod: Module):
    for node in mod.nodes:
        if isinstance(node, ast.Assign):
            v = node.value
            if isinstance(v, ast.JoinedStr):
                head = v.values[0] if v.values else None
                if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.endswith("cuda:"):
                    yield node, v
            elif isinstance(v, ast.BinOp) and (const_str(v.left) or "").startswith("cuda:"):
                yield node, v


@rule("DL003", "The global rank used as a CUDA device index", severity=Severity.ERROR)
def global_rank_as_device(ctx: Context):
    """## What it checks
    A value that holds the *global* rank — `dist.get_rank()`, `int(os.environ["RANK"])`,
    `SLURM_PROCID`, followed through assignments, conditional expressions, the return value of the
    project's own helpers (also in imported modules), function parameters and `args.rank` set by a
    helper — used as a device index: `set_device(rank)`, `device_ids=[rank]`, `.to(rank)`,
    `.cuda(rank)`, `torch.device("cuda", rank)`, `torch.device(f"cuda:{rank}")`, `f"cuda:{rank}"`.
    The first parameter of a function given to `mp.spawn` is the process index on this node: a
    correct device index.

    ## Why it matters
    Global ranks run from 0 to world_size-1; a node has only LOCAL_WORLD_SIZE GPUs. On a single node
    the two coincide, so the script works in testing; from the second node on, rank 8 asks for GPU 8
    on an 8-GPU node: "CUDA error: invalid device ordinal". (`ddpdoctor run` does not refuse a
    single-node launch for it: there the two ranks are equal.)

    ## Fix
    Index devices by the local rank: `local_rank = int(os.environ["LOCAL_RANK"])` (torchrun),
    `SLURM_LOCALID` (srun), or `rank % torch.cuda.device_count()`.
    """
    g = ctx.group
    if not g.distributed or not g.reads_global_rank:
        return  # no value here can be the global rank (rank_kind's only sources)
    vals = ctx.values
    seen = set()

    def check(mod, node, expr, how, scope):
        for idx in vals.device_indexes(mod, expr, scope, follow_names=False):
            if not isinstance(idx, (ast.Name, ast.Attribute, ast.Call, ast.IfExp, ast.Subscript)):
                continue
            if const_str(idx) is not None or vals.rank_kind(mod, idx, scope) != "global":
                continue
            key = (mod.display, node.lineno)
            if key in seen:
                return
            seen.add(key)
            var = mod.source(idx)
            yield ctx.finding("DL003", mod, node,
                              f"{how()}: {var} is the global rank, not this node's GPU index "
                              "(invalid device ordinal from the second node on)",
                              "index devices by the local rank", 'local_rank = int(os.environ["LOCAL_RANK"])')
            return

    for mod, call, q in g.calls:
        scope = None
        for expr, how in device_uses(mod, call, q):
            scope = scope or ctx.scope(mod, call)
            yield from check(mod, call, expr, how, scope)
    for mod in g.modules:
        for node, value in _device_strings(mod):
            yield from check(mod, node, value, lambda node=node, mod=mod: mod.source(node, 60), ctx.scope(mod, node))

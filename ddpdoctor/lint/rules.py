"""The lint rules (judgement only): each reads the facts of a module group and yields findings."""
from __future__ import annotations

import ast
import dataclasses
from functools import cached_property

from ddpdoctor.lint.facts import (
    BARRIER, COLLECTIVES, DDP_NAMES, DESTROY, INIT, LAUNCHER_VARS, LOCAL_RANK_VARS, PROCESSES, SPAWNS, Group,
    Scope, env_key, rank_kind, rank_test,
)
from ddpdoctor.lint.flow import Walker, module_level_unguarded
from ddpdoctor.lint.module import Module, const_str, is_main_guard, kwarg, target_key
from ddpdoctor.lint.registry import RULES, LintFinding, rule
from ddpdoctor.model import Severity

E, W = Severity.ERROR, Severity.WARNING
BIND_FIX = "torch.cuda.set_device(local_rank)  # local_rank = int(os.environ['LOCAL_RANK'])"


class Context:
    def __init__(self, group: Group):
        self.group = group

    @cached_property
    def flows(self):
        return Walker(self.group).run()

    @cached_property
    def walker(self):
        return Walker(self.group)

    def finding(self, rid: str, mod: Module, node: ast.AST, message: str, fix: str = "", code: str = "") -> LintFinding:
        r = RULES[rid]
        line = getattr(node, "lineno", 1)
        return LintFinding(rid, r.severity, mod.display, line, getattr(node, "col_offset", 0) + 1, message, fix, code,
                           r.fix_kind, mod.where(line), str(mod.path))

    def scope(self, mod: Module, node: ast.AST) -> Scope:
        return Scope(mod, mod.function_of(node) if not isinstance(node, ast.FunctionDef) else node)

    def calls(self, *names):
        return self.group.calls_to(*names)


def _chain(ev) -> str:
    return f" (reached via {' -> '.join(c + '()' for c in ev.chain)})" if len(ev.chain) > 1 else ""


@rule("DL001", "CUDA work before the process's device is bound", severity=E)
def cuda_before_binding(ctx: Context):
    """## What it checks
    In each process of a multi-process script (the torchrun/srun script's body, every function given
    to `mp.spawn` or `Process(target=)`), the first CUDA work on the *default* device — `.cuda()`,
    `.to("cuda")`, `.to(device)` where `device = torch.device("cuda")`, a tensor created with
    `device="cuda"`, `torch.load(map_location="cuda:0")`, `torch.cuda.synchronize()` — that runs
    before `torch.cuda.set_device(...)` (or `init_process_group(device_id=...)`), or with no binding
    at all. Calls into local helpers and local modules (one import level) are followed.

    ## Why it matters
    Until a process binds its device, "cuda" means GPU 0. Every rank then creates a CUDA context
    (300-1000 MiB) and its tensors on GPU 0: GPU 0 runs out of memory, or NCCL finds two ranks on one
    device and hangs or fails with "Duplicate GPU detected".

    ## Fix
    Bind the device first thing in every process, from the launcher's local rank:
    `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` (torchrun) or `torch.cuda.set_device(rank)`
    in an `mp.spawn` worker, then use `torch.device("cuda", local_rank)` or `.cuda()`.
    """
    g = ctx.group
    if not g.distributed:
        return
    for flow in ctx.flows:
        if not (flow.inited or flow.spawned or g.env_reads & LAUNCHER_VARS):
            continue
        ev = next((e for e in flow.events if e.kind == "work"), None)
        if ev is None:
            continue
        when = (f"before the device is bound (line {flow.bound_at})" if flow.bound_at
                else "and this process never binds its device")
        yield ctx.finding("DL001", ev.mod, ev.node,
                          f"{ev.what} puts work on GPU 0 {when}{_chain(ev)}: every rank lands on GPU 0",
                          "bind the device first: torch.cuda.set_device(local_rank)", BIND_FIX)


@rule("DL002", "torch.load without map_location in a distributed script", severity=W, fix="unsafe")
def load_without_map_location(ctx: Context):
    """## What it checks
    `torch.load(path)` with no `map_location` in a script that runs as several processes.

    ## Why it matters
    Without `map_location`, tensors go back to the device they were saved from — usually `cuda:0`
    (rank 0 saved them). Every rank then allocates the whole checkpoint on GPU 0: an extra CUDA
    context per rank and out-of-memory on GPU 0 at resume time (pytorch/examples#1078, pytorch#23138).

    ## Fix
    Load onto the CPU (`load_state_dict` copies into the model's device), or onto this rank's device:
    `torch.load(path, map_location="cpu")` or `map_location=f"cuda:{local_rank}"`.
    `--unsafe-fixes` writes `map_location="cpu"` (unsafe: code that uses the loaded tensors directly
    on a GPU must move them).
    """
    if not ctx.group.distributed:
        return
    for mod, call in ctx.calls("torch.load"):
        if kwarg(call, "map_location") is None and len(call.args) < 2:
            arg = mod.source(call.args[0]) if call.args else "?"
            yield ctx.finding("DL002", mod, call,
                              f"torch.load({arg}) has no map_location: if the file holds CUDA tensors, every rank "
                              "restores them onto the GPU they were saved from (usually cuda:0); a file saved "
                              "from CPU tensors is safe (a static check cannot tell which)",
                              'pass map_location="cpu" (or this rank\'s device)',
                              f'torch.load({arg}, map_location="cpu")')


DEVICE_KWARGS = ("device_ids", "output_device", "device")


def _device_uses(mod: Module, call: ast.Call, q: str):
    """(expression used as a device index, how) for one call."""
    f = call.func
    if q in ("torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device") and call.args:
        yield call.args[0], f"{q.rsplit('.', 1)[-1]}({mod.source(call.args[0])})"
    if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda") and call.args and not q.startswith("torch."):
        yield call.args[0], f".{f.attr}({mod.source(call.args[0])})"
    if q == "torch.device" and len(call.args) == 2 and const_str(call.args[0]) == "cuda":
        yield call.args[1], mod.source(call)
    for k in call.keywords:
        if k.arg in ("device_ids",) and isinstance(k.value, (ast.List, ast.Tuple)):
            for e in k.value.elts:
                yield e, f"device_ids=[{mod.source(e)}]"
        elif k.arg in ("output_device", "device", "map_location"):
            yield k.value, f"{k.arg}={mod.source(k.value)}"


def _fstring_device(node: ast.JoinedStr):
    """f"cuda:{rank}" -> the formatted expression."""
    vals = node.values
    for i, v in enumerate(vals):
        if isinstance(v, ast.FormattedValue) and i > 0:
            prev = vals[i - 1]
            if isinstance(prev, ast.Constant) and isinstance(prev.value, str) and prev.value.endswith("cuda:"):
                yield v.value


@rule("DL003", "The global rank used as a CUDA device index", severity=E)
def global_rank_as_device(ctx: Context):
    """## What it checks
    A variable that holds the *global* rank — `dist.get_rank()`, `int(os.environ["RANK"])`,
    `SLURM_PROCID`, followed through simple assignments and a local `rank = setup()` — used as a
    device index: `set_device(rank)`, `device_ids=[rank]`, `.to(rank)`, `.cuda(rank)`,
    `torch.device("cuda", rank)`, `f"cuda:{rank}"`.

    ## Why it matters
    Global ranks run from 0 to world_size-1; a node has only LOCAL_WORLD_SIZE GPUs. On a single node
    the two coincide, so the script works in testing; from the second node on, rank 8 asks for GPU 8
    on an 8-GPU node: "CUDA error: invalid device ordinal".

    ## Fix
    Index devices by the local rank: `local_rank = int(os.environ["LOCAL_RANK"])` (torchrun),
    `SLURM_LOCALID` (srun), or `rank % torch.cuda.device_count()`.
    """
    g = ctx.group
    if not g.distributed:
        return
    seen = set()
    for mod, call, q in g.calls:
        scope = ctx.scope(mod, call)
        uses = list(_device_uses(mod, call, q))
        for expr, how in uses:
            if isinstance(expr, ast.JoinedStr):
                for inner in _fstring_device(expr):
                    uses.append((inner, how))
                continue
            if not (isinstance(expr, (ast.Name, ast.Attribute, ast.Call))):
                continue
            if rank_kind(mod, expr, scope, group=g) != "global":
                continue
            key = (mod.display, call.lineno)
            if key in seen:
                continue
            seen.add(key)
            var = mod.source(expr)
            yield ctx.finding("DL003", mod, call,
                              f"{how}: {var} is the global rank, not this node's GPU index "
                              "(invalid device ordinal from the second node on)",
                              "index devices by the local rank", 'local_rank = int(os.environ["LOCAL_RANK"])')


RDZV_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _guarded_by_key(mod: Module, node: ast.AST, key: str) -> bool:
    """Inside an `if` (or an elif chain) that asks whether a launcher variable is set: a fallback."""
    p = mod.parents.get(node)
    while p is not None and not isinstance(p, ast.Module):
        if isinstance(p, ast.If) and any(const_str(n) in (key, *LAUNCHER_VARS, *RDZV_VARS) for n in ast.walk(p.test)):
            return True
        p = mod.parents.get(p)
    return False


@rule("DL004", "Rendezvous values hard-coded in a script meant for a launcher", severity=E)
def hardcoded_rendezvous(ctx: Context):
    """## What it checks
    In a script written for torchrun/srun (it reads `LOCAL_RANK`/`RANK`/`WORLD_SIZE`, or calls
    `init_process_group()` without a rank, and starts no processes itself): literal assignments to
    `os.environ["MASTER_ADDR"|"MASTER_PORT"|"RANK"|"WORLD_SIZE"|"LOCAL_RANK"]`, and
    `init_process_group(init_method="tcp://host:port", rank=0, world_size=2)` with literals.
    Scripts that start their own workers with `mp.spawn` are single-node by construction and exempt.

    ## Why it matters
    The launcher already exported the right values for every node. Overwriting them with
    `localhost`/a fixed port makes each node rendezvous with itself: the job hangs until the timeout
    on the second node, or two jobs on one host collide on the port ("EADDRINUSE").

    ## Fix
    Delete the assignment and let torchrun/srun provide the values (`--rdzv-endpoint`,
    `--master-addr`), or only set a default: `os.environ.setdefault("MASTER_PORT", "29500")`.
    """
    g = ctx.group
    if not g.launcher_style:
        return
    for mod in g.modules:
        for node in mod.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and mod.qualname(t.value) == "os.environ":
                        k = const_str(t.slice)
                        if k in RDZV_VARS and not _guarded_by_key(mod, node, k):
                            yield ctx.finding("DL004", mod, node,
                                              f"os.environ[{k!r}] = {node.value.value!r} overrides the value "
                                              "torchrun/srun exported for this node",
                                              "delete it (or use os.environ.setdefault)",
                                              f"os.environ.setdefault({k!r}, {str(node.value.value)!r})")
    for mod, call in ctx.calls(INIT):
        im = const_str(kwarg(call, "init_method"))
        if im and im.startswith("tcp://"):
            yield ctx.finding("DL004", mod, call, f"init_method={im!r} is hard-coded: every node dials that address",
                              'use init_method="env://" (the launcher\'s MASTER_ADDR/MASTER_PORT)')
        for k in ("rank", "world_size"):
            v = kwarg(call, k)
            if isinstance(v, ast.Constant) and isinstance(v.value, int):
                yield ctx.finding("DL004", mod, call, f"init_process_group({k}={v.value}) is hard-coded",
                                  f"drop {k}= (torchrun exports it) or read it from the environment")


@rule("DL005", "DistributedSampler whose epoch never changes", severity=W)
def sampler_without_set_epoch(ctx: Context):
    """## What it checks
    A `DistributedSampler` (shuffling, the default) in a script that never calls `.set_epoch(...)`.

    ## Why it matters
    The sampler seeds its shuffle with `seed + epoch`. Without `set_epoch(epoch)` each epoch replays
    the same order on every rank: the model sees the same batches in the same order every epoch,
    which silently hurts convergence (documented in torch.utils.data.distributed).

    ## Fix
    Call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the DataLoader
    (`loader.sampler.set_epoch(epoch)` when the sampler is only reachable through the loader).
    """
    g = ctx.group
    if g.has_method_call("set_epoch"):
        return
    for mod, call, q in g.calls:
        if q.endswith("DistributedSampler") and not q.startswith("self."):
            sh = kwarg(call, "shuffle")
            if isinstance(sh, ast.Constant) and sh.value is False:
                continue
            yield ctx.finding("DL005", mod, call,
                              f"{mod.source(call, 60)} shuffles, but nothing calls set_epoch(): every epoch "
                              "repeats the same order",
                              "call sampler.set_epoch(epoch) at the start of each epoch")


@rule("DL006", "DataLoader with shuffle=True and a sampler", severity=E, fix="safe")
def shuffle_with_sampler(ctx: Context):
    """## What it checks
    `DataLoader(..., shuffle=True, sampler=...)` (or `batch_sampler=`) with a sampler that is not
    the literal `None`.

    ## Why it matters
    DataLoader refuses the combination: `ValueError: sampler option is mutually exclusive with
    shuffle` as soon as the sampler is set — typically only on the multi-GPU path, so the
    single-GPU test passes and the distributed job dies at start.

    ## Fix
    Drop `shuffle=True` (the DistributedSampler shuffles), or `shuffle=(sampler is None)`.
    `--fix` removes the `shuffle=True` argument.
    """
    for mod, call, q in ctx.group.calls:
        if not q.endswith("DataLoader"):
            continue
        sh = kwarg(call, "shuffle")
        if not (isinstance(sh, ast.Constant) and sh.value is True):
            continue
        for name in ("sampler", "batch_sampler"):
            s = kwarg(call, name)
            if s is not None and not (isinstance(s, ast.Constant) and s.value is None):
                yield ctx.finding("DL006", mod, call,
                                  f"DataLoader(shuffle=True, {name}={mod.source(s, 40)}) raises ValueError "
                                  "(sampler option is mutually exclusive with shuffle)",
                                  "drop shuffle=True: the sampler shuffles")
                break


def _spawn_calls(ctx: Context):
    for mod, call, q in ctx.group.calls:
        if q in SPAWNS:
            yield mod, call, q, (call.args[0] if call.args else kwarg(call, "fn")), kwarg(call, "args"), 1
        elif q in PROCESSES:
            yield mod, call, q, kwarg(call, "target"), kwarg(call, "args"), 0


def _runs_on_import(ctx: Context, mod: Module, node: ast.AST, depth: int = 0) -> bool:
    if module_level_unguarded(mod, node):
        return True
    fn = mod.function_of(node)
    if fn is None or depth > 2 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    callers = [c for c in mod.calls if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    return any(_runs_on_import(ctx, mod, c, depth + 1) for c in callers)


@rule("DL007", "Processes started without a __main__ guard", severity=E)
def spawn_without_main_guard(ctx: Context):
    """## What it checks
    `mp.spawn(...)`, `start_processes(...)` or `Process(...)` that runs when the module is imported:
    at module level (or in a function called at module level) outside `if __name__ == "__main__":`.

    ## Why it matters
    `mp.spawn` uses the *spawn* start method: each child re-imports the main module. Without the
    guard the child starts processes again while importing: "RuntimeError: An attempt has been
    made to start a new process before the current process has finished its bootstrapping phase".

    ## Fix
    Move the start under `if __name__ == "__main__":` (and keep the module's top level free of work).
    """
    for mod, call, q, *_ in _spawn_calls(ctx):
        if mod is ctx.group.main and _runs_on_import(ctx, mod, call):
            yield ctx.finding("DL007", mod, call,
                              f"{mod.source(call.func)}(...) runs on import: each spawned child re-imports this "
                              "file and starts processes again",
                              'put it under if __name__ == "__main__":')


@rule("DL008", "Spawned function's signature does not match the args passed", severity=E)
def spawn_signature(ctx: Context):
    """## What it checks
    `mp.spawn(fn, args=(...))` passes the process index first, then `args`; `Process(target=fn,
    args=(...))` passes `args` only. The number of arguments is compared with `fn`'s positional
    parameters (required and optional) when `fn` is a local function and `args` a literal tuple.

    ## Why it matters
    A mismatch raises `TypeError: fn() missing 1 required positional argument` in every child — after
    the parent has already started them, so the failure shows up as several tracebacks at once.

    ## Fix
    Make `fn(rank, *args)` match: add the missing parameter, or the missing value to `args=(...)`.
    """
    w = ctx.walker
    for mod, call, q, target, args, extra in _spawn_calls(ctx):
        if not isinstance(target, ast.Name) or target.id not in w._funcs:
            continue
        if args is None:
            n = 0
        elif isinstance(args, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in args.elts):
            n = len(args.elts)
        else:
            continue
        _, fn = w._funcs[target.id]
        a = fn.args
        pos = a.posonlyargs + a.args
        required = len(pos) - len(a.defaults)
        passed = n + extra
        if passed < required or (passed > len(pos) and a.vararg is None):
            want = f"{required}" if required == len(pos) else f"{required}-{len(pos)}"
            names = ", ".join(p.arg for p in pos)
            yield ctx.finding("DL008", mod, call,
                              f"{target.id}({names}) takes {want} positional argument(s) but "
                              f"{mod.source(call.func)} passes {passed}"
                              + (" (the process index, then args)" if extra else ""),
                              f"make {target.id}'s parameters match args=(...)")


@rule("DL009", "--local_rank parsed with argparse only", severity=E, fix="safe")
def local_rank_argparse(ctx: Context):
    """## What it checks
    `parser.add_argument("--local_rank", ...)` without the `--local-rank` spelling: an error when the
    script never reads `LOCAL_RANK` from the environment, a warning when it does (then only
    `torch.distributed.launch` >= 2.0 breaks it).

    ## Why it matters
    torchrun passes no argument at all (only `LOCAL_RANK`): every rank keeps the default and uses the
    same GPU. `python -m torch.distributed.launch` on torch >= 2.0 passes `--local-rank=N`, which
    argparse rejects: "error: unrecognized arguments: --local-rank=0".

    ## Fix
    Read the environment: `local_rank = int(os.environ["LOCAL_RANK"])`. To keep the option, accept
    both spellings with the environment as default:
    `add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))`.
    `--fix` adds the `--local-rank` spelling.
    """
    g = ctx.group
    from_env = bool(g.env_reads & LOCAL_RANK_VARS)
    for mod, call, q in g.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            names = [const_str(a) for a in call.args]
            if "--local_rank" in names and "--local-rank" not in names:
                f = ctx.finding("DL009", mod, call,
                                ("--local_rank has no --local-rank spelling: torch.distributed.launch >= 2.0 passes "
                                 "--local-rank=N and argparse rejects it (torchrun is fine: the script reads LOCAL_RANK)")
                                if from_env else
                                ("--local_rank is only an argparse option: torchrun sets LOCAL_RANK instead (every "
                                 "rank keeps the default) and torch.distributed.launch >= 2.0 passes --local-rank"),
                                'accept both spellings and default to os.environ["LOCAL_RANK"]',
                                'add_argument("--local-rank", "--local_rank", type=int, '
                                'default=int(os.environ.get("LOCAL_RANK", 0)))')
                yield dataclasses.replace(f, severity=W) if from_env else f


def _ddp_vars(mod: Module, scope_node) -> set[str]:
    """Names/self attributes assigned a DistributedDataParallel(...) in a function or its class."""
    cls = mod.class_of(scope_node) if scope_node is not None else None
    out = set()
    for key, entries in mod.assigns.items():
        for v, fn, c in entries:
            if isinstance(v, ast.Call) and mod.qualname(v.func) in DDP_NAMES:
                if fn is scope_node or (key.startswith("self.") and cls is not None and c is cls) \
                        or (scope_node is None):
                    out.add(key)
    return out


def _module_ddp_vars(mod: Module, fn) -> set[str]:
    """Module-level DDP models a function reads as globals (not rebound in it)."""
    out = set()
    for key, entries in mod.assigns.items():
        if any(f is None and isinstance(v, ast.Call) and mod.qualname(v.func) in DDP_NAMES for v, f, _ in entries):
            if not any(f is fn for _, f, _ in entries):
                out.add(key)
    return out


def _collective_in(ctx, mod: Module, stmts, ddp: set[str], depth: int, func) -> tuple[ast.AST, str] | None:
    """The first collective, DDP forward, or call into a local helper doing one, in stmts."""
    for stmt in stmts:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            q = mod.qualname(node.func)
            if q in COLLECTIVES:
                return node, f"{q.rsplit('.', 1)[-1]}()"
            k = target_key(node.func)
            if k in ddp:
                return node, f"the DistributedDataParallel forward {mod.source(node, 50)}"
            if depth < 2:
                target = ctx.walker.resolve(mod, node, func, Scope(mod, func))
                if target is None:
                    continue
                tmod, tfn = target
                inner_ddp = set(_ddp_vars(tmod, tfn)) | _module_ddp_vars(tmod, tfn)
                pos = [p.arg for p in tfn.args.posonlyargs + tfn.args.args]
                off = 1 if pos and pos[0] == "self" and isinstance(node.func, ast.Attribute) else 0
                for i, a in enumerate(node.args):
                    if target_key(a) in ddp and i + off < len(pos):
                        inner_ddp.add(pos[i + off])
                if tmod is mod and off:
                    inner_ddp |= {d for d in ddp if d.startswith("self.")}
                got = _collective_in(ctx, tmod, tfn.body, inner_ddp, depth + 1, tfn)
                if got:
                    return node, f"{mod.source(node.func)}(), which runs {got[1]} (line {got[0].lineno})"
    return None


@rule("DL010", "A collective or DDP forward that only some ranks run", severity=E)
def collective_under_rank_guard(ctx: Context):
    """## What it checks
    A collective (`all_reduce`, `broadcast`, `all_gather`, ...), a forward through the
    DistributedDataParallel-wrapped model, or a call into a local helper that does one, inside
    `if rank == 0:` (any test comparing a rank to a constant, or `is_main_process()`), with no
    matching collective in the `else` branch. `barrier()` is exempt (the paired
    `if rank != 0: barrier()` ... `if rank == 0: barrier()` idiom is correct).

    ## Why it matters
    A collective completes only when every rank joins it. Rank 0 waits forever for the others, which
    are already at the next one: the job hangs until the NCCL watchdog kills it (pytorch#54059). A DDP
    forward syncs buffers (broadcast_buffers=True) and so counts as a collective.

    ## Fix
    Run the collective on every rank and only *print* or *save* on rank 0; for rank-0-only
    evaluation use the unwrapped model: `model.module(x)`.
    """
    g = ctx.group
    if not g.distributed:
        return
    for mod in g.modules:
        for node in mod.nodes:
            if not isinstance(node, ast.If) or rank_test(mod, node.test) is None:
                continue
            func = mod.function_of(node)
            ddp = _ddp_vars(mod, func) | (_module_ddp_vars(mod, func) if func is not None else set())
            got = _collective_in(ctx, mod, node.body, ddp, 0, func)
            if got is None:
                continue
            other = _collective_in(ctx, mod, node.orelse, ddp, 0, func) if node.orelse else None
            if other is not None:
                continue
            call, what = got
            yield ctx.finding("DL010", mod, call,
                              f"{what} runs only when {mod.source(node.test, 50)}: the other ranks never join it "
                              "and the job hangs",
                              "run it on every rank (or evaluate the unwrapped model.module on rank 0)")


def _save_path_is_per_rank(mod: Module, call: ast.Call) -> bool:
    if len(call.args) < 2:
        return True  # no path we can judge
    p = call.args[1]
    for n in ast.walk(p):
        if isinstance(n, (ast.Name, ast.Attribute)) and "rank" in (n.id if isinstance(n, ast.Name) else n.attr).lower():
            return True
    key = target_key(p)
    if key:
        scope = Scope(mod, mod.function_of(call))
        for v in scope.assigned(key):
            if isinstance(v, ast.Call) and mod.qualname(v.func) in ("io.BytesIO", "BytesIO"):
                return True
    return False


def _guard(ctx: Context, mod: Module, node: ast.AST, depth: int = 0):
    """('global'|'local'|'other', test) for the nearest rank test above node, following callers 2 deep."""
    p = mod.parents.get(node)
    child = node
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.If) and child in p.body + p.orelse:
            r = rank_test(mod, p.test)
            if r is not None:
                kind = rank_kind(mod, r, Scope(mod, mod.function_of(p)), group=ctx.group)
                n = (r.id if isinstance(r, ast.Name) else getattr(r, "attr", "")).lower()
                if kind is None and "local" in n:
                    kind = "local"
                return kind or "other", p.test
        child, p = p, mod.parents.get(p)
    if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if depth >= 3:
            return None, None  # three callers up and still no rank test: every rank gets here
        callers = [c for c in mod.calls
                   if ((isinstance(c.func, ast.Name) and c.func.id == p.name)
                        or (isinstance(c.func, ast.Attribute) and c.func.attr == p.name))]
        if not callers:
            return "unknown", None
        guards = [_guard(ctx, mod, c, depth + 1) for c in callers]
        if any(gd[0] is None for gd in guards):
            return None, None
        return guards[0]
    if isinstance(p, ast.Module):
        return None, None
    return "unknown", None


@rule("DL011", "Every rank writes the same checkpoint file", severity=W)
def every_rank_saves(ctx: Context):
    """## What it checks
    `torch.save(obj, path)` in a distributed script where no rank test guards the call (in its
    function, or at every call site of that function, two levels up), and the path does not
    contain a rank. In a torchrun/srun script, a guard on the *local* rank (`LOCAL_RANK == 0`) is
    reported too: it lets one process per node write the same path.

    ## Why it matters
    N processes writing one file at once interleave or truncate it: a checkpoint that fails to load
    ("PytorchStreamReader failed reading zip archive") exactly when you need it. On a shared
    filesystem a local-rank guard still leaves one writer per node.

    ## Fix
    Save on the global rank 0 only (`if dist.get_rank() == 0:`), or write per-rank paths; use
    `torch.distributed.checkpoint` for sharded state.
    """
    g = ctx.group
    if not g.distributed:
        return
    for mod, call in ctx.calls("torch.save"):
        if _save_path_is_per_rank(mod, call):
            continue
        kind, test = _guard(ctx, mod, call)
        if kind is None:
            yield ctx.finding("DL011", mod, call,
                              f"{mod.source(call, 60)} runs on every rank: all of them write "
                              f"{mod.source(call.args[1], 40)} at once",
                              "save on rank 0 only: if dist.get_rank() == 0:")
        elif kind == "local" and g.launcher_style:
            yield ctx.finding("DL011", mod, call,
                              f"{mod.source(call, 60)} is guarded by {mod.source(test, 40)}: one process per node "
                              f"writes {mod.source(call.args[1], 40)}",
                              "guard on the global rank: if dist.get_rank() == 0:")


@rule("DL012", "barrier() under NCCL before the device is bound", severity=E)
def barrier_before_binding(ctx: Context):
    """## What it checks
    `dist.barrier()` (without `device_ids=`) in a process whose process group uses NCCL, before the
    process binds its device with `torch.cuda.set_device` or `init_process_group(device_id=...)`.

    ## Why it matters
    An NCCL barrier is an all-reduce on "the current device". Unbound, every rank picks GPU 0 (or
    guesses `rank % device_count`, with a warning): ranks share a GPU, NCCL hangs or fails with
    "Duplicate GPU detected", and each rank leaves a context on GPU 0.

    ## Fix
    Call `torch.cuda.set_device(local_rank)` before the first barrier (best: before
    `init_process_group`, or pass `device_id=torch.device("cuda", local_rank)` to it), or
    `dist.barrier(device_ids=[local_rank])`.
    """
    for flow in ctx.flows:
        if flow.backend != "nccl":
            continue
        for ev in flow.events:
            if ev.kind == "barrier":
                yield ctx.finding("DL012", ev.mod, ev.node,
                                  f"{ev.what} runs under NCCL before this process binds its GPU"
                                  + (f" (line {flow.bound_at})" if flow.bound_at else " (it never does)")
                                  + ": ranks may share GPU 0 and hang",
                                  "bind first: torch.cuda.set_device(local_rank)", BIND_FIX)


@rule("DL013", "DDP(model) on CUDA without device_ids and no bound device", severity=W)
def ddp_without_device_ids(ctx: Context):
    """## What it checks
    `DistributedDataParallel(model)` without `device_ids`, in a script that uses CUDA and never binds a
    device (`torch.cuda.set_device`, `init_process_group(device_id=)`, `CUDA_VISIBLE_DEVICES`).

    ## Why it matters
    With neither, DDP and NCCL work on "the current device", GPU 0, for every rank: parameters on one
    GPU and communicators on another, or every rank's buckets on GPU 0.

    ## Fix
    Bind the device and name it: `torch.cuda.set_device(local_rank)`, then
    `DDP(model.to(local_rank), device_ids=[local_rank])`.
    """
    g = ctx.group
    if g.binds_anywhere or not g.uses_cuda:
        return
    for mod, call in ctx.calls(*DDP_NAMES):
        if kwarg(call, "device_ids") is None and len(call.args) < 2:
            yield ctx.finding("DL013", mod, call,
                              f"{mod.source(call, 60)} has no device_ids and no device is bound: every rank's DDP "
                              "works on GPU 0",
                              "torch.cuda.set_device(local_rank); DDP(model, device_ids=[local_rank])")


def _is_script(mod: Module) -> bool:
    for s in mod.tree.body:
        if isinstance(s, ast.If) and is_main_guard(s.test):
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            return True
    return False


@rule("DL014", "No destroy_process_group()", severity=W)
def no_destroy(ctx: Context):
    """## What it checks
    A script (it has a `__main__` block or top-level calls) that calls `init_process_group` but
    never `destroy_process_group()` (in itself or in the local modules it imports).

    ## Why it matters
    torch >= 2.4 warns "process group has NOT been destroyed before we destruct ProcessGroupNCCL";
    NCCL's communicators are then torn down at interpreter exit, where a rank that exits early can
    leave the others hanging in their last collective and the exit code is lost.

    ## Fix
    End the worker with `dist.destroy_process_group()` (in a `finally:` so errors also clean up).
    """
    g = ctx.group
    if not _is_script(g.main) or g.has_call(DESTROY):
        return
    inits = ctx.calls(INIT)
    if inits:
        mod, call = inits[0]
        yield ctx.finding("DL014", mod, call,
                          "init_process_group() is never matched by destroy_process_group()",
                          "call dist.destroy_process_group() when the worker ends", "dist.destroy_process_group()")


_ = (BARRIER, env_key)  # re-exported names used by tests

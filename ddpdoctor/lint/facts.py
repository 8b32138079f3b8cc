"""Facts about a group of modules (the linted file plus the local modules it imports, one level).

Plain judgements-free questions the rules ask: what a name was assigned, whether an expression is
the global rank, whether a device expression is the bare default CUDA device, whether a test
compares a rank to a constant. Every answer comes from the AST; nothing is imported.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

from ddpdoctor.launch import RANK_VARS
from ddpdoctor.lint.module import Module, const_str, kwarg, target_key

DIST = "torch.distributed"
INIT = f"{DIST}.init_process_group"
DESTROY = f"{DIST}.destroy_process_group"
BARRIER = f"{DIST}.barrier"
COLLECTIVES = {f"{DIST}.{n}" for n in (
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
    "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "monitored_barrier")}
DDP_NAMES = {"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
             "torch.nn.DistributedDataParallel"}
SPAWNS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}
PROCESSES = {"torch.multiprocessing.Process", "multiprocessing.Process"}
BINDS = {"torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device",
         "torch.accelerator.device_index", "torch.xpu.set_device"}
# what launchers export (ddpdoctor/launch.py RANK_VARS, the one table), plus PMIx's rank for scripts that read it
GLOBAL_RANK_VARS = {v[0] for v in RANK_VARS} | {"PMIX_RANK"}
LOCAL_RANK_VARS = {v[2] for v in RANK_VARS}
LAUNCHER_VARS = GLOBAL_RANK_VARS | LOCAL_RANK_VARS | {"WORLD_SIZE", "LOCAL_WORLD_SIZE"}
# torch.cuda calls that create a context (and allocate) on the current device.
CUDA_CONTEXT_CALLS = {f"torch.cuda.{n}" for n in (
    "synchronize", "empty_cache", "mem_get_info", "FloatTensor", "LongTensor", "HalfTensor", "IntTensor",
    "ByteTensor", "DoubleTensor", "BoolTensor", "BFloat16Tensor", "Stream", "Event", "current_stream")}
TENSOR_FACTORIES = {f"torch.{n}" for n in (
    "tensor", "zeros", "ones", "empty", "full", "randn", "rand", "randint", "arange", "linspace", "eye",
    "zeros_like", "ones_like", "empty_like", "randn_like", "as_tensor", "from_numpy")}


def env_key(node: ast.AST) -> str | None:
    """The variable name in os.environ["X"], os.environ.get("X"), os.getenv("X"), env["X"]; int()/str() unwrapped."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "str") and node.args:
        return env_key(node.args[0])
    if isinstance(node, ast.Subscript):
        return const_str(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("get", "getenv", "pop"):
            return const_str(node.args[0])
    return None


def module_env_reads(m: Module) -> set[str]:
    """Upper-case names read from the environment in one module (memoised on the module: a module
    imported by many linted files is read once)."""
    got = m.memo.get("env_reads")
    if got is None:
        got = set()
        for node in m.nodes:
            if isinstance(node, (ast.Subscript, ast.Call)) and not isinstance(getattr(node, "ctx", None), ast.Store):
                k = env_key(node)
                if k and k.isupper():
                    got.add(k)
        m.memo["env_reads"] = got
    return got


@dataclass
class Group:
    """The modules linted together: `modules[0]` is the file named on the command line."""
    modules: list[Module]
    calls: list[tuple[Module, ast.Call, str]] = field(default_factory=list)

    def __post_init__(self):
        for m in self.modules:
            q = m.memo.get("qualified_calls")
            if q is None:  # once per module, however many linted files import it
                q = m.memo["qualified_calls"] = [(m, node, m.qualname(node.func)) for node in m.calls]
            self.calls.extend(q)

    @property
    def main(self) -> Module:
        return self.modules[0]

    def calls_to(self, *names: str):
        want = set(names)
        return [(m, c) for m, c, q in self.calls if q in want]

    def has_call(self, *names: str) -> bool:
        return bool(self.calls_to(*names))

    @cached_property
    def env_reads(self) -> set[str]:
        return set().union(*(module_env_reads(m) for m in self.modules))

    @cached_property
    def reads_global_rank(self) -> bool:
        """Some value here can be the global rank: get_rank() is called or RANK-like variables are read."""
        return bool(self.env_reads & GLOBAL_RANK_VARS) or self.has_call(f"{DIST}.get_rank")

    @cached_property
    def spawn_style(self) -> bool:
        return self.has_call(*SPAWNS, *PROCESSES)

    @cached_property
    def launcher_style(self) -> bool:
        """Written for torchrun/srun: reads the launcher's variables, starts no processes of its own."""
        if self.spawn_style:
            return False
        if self.env_reads & LAUNCHER_VARS:
            return True
        return any(kwarg(c, "rank") is None and len(c.args) < 4 for _, c in self.calls_to(INIT))

    @cached_property
    def distributed(self) -> bool:
        return bool(self.has_call(INIT, *DDP_NAMES, *SPAWNS) or self.env_reads & LAUNCHER_VARS
                    or any(q.endswith("DistributedSampler") for _, _, q in self.calls))

    @cached_property
    def binds_anywhere(self) -> bool:
        if self.has_call(*BINDS):
            return True
        if any(kwarg(c, "device_id") is not None for _, c in self.calls_to(INIT)):
            return True
        return "CUDA_VISIBLE_DEVICES" in self.env_writes

    @cached_property
    def env_writes(self) -> set[str]:
        out = set()
        for m in self.modules:
            for node in m.nodes:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Subscript) and m.qualname(t.value) == "os.environ":
                            k = const_str(t.slice)
                            if k:
                                out.add(k)
        return out

    @cached_property
    def uses_cuda(self) -> bool:
        for m in self.modules:
            for node in m.nodes:
                if isinstance(node, ast.Attribute) and node.attr == "cuda":
                    return True
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cuda"):
                    return True
                if isinstance(node, ast.Constant) and node.value == "nccl":
                    return True
        return False

    @cached_property
    def single_node(self) -> bool:
        """The world size is this node's GPU count (`world_size = torch.cuda.device_count()`): one node."""
        for m in self.modules:
            for key, entries in m.assigns.items():
                if key.rsplit(".", 1)[-1] in ("world_size", "nprocs", "world"):
                    if any(isinstance(v, ast.Call) and m.qualname(v.func) == "torch.cuda.device_count"
                           for v, _, _ in entries):
                        return True
        return False

    def has_method_call(self, attr: str) -> bool:
        return any(isinstance(c.func, ast.Attribute) and c.func.attr == attr for _, c, _ in self.calls)


class Scope:
    """Assignments visible from one function (its own, its class's `self.x`, and module-level ones)."""

    def __init__(self, mod: Module, func: ast.AST | None, bindings: dict | None = None):
        self.mod, self.func = mod, func
        # parameter -> (caller module, caller scope, argument) for the call being walked (flow.py)
        self.bindings = bindings or {}

    @cached_property
    def cls(self):
        return self.mod.class_of(self.func) if self.func is not None else None

    def argument(self, key: str):
        """(module, scope, expression) the caller passed for parameter `key`, when a flow knows it."""
        return self.bindings.get(key)

    def assigned(self, key: str, before: int | None = None) -> list[ast.AST]:
        entries = self.mod.assigns.get(key, ())
        if key.startswith("self."):
            out = [v for v, fn, cls in entries if cls is not None and cls is self.cls]
        else:
            out = [v for v, fn, cls in entries if fn is self.func]
        if before is not None:
            prior = [v for v in out if v.lineno <= before]
            out = prior or out
        return out


def bare_cuda(mod: Module, expr: ast.AST | None, scope: Scope, depth: int = 0) -> str | None:
    """A description when `expr` is the default/zeroth CUDA device ("cuda", "cuda:0", torch.device("cuda"))."""
    if expr is None or depth > 4:
        return None
    s = const_str(expr)
    if s is not None:
        return repr(s) if s in ("cuda", "cuda:0") else None
    if isinstance(expr, ast.IfExp):
        return bare_cuda(mod, expr.body, scope, depth + 1) or bare_cuda(mod, expr.orelse, scope, depth + 1)
    if isinstance(expr, ast.Call) and mod.qualname(expr.func) == "torch.device":
        if len(expr.args) == 1 and not expr.keywords:
            inner = bare_cuda(mod, expr.args[0], scope, depth + 1)
            return f"torch.device({inner})" if inner else None
        if len(expr.args) == 2 and const_str(expr.args[0]) == "cuda" and isinstance(expr.args[1], ast.Constant) \
                and expr.args[1].value == 0:
            return "torch.device('cuda', 0)"
        return None
    key = target_key(expr)
    if key:
        vals = scope.assigned(key, getattr(expr, "lineno", None))
        if vals:
            got = bare_cuda(mod, vals[-1], scope, depth + 1)
            if got:
                return f"{key} = {got}"
        elif scope.argument(key):
            cm, cs, arg = scope.argument(key)
            got = bare_cuda(cm, arg, cs, depth + 1)
            if got:
                return f"{got}, passed in as {key}"
    return None


def cuda_work(mod: Module, call: ast.Call, q: str, scope: Scope) -> str | None:
    """Why this call puts work on the default CUDA device, or None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "cuda" and not q.startswith("torch."):
        if not call.args or (isinstance(call.args[0], ast.Constant) and call.args[0].value in (None, 0)):
            dev = call.args[0] if call.args else kwarg(call, "device")
            if dev is None or (isinstance(dev, ast.Constant) and dev.value in (None, 0)):
                return f"{mod.source(call)}"
    if isinstance(f, ast.Attribute) and f.attr == "to" and not q.startswith("torch."):
        dev = call.args[0] if call.args else kwarg(call, "device")
        d = bare_cuda(mod, dev, scope)
        if d:
            return f"{mod.source(call)} with {d}"
    if q in CUDA_CONTEXT_CALLS:
        return mod.source(call)
    if q in TENSOR_FACTORIES:
        d = bare_cuda(mod, kwarg(call, "device"), scope)
        if d:
            return f"{mod.source(call)} with device {d}"
    if q == "torch.load":
        d = bare_cuda(mod, kwarg(call, "map_location"), scope)
        if d:
            return f"torch.load(map_location={d})"
    return None


RANKISH = ("rank", "gpu", "gpu_id", "device_id", "local_rank", "global_rank", "proc_id", "procid")
MAIN_FLAGS = ("is_main", "is_master", "master_process", "is_rank_zero", "is_global_zero", "is_main_process",
              "main_process", "is_local_main_process", "is_world_process_zero", "rank_zero")


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return ""


def rank_test(mod: Module, test: ast.AST) -> ast.AST | None:
    """The rank expression a condition compares to a constant (`rank == 0`, `get_rank() != 0`, `is_main`)."""
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            r = rank_test(mod, v)
            if r is not None:
                return r
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return rank_test(mod, test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        for a, b in ((left, right), (right, left)):
            if isinstance(b, ast.Constant) and isinstance(b.value, int) and not isinstance(b.value, bool):
                if isinstance(a, ast.BinOp):  # args.rank % ngpus_per_node == 0
                    a = a.left
                n = _name_of(a).lower()
                if n in RANKISH or n.endswith("rank") or n == "get_rank":
                    return a
        return None
    n = _name_of(test).lower()
    if any(n == f or n.startswith(f) for f in MAIN_FLAGS):
        return test
    return None


def spawn_calls(group: Group):
    """(module, call, qualname, target, args tuple, leading args the starter adds) per process start."""
    for mod, call, q in group.calls:
        if q in SPAWNS:
            args = kwarg(call, "args")
            if args is None and len(call.args) > 1:
                args = call.args[1]  # mp.spawn(fn, (a, b), nprocs)
            yield mod, call, q, (call.args[0] if call.args else kwarg(call, "fn")), args, 1
        elif q in PROCESSES:
            yield mod, call, q, kwarg(call, "target"), kwarg(call, "args"), 0

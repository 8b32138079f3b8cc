"""The order things happen in one process: from an entry, through calls into local helpers.

A *flow* starts at the module body (with its `if __name__ == "__main__":` block), at every function
a script hands to `mp.spawn`/`Process(target=)` (a new process: nothing is bound there yet), and at
any function that calls `init_process_group` but is reached by neither. Statements are walked in
source order; a call into a local function, a local class (its `__init__`), `self.method()` or
`obj.method()` on a local class instance is walked in place, up to MAX_DEPTH calls deep. Branches
are walked one after the other: a binding in any earlier branch counts as bound, which errs towards
silence (a missed finding) rather than a false alarm.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ddpdoctor.lint.facts import BARRIER, BINDS, DDP_NAMES, INIT, PROCESSES, SPAWNS, Group, Scope, cuda_work
from ddpdoctor.lint.module import Module, const_str, is_main_guard, kwarg, target_key

MAX_DEPTH = 4


@dataclass
class Event:
    kind: str  # "work" | "barrier"
    mod: Module
    node: ast.AST
    what: str
    chain: tuple[str, ...]


@dataclass
class Flow:
    name: str
    spawned: bool = False
    bound_at: int | None = None
    comm_bound_at: int | None = None  # DDP(device_ids=[i]) ran NCCL on device i: later barriers use it
    inited: bool = False
    backend_exprs: list = field(default_factory=list)  # (module, scope, expression) per init_process_group
    events: list[Event] = field(default_factory=list)
    reached: set = field(default_factory=set)  # function nodes walked

    def backend(self, values) -> str | None:
        """"nccl"/"gloo"/... from the first init_process_group: a literal, an argparse default, or the
        `"nccl" if torch.cuda.is_available() else "gloo"` choice (the GPU arm is the one that matters)."""
        for mod, scope, expr in self.backend_exprs:
            for v in _backend_candidates(mod, scope, expr, values):
                s = const_str(v)
                if s:
                    return s.lower()
        return None


def _backend_candidates(mod, scope, expr, values, depth=0):
    if expr is None or depth > 3:
        return
    if isinstance(expr, ast.IfExp):
        for arm in (expr.body, expr.orelse):
            if const_str(arm) == "nccl":
                yield arm
                return
        return
    if const_str(expr) is not None:
        yield expr
        return
    key = target_key(expr)
    if key is None:
        return
    vals = scope.assigned(key, getattr(expr, "lineno", None))
    for v in vals:
        yield from _backend_candidates(mod, scope, v, values, depth + 1)
    if not vals and isinstance(expr, ast.Attribute):
        d = values.argparse_default(expr.attr)
        if d is not None:
            yield from _backend_candidates(d[0], Scope(d[0], None), d[1], values, depth + 1)


def _loader_pins(mod: Module, expr: ast.AST, scope: Scope) -> bool:
    """`for b in loader` (or enumerate/tqdm(loader)) where loader = DataLoader(..., pin_memory=True)."""
    while isinstance(expr, ast.Call) and expr.args and isinstance(expr.func, ast.Name) \
            and expr.func.id in ("enumerate", "tqdm", "iter"):
        expr = expr.args[0]
    key = target_key(expr)
    if key is None:
        return False
    vals = scope.assigned(key, getattr(expr, "lineno", None))
    if not vals and scope.argument(key):
        cm, cs, arg = scope.argument(key)
        return _loader_pins(cm, arg, cs)
    for v in vals:
        if isinstance(v, ast.Call) and mod.qualname(v.func).endswith("DataLoader"):
            pm = kwarg(v, "pin_memory")
            if isinstance(pm, ast.Constant) and pm.value is True:
                return True
    return False


def _bind_arguments(fn, call: ast.Call, mod: Module, scope: Scope) -> dict:
    """{parameter: (module, scope, argument)} for a call into a local function (positional and keyword)."""
    pos = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    if pos and pos[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        pos = pos[1:]
    out = {}
    for name, a in zip(pos, call.args):
        if isinstance(a, ast.Starred):
            break
        out[name] = (mod, scope, a)
    for k in call.keywords:
        if k.arg:
            out[k.arg] = (mod, scope, k.value)
    return out


def _post_order_calls(node: ast.AST):
    """Calls in (roughly) evaluation order: arguments before the call that uses them; no nested defs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield from _post_order_calls(child)
    if isinstance(node, ast.Call):
        yield node


class Walker:
    def __init__(self, group: Group):
        self.group = group
        self.flows: list[Flow] = []
        self._pending: list[tuple[Flow, Module, ast.AST]] = []
        self._bindings: dict = {}  # function node -> its parameters' arguments in the call being walked
        self._funcs: dict[str, tuple[Module, ast.AST]] = {}
        self._classes: dict[str, tuple[Module, ast.ClassDef]] = {}
        for m in reversed(group.modules):  # the linted file's own names win
            for n, f in m.functions.items():
                self._funcs[n] = (m, f)
            for n, c in m.classes.items():
                self._classes[n] = (m, c)
        # `import utils` / `import util.misc as misc`: calls `utils.f()` go to that followed module
        self._by_modname = {}
        for m in group.modules[1:]:
            stem = m.path.stem if m.path.name != "__init__.py" else m.path.parent.name
            self._by_modname.setdefault(stem, m)

    def run(self) -> list[Flow]:
        main = self.group.main
        top = Flow("<module>")
        self.flows.append(top)
        self._walk_body(top, main, main.tree.body, None, 0, ())
        while self._pending:
            flow, mod, fn = self._pending.pop(0)
            self.flows.append(flow)
            self._walk_body(flow, mod, fn.body, fn, 1, (fn.name,))
        reached = set().union(*(f.reached for f in self.flows))
        for m in self.group.modules:  # functions that start a process group but no flow reached
            for call in m.calls:
                if m.qualname(call.func) != INIT:
                    continue
                node = m.function_of(call)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node not in reached:
                    reached.add(node)
                    fl = Flow(node.name)
                    self.flows.append(fl)
                    fl.reached.add(node)
                    self._walk_body(fl, m, node.body, node, 1, (node.name,))
        return self.flows

    # -- statements -------------------------------------------------------------------------
    def _walk_body(self, flow, mod, body, func, depth, chain):
        for stmt in body:
            self._walk_stmt(flow, mod, stmt, func, depth, chain)

    def _walk_stmt(self, flow, mod, stmt, func, depth, chain):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(stmt, ast.If):
            self._walk_expr(flow, mod, stmt.test, func, depth, chain)
            self._walk_body(flow, mod, stmt.body, func, depth, chain)
            self._walk_body(flow, mod, stmt.orelse, func, depth, chain)
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor)) and flow.bound_at is None \
                and _loader_pins(mod, stmt.iter, Scope(mod, func, self._bindings.get(func))):
            flow.events.append(Event("work", mod, stmt, f"iterating {mod.source(stmt.iter, 40)} "
                                     "(a DataLoader with pin_memory=True pins on the current device)", chain))
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            self._walk_expr(flow, mod, stmt.iter if hasattr(stmt, "iter") else stmt.test, func, depth, chain)
            self._walk_body(flow, mod, stmt.body, func, depth, chain)
            self._walk_body(flow, mod, stmt.orelse, func, depth, chain)
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self._walk_expr(flow, mod, item.context_expr, func, depth, chain)
            self._walk_body(flow, mod, stmt.body, func, depth, chain)
            return
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self._walk_body(flow, mod, stmt.body, func, depth, chain)
            for h in stmt.handlers:
                self._walk_body(flow, mod, h.body, func, depth, chain)
            self._walk_body(flow, mod, stmt.orelse, func, depth, chain)
            self._walk_body(flow, mod, stmt.finalbody, func, depth, chain)
            return
        if isinstance(stmt, ast.Match):
            self._walk_expr(flow, mod, stmt.subject, func, depth, chain)
            for case in stmt.cases:
                self._walk_body(flow, mod, case.body, func, depth, chain)
            return
        self._walk_expr(flow, mod, stmt, func, depth, chain)

    # -- expressions ------------------------------------------------------------------------
    def _walk_expr(self, flow, mod, node, func, depth, chain):
        scope = Scope(mod, func, self._bindings.get(func))
        for call in _post_order_calls(node):
            q = mod.qualname(call.func)
            if q in BINDS or (q == INIT and kwarg(call, "device_id") is not None):
                if flow.bound_at is None:
                    flow.bound_at = call.lineno
            if q == INIT:
                flow.inited = True
                flow.backend_exprs.append((mod, scope, call.args[0] if call.args else kwarg(call, "backend")))
            if q in DDP_NAMES and kwarg(call, "device_ids") is not None and flow.comm_bound_at is None:
                flow.comm_bound_at = call.lineno
            if flow.bound_at is not None:
                pass
            elif q == BARRIER and kwarg(call, "device_ids") is None:
                if flow.comm_bound_at is None:
                    flow.events.append(Event("barrier", mod, call, mod.source(call), chain))
            else:
                why = cuda_work(mod, call, q, scope)
                if why:
                    flow.events.append(Event("work", mod, call, why, chain))
            if q in SPAWNS and call.args:
                self._queue_target(mod, call.args[0], f"spawned by line {call.lineno}")
            elif q in PROCESSES:
                t = kwarg(call, "target")
                if t is not None:
                    self._queue_target(mod, t, f"started by line {call.lineno}")
            else:
                self._follow(flow, mod, call, func, depth, chain, scope)

    def _queue_target(self, mod, target, why):
        if isinstance(target, ast.Name) and target.id in self._funcs:
            m, fn = self._funcs[target.id]
            if any(f.name == fn.name and f.spawned for f in self.flows) or any(p[2] is fn for p in self._pending):
                return
            fl = Flow(fn.name, spawned=True)
            fl.reached.add(fn)
            self._pending.append((fl, m, fn))

    def _follow(self, flow, mod, call, func, depth, chain, scope):
        if depth >= MAX_DEPTH:
            return
        target = self.resolve(mod, call, func, scope)
        if target is None:
            return
        tmod, tfn = target
        if tfn in flow.reached and tfn.name in chain:
            return  # recursion
        flow.reached.add(tfn)
        saved = self._bindings.get(tfn)
        self._bindings[tfn] = _bind_arguments(tfn, call, mod, scope)
        self._walk_body(flow, tmod, tfn.body, tfn, depth + 1, chain + (tfn.name,))
        self._bindings[tfn] = saved

    def resolve(self, mod: Module, call: ast.Call, func, scope: Scope):
        """The local function a call runs, or None (library calls, dynamic dispatch)."""
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in self._funcs:
                return self._funcs[f.id]
            if f.id in self._classes:
                return self._method(f.id, "__init__")
            return None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) \
                and f.value.func.id in self._classes:
            return self._method(f.value.func.id, f.attr)  # Trainer(...).train()
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            owner = f.value.id
            origin = mod.aliases.get(owner)
            if origin is not None and origin.rsplit(".", 1)[-1] in self._by_modname:
                target = self._by_modname[origin.rsplit(".", 1)[-1]]
                if f.attr in target.functions:
                    return target, target.functions[f.attr]
                if f.attr in target.classes:
                    return self._method_in(target, target.classes[f.attr], "__init__")
                return None
            if owner == "self" and func is not None:
                cls = mod.class_of(func)
                if cls is not None:
                    return self._method(cls.name, f.attr)
                return None
            for v in reversed(scope.assigned(owner, call.lineno)):
                if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in self._classes:
                    return self._method(v.func.id, f.attr)
        return None

    def _method(self, cls_name: str, meth: str):
        m, cls = self._classes[cls_name]
        return self._method_in(m, cls, meth)

    @staticmethod
    def _method_in(m, cls, meth: str):
        for s in cls.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == meth:
                return m, s
        return None


def module_level_unguarded(mod: Module, node: ast.AST) -> bool:
    """True when the statement holding `node` runs on import: module level, outside the main guard."""
    p = node
    while p is not None:
        parent = mod.parents.get(p)
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(parent, ast.If) and is_main_guard(parent.test) and p in parent.body:
            return False
        if isinstance(parent, ast.Module):
            return True
        p = parent
    return False


def key_of(node: ast.AST) -> str | None:
    return target_key(node)

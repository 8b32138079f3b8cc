"""Simple facts carried through a project: what a value *is* (global rank, local rank, a literal).

A value is followed through assignments (in the function, its class's `self.x`, the module, or
`args.x` set anywhere in the group, e.g. by `utils.init_distributed_mode(args)`), both arms of a
conditional expression (`int(os.environ["RANK"]) if ... else -1`: the literal arm is a fallback),
the return values of the project's own functions (also in imported modules), function parameters
(the value at every call site in the group; the first parameter of a function handed to
`mp.spawn` is the process index on this node), and argparse defaults (`args.local_rank` with
`default=int(os.environ["LOCAL_RANK"])`).

Kinds: "global" (the global rank), "local" (an index on this node), "literal" (a number written
in the code), or None (unknown: the rules then stay silent).
"""
from __future__ import annotations

import ast
from functools import cached_property

from ddpdoctor.lint.facts import DIST, GLOBAL_RANK_VARS, LOCAL_RANK_VARS, SPAWNS, Group, Scope, env_key
from ddpdoctor.lint.module import Module, const_str, kwarg, target_key

MAX_DEPTH = 6


def join(kinds) -> str | None:
    """One kind for several possible values: literal fallbacks give way to a real rank."""
    ks = set(kinds)
    real = ks - {"literal"}
    if len(real) == 1 and None not in real:
        return real.pop()
    if not real and "literal" in ks:
        return "literal"
    return None


def option_dest(call: ast.Call) -> str | None:
    """argparse's dest for add_argument("--local-rank", "--local_rank", ...): the first long option."""
    d = const_str(kwarg(call, "dest"))
    if d:
        return d
    for a in call.args:
        s = const_str(a)
        if s and s.startswith("--"):
            return s[2:].replace("-", "_")
    return None


class Values:
    def __init__(self, group: Group, walker):
        self.group, self.walker = group, walker
        self._sites: dict = {}

    # -- indexes built once ------------------------------------------------------------------
    @cached_property
    def argparse(self) -> dict[str, list[tuple[Module, ast.Call]]]:
        out: dict[str, list] = {}
        for m, c, _ in self.group.calls:
            if isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument":
                d = option_dest(c)
                if d:
                    out.setdefault(d, []).append((m, c))
        return out

    @cached_property
    def attr_assigns(self) -> dict[str, list[tuple[Module, ast.AST, ast.AST | None]]]:
        """`obj.attr = value` anywhere in the group, keyed by "obj.attr" (obj other than self)."""
        out: dict[str, list] = {}
        for m in self.group.modules:
            for key, entries in m.assigns.items():
                if "." in key and not key.startswith("self."):
                    for v, fn, _ in entries:
                        out.setdefault(key, []).append((m, v, fn))
        return out

    @cached_property
    def spawn_targets(self) -> set:
        out = set()
        for m, c, q in self.group.calls:
            if q in SPAWNS and c.args and isinstance(c.args[0], ast.Name):
                got = self.walker._funcs.get(c.args[0].id)
                if got:
                    out.add(got[1])
        return out

    @cached_property
    def _calls_by_name(self) -> dict[str, list]:
        """Calls in the group by the name they call (`f(...)`, `x.f(...)`): candidates for call_sites."""
        out: dict[str, list] = {}
        for m, c, _ in self.group.calls:
            f = c.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name:
                out.setdefault(name, []).append((m, c))
        return out

    def call_sites(self, fn) -> list:
        """[(module, call, offset)] of the calls that run `fn`; offset 1 when `self` takes the first slot."""
        got = self._sites.get(fn)
        if got is not None:
            return got
        got = []
        pos = [p.arg for p in fn.args.posonlyargs + fn.args.args]
        off = 1 if pos and pos[0] in ("self", "cls") else 0
        for m, c in self._calls_by_name.get(fn.name, ()):
            cf = m.function_of(c)
            target = self.walker.resolve(m, c, cf, Scope(m, cf))
            if target is not None and target[1] is fn:
                got.append((m, c, off))
        self._sites[fn] = got
        return got

    # -- questions ------------------------------------------------------------------------------
    def argparse_default(self, dest: str):
        """(module, default expression) of `--dest`, or None when not parsed here."""
        got = self.argparse.get(dest)
        if not got:
            return None
        m, c = got[0]
        return m, kwarg(c, "default")

    def rank_kind(self, mod: Module, expr: ast.AST | None, scope: Scope, depth: int = 0) -> str | None:
        if expr is None or depth > MAX_DEPTH:
            return None
        k = env_key(expr)
        if k in GLOBAL_RANK_VARS:
            return "global"
        if k in LOCAL_RANK_VARS:
            return "local"
        if isinstance(expr, ast.Constant):
            return "literal" if isinstance(expr.value, int) and not isinstance(expr.value, bool) else None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
            return "literal"
        if isinstance(expr, ast.IfExp):
            return join([self.rank_kind(mod, expr.body, scope, depth + 1),
                         self.rank_kind(mod, expr.orelse, scope, depth + 1)])
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return "local"  # rank % torch.cuda.device_count() (or % gpus_per_node): an index on this node
        if isinstance(expr, ast.Call):
            return self._call_kind(mod, expr, scope, depth)
        key = target_key(expr)
        if key is None:
            return None
        vals = scope.assigned(key, getattr(expr, "lineno", None))
        if vals:
            return join(self.rank_kind(mod, v, scope, depth + 1) for v in vals)
        if isinstance(expr, ast.Name):
            return self._param_kind(mod, expr.id, scope, depth)
        if isinstance(expr, ast.Attribute) and not key.startswith("self."):
            elsewhere = self.attr_assigns.get(key, ())
            if elsewhere:
                return join(self.rank_kind(m, v, Scope(m, fn), depth + 1) for m, v, fn in elsewhere)
            d = self.argparse_default(expr.attr)
            if d is not None:
                dm, dv = d
                return self.rank_kind(dm, dv, Scope(dm, dm.function_of(dv) if dv is not None else None), depth + 1) \
                    if dv is not None else None
        return None

    def _call_kind(self, mod, expr: ast.Call, scope, depth):
        q = mod.qualname(expr.func)
        if q == f"{DIST}.get_rank":
            return "global"
        if q == f"{DIST}.get_node_local_rank":
            return "local"
        if isinstance(expr.func, ast.Name) and expr.func.id == "int" and expr.args:
            return self.rank_kind(mod, expr.args[0], scope, depth + 1)
        target = self.walker.resolve(mod, expr, scope.func, scope)
        if target is None:
            return None
        tmod, tfn = target
        inner = Scope(tmod, tfn)
        rets = [r.value for r in ast.walk(tfn) if isinstance(r, ast.Return) and r.value is not None
                and tmod.function_of(r) is tfn]
        if not rets:
            return None
        return join(self.rank_kind(tmod, r, inner, depth + 1) for r in rets)

    def _param_kind(self, mod, name: str, scope: Scope, depth):
        fn = scope.func
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        pos = [p.arg for p in fn.args.posonlyargs + fn.args.args]
        if name not in pos and name not in [p.arg for p in fn.args.kwonlyargs]:
            return None
        if fn in self.spawn_targets and pos and pos[0] == name:
            return "local"  # mp.spawn passes the process index (0..nprocs-1 on this node) first
        kinds = []
        for m, call, off in self.call_sites(fn):
            arg = None
            if name in pos:
                i = pos.index(name) - off
                if 0 <= i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:i + 1]):
                    arg = call.args[i]
            if arg is None:
                arg = kwarg(call, name)
            if arg is None:
                return None  # **kwargs, *args or a default: cannot tell
            cfn = m.function_of(call)
            kinds.append(self.rank_kind(m, arg, Scope(m, cfn), depth + 1))
        return join(kinds) if kinds else None

    def device_indexes(self, mod: Module, expr: ast.AST | None, scope: Scope, depth: int = 0, follow_names=True):
        """The expressions a device value takes its index from: `f"cuda:{rank}"`, `torch.device("cuda", r)`,
        `"cuda:%d" % r`, `"cuda:" + str(r)`, a name assigned one of those, or the expression itself."""
        if expr is None or depth > 4:
            return
        if isinstance(expr, ast.JoinedStr):
            vals = expr.values
            for i, v in enumerate(vals):
                if isinstance(v, ast.FormattedValue) and i > 0:
                    prev = vals[i - 1]
                    if isinstance(prev, ast.Constant) and isinstance(prev.value, str) and prev.value.endswith("cuda:"):
                        yield v.value
            return
        if isinstance(expr, ast.BinOp) and const_str(expr.left) and const_str(expr.left).startswith("cuda"):
            right = expr.right
            if isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and right.func.id == "str" and right.args:
                right = right.args[0]
            if isinstance(expr.op, (ast.Mod, ast.Add)):
                yield right
            return
        if isinstance(expr, ast.Call):
            q = mod.qualname(expr.func)
            if q == "torch.device":
                if len(expr.args) == 2 and const_str(expr.args[0]) == "cuda":
                    yield expr.args[1]
                elif len(expr.args) == 1:
                    yield from self.device_indexes(mod, expr.args[0], scope, depth + 1, follow_names)
                elif kwarg(expr, "index") is not None:
                    yield kwarg(expr, "index")
                return
            if isinstance(expr.func, ast.Attribute) and expr.func.attr == "format" and const_str(expr.func.value) \
                    and const_str(expr.func.value).startswith("cuda:") and expr.args:
                yield expr.args[0]
                return
            yield expr
            return
        if isinstance(expr, (ast.Name, ast.Attribute)) and follow_names:
            key = target_key(expr)
            vals = scope.assigned(key, getattr(expr, "lineno", None)) if key else []
            dev = [v for v in vals if isinstance(v, (ast.JoinedStr, ast.BinOp, ast.Call)) and self._is_device_value(mod, v)]
            if dev:
                for v in dev:
                    yield from self.device_indexes(mod, v, scope, depth + 1, follow_names)
                return
            yield expr
            return
        yield expr

    @staticmethod
    def _is_device_value(mod, v) -> bool:
        if isinstance(v, ast.Call):
            if mod.qualname(v.func) == "torch.device":
                return True
            return isinstance(v.func, ast.Attribute) and v.func.attr == "format" and bool(const_str(v.func.value))
        s = ast.unparse(v) if isinstance(v, (ast.JoinedStr, ast.BinOp)) else ""
        return "cuda" in s

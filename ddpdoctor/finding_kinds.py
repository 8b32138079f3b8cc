"""The finding kinds a check can yield, read from its code (AST, nothing runs).

A finding's id is its check's id and its kind (`DD102.refused`, model.Finding.kind); a site silences
findings by that id (/etc/ddpdoctor.toml `[checks] silenced`), so the check pages and
`ddpdoctor explain DDnnn` list them. They are read from the source rather than declared beside the
check, so the list cannot drift from what the code yields: every `Finding(...)` call in the check's
function and in the functions it calls (followed through the module's names, inside the ddpdoctor
package), with `kind=` a string literal, a conditional of literals, or absent (model.DEFAULT_KIND).
A kind computed at run time is reported as its expression, so the page says where to look instead
of pretending to know.
"""
from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass
from types import FunctionType

from ddpdoctor.model import DEFAULT_KIND

_MAX_DEPTH = 4  # check -> helper -> helper ...: deep enough for checks/, bounded for safety


@dataclass(frozen=True)
class Kinds:
    literal: tuple[str, ...]   # sorted, DEFAULT_KIND included when a Finding leaves kind out
    computed: tuple[str, ...]  # source text of kind expressions that are not literals

    def ids(self, check_id: str) -> list[str]:
        return [f"{check_id}.{k}" for k in self.literal]


def _literals(node: ast.expr, env: dict | None = None) -> tuple[set[str], bool]:
    """Strings a kind expression can take, and whether it can also take something unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}, False
    if isinstance(node, ast.IfExp):
        a, ua = _literals(node.body, env)
        b, ub = _literals(node.orelse, env)
        return a | b, ua or ub
    if isinstance(node, ast.BoolOp):  # `t.state or "error"`: the literal operands, plus the unknown ones
        out, unknown = set(), False
        for v in node.values:
            s, u = _literals(v, env)
            out |= s
            unknown = unknown or u
        return out, unknown
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and env is not None):
        table = env.get(node.func.value.id)  # `STATE_KIND.get(state, "error")`: a module-level str -> str table
        if isinstance(table, dict) and all(isinstance(v, str) for v in table.values()):
            default, unknown = _literals(node.args[1], env) if len(node.args) > 1 else (set(), True)
            return set(table.values()) | default, unknown
    return set(), True


def _is_finding_call(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "Finding") or (isinstance(f, ast.Attribute) and f.attr == "Finding")


def _callee(call: ast.Call, env: dict) -> FunctionType | None:
    """The ddpdoctor function a call names through the module's globals (`helper(...)`, `drift.finding(...)`)."""
    f = call.func
    obj = None
    if isinstance(f, ast.Name):
        obj = env.get(f.id)
    elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        obj = getattr(env.get(f.value.id), f.attr, None)
    if isinstance(obj, FunctionType) and (obj.__module__ or "").startswith("ddpdoctor.") \
            and obj.__module__ != "ddpdoctor.model":
        return obj
    return None


@functools.lru_cache(maxsize=None)
def _module_tree(path: str) -> tuple[str, dict[int, ast.AST]]:
    """A source file parsed once: its text and its functions by first line (the first decorator's, as
    `co_firstlineno` counts it)."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    funcs = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs[node.decorator_list[0].lineno if node.decorator_list else node.lineno] = node
    return src, funcs


def _function_node(func: FunctionType) -> tuple[str, ast.AST] | None:
    try:
        path = inspect.getsourcefile(func)
        if not path:
            return None
        src, funcs = _module_tree(path)
    except (OSError, TypeError, SyntaxError, UnicodeDecodeError):  # no source (a frozen build): nothing to say
        return None
    node = funcs.get(func.__code__.co_firstlineno)
    return (src, node) if node is not None else None


@functools.lru_cache(maxsize=None)
def _direct(func: FunctionType) -> tuple[frozenset[str], frozenset[str], tuple[FunctionType, ...]]:
    """What one function's own code says: literal kinds, computed kind expressions, ddpdoctor functions it calls."""
    found = _function_node(func)
    if found is None:
        return frozenset(), frozenset(), ()
    src, tree = found
    env = func.__globals__
    literal: set[str] = set()
    computed: set[str] = set()
    callees: list[FunctionType] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _is_finding_call(node):
            kw = next((k for k in node.keywords if k.arg == "kind"), None)
            if kw is None:
                literal.add(DEFAULT_KIND)
                continue
            kinds, unknown = _literals(kw.value, env)
            literal |= kinds
            if unknown:
                computed.add(ast.get_source_segment(src, kw.value) or ast.dump(kw.value))
            continue
        callee = _callee(node, env)
        if callee is not None and callee is not func:
            callees.append(callee)
    return frozenset(literal), frozenset(computed), tuple(callees)


def _walk(func: FunctionType, literal: set[str], computed: set[str], seen: set, depth: int) -> None:
    if func in seen or depth > _MAX_DEPTH:
        return
    seen.add(func)
    lit, comp, callees = _direct(func)
    literal |= lit
    computed |= comp
    for callee in callees:
        _walk(callee, literal, computed, seen, depth + 1)


@functools.lru_cache(maxsize=None)
def kinds_of(func: FunctionType) -> Kinds:
    """The kinds of the findings `func` (a check's function) can yield."""
    literal: set[str] = set()
    computed: set[str] = set()
    _walk(inspect.unwrap(func), literal, computed, set(), 0)
    return Kinds(tuple(sorted(literal)), tuple(sorted(computed)))


def describe(check_id: str, kinds: Kinds) -> str:
    """Markdown: the finding ids, one per line, and what is computed at run time."""
    if not kinds.literal and not kinds.computed:
        return "It yields no findings of its own (its result is its status)."
    out = [f"- `{i}`" for i in kinds.ids(check_id)]
    out += [f"- `{check_id}.<{expr}>` (computed at run time: see the check's code)" for expr in kinds.computed]
    return "\n".join(out)

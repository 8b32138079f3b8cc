"""What one parsed file holds, as plain facts the rules read: import aliases, definitions, parents.

Everything is derived from Python's own `ast` (never by importing the script or torch). Names are
resolved through the file's imports, so `dist.init_process_group`, `init_process_group` and
`torch.distributed.init_process_group` all read as `torch.distributed.init_process_group`.
"""
from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(eq=False)  # identity: a module is one parsed file (field-wise == compared whole trees)
class Module:
    path: Path
    text: str
    tree: ast.Module
    display: str = ""  # how findings name the file (path, or "nb.ipynb[cell 3]" mapping is in line_map)
    line_map: dict[int, str] = field(default_factory=dict)  # notebook: concatenated line -> "cell N:line M"
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted origin
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module-level defs
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    local_imports: list[tuple[str, list[str], int]] = field(default_factory=list)  # (module, names, level)
    lines: list[str] = field(default_factory=list)
    nodes: list[ast.AST] = field(default_factory=list)  # every node, one walk
    calls: list[ast.Call] = field(default_factory=list)
    # assignment index: key ("x", "self.x") -> [(value, enclosing function or None, its class or None)]
    assigns: dict[str, list[tuple[ast.AST, ast.AST | None, ast.AST | None]]] = field(default_factory=dict)
    memo: dict = field(default_factory=dict)  # facts computed once per module (facts.module_env_reads, ...)
    _fn_of: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, path: Path, text: str, tree: ast.Module, display: str = "", line_map=None) -> "Module":
        m = cls(path, text, tree, display or str(path), dict(line_map or {}))
        m.lines = text.splitlines()
        # one breadth-first pass (ast.walk's order) that records parents as it goes: walking and then
        # asking iter_child_nodes again for the parent map doubled the cost of a parse
        queue, nodes, parents = deque([tree]), m.nodes, m.parents
        AST, lst = ast.AST, list
        while queue:
            node = queue.popleft()
            nodes.append(node)
            for name in node._fields:
                if name == "ctx":
                    continue  # Load()/Store(): one shared instance per kind, no fact in it, a third of the nodes
                v = getattr(node, name, None)
                if isinstance(v, AST):
                    parents[v] = node
                    queue.append(v)
                elif isinstance(v, lst):
                    for c in v:
                        if isinstance(c, AST):
                            parents[c] = node
                            queue.append(c)
        for node in m.nodes:
            if isinstance(node, ast.Call):
                m.calls.append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                fn = m.function_of(node)
                cls = m.class_of(fn) if fn is not None else None
                for t in targets:
                    pairs = [(t, node.value)]
                    if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs = list(zip(t.elts, node.value.elts))
                    for tt, vv in pairs:
                        k = target_key(tt)
                        if k:
                            m.assigns.setdefault(k, []).append((vv, fn, cls))
        for node in m.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] not in _KNOWN_TOP:  # `import utils`, `import util.misc as misc`
                        m.local_imports.append((a.name, [], 0))
                    if a.asname:
                        m.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        m.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 0 and base:
                    for a in node.names:
                        m.aliases[a.asname or a.name] = f"{base}.{a.name}"
                if node.level or (base and not base.split(".")[0] in _KNOWN_TOP):
                    m.local_imports.append((base, [a.name for a in node.names], node.level))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                m.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                m.classes[node.name] = node
        for node in m.nodes:  # `if __name__ == "__main__":` bodies may define functions too
            if isinstance(node, ast.If) and is_main_guard(node.test):
                for s in node.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        m.functions.setdefault(s.name, s)
        return m

    def where(self, line: int) -> str:
        """`path:line`, or `nb.ipynb:cell 3:line 4` for notebooks."""
        if self.line_map:
            return f"{self.display}:{self.line_map.get(line, f'line {line}')}"
        return f"{self.display}:{line}"

    def qualname(self, node: ast.AST) -> str:
        """Dotted name of a Name/Attribute chain with the first part resolved through imports."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        head = self.aliases.get(node.id, node.id)
        return ".".join([head] + parts[::-1])

    def enclosing(self, node: ast.AST, kinds) -> ast.AST | None:
        p = self.parents.get(node)
        while p is not None and not isinstance(p, kinds):
            p = self.parents.get(p)
        return p

    def function_of(self, node: ast.AST):
        got = self._fn_of.get(node, self)
        if got is self:
            got = self._fn_of[node] = self.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        return got

    def class_of(self, node: ast.AST):
        return self.enclosing(node, ast.ClassDef)

    def source(self, node: ast.AST, limit: int = 80) -> str:
        try:
            s = ast.unparse(node)
        except Exception:  # noqa: BLE001 - unparse of odd nodes: show nothing rather than fail
            return "?"
        return s if len(s) <= limit else s[: limit - 3] + "..."

    def noqa(self, line: int, rule_id: str) -> bool:
        """`# noqa` (all rules) or `# noqa: DL001, DL005` on that line."""
        if not 1 <= line <= len(self.lines):
            return False
        text = self.lines[line - 1]
        i = text.find("# noqa")
        if i < 0:
            return False
        rest = text[i + 6:]
        if not rest.lstrip().startswith(":"):
            return True
        codes = {c.strip().upper() for c in rest.lstrip()[1:].replace(",", " ").split()}
        return rule_id in codes or any(rule_id.startswith(c) for c in codes if c.startswith("DL"))


# Top-level packages that are never the user's own module (imports of anything else may be local).
_KNOWN_TOP = {
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "os", "sys", "argparse", "time", "math", "json",
    "random", "typing", "dataclasses", "pathlib", "collections", "functools", "itertools", "logging", "datetime",
    "accelerate", "lightning", "pytorch_lightning", "transformers", "datasets", "deepspeed", "apex", "tqdm",
    "wandb", "yaml", "PIL", "scipy", "sklearn", "pandas", "matplotlib", "re", "io", "shutil", "tempfile",
    "subprocess", "socket", "urllib", "warnings", "contextlib", "copy", "pickle", "glob", "enum", "abc",
    "torchtitan", "timm", "einops", "safetensors", "tensorboard", "fsspec", "huggingface_hub", "evaluate",
    "peft", "omegaconf", "hydra", "torchmetrics", "multiprocessing", "threading", "queue", "platform",
    "inspect", "traceback", "signal", "string", "textwrap", "hashlib", "uuid", "struct", "gc", "operator",
}


def is_main_guard(test: ast.AST) -> bool:
    """`__name__ == "__main__"` in either order."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [test.left, test.comparators[0]]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        return bool(names and consts)
    return False


def const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def kwarg(call: ast.Call, name: str) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def target_key(node: ast.AST) -> str | None:
    """Name or `self.attr` assignment targets, as a key ("x", "self.x")."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None

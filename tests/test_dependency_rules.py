"""The package's dependency rules, read from every module's imports (AST, no import side effects).

Data-driven: the rules name what a layer MAY import; every other ddpdoctor package is forbidden,
so a feature package added later (inspect/, lint/, flightrec/, runcmd/ ...) is covered without
editing this file. docs/writing-a-check.md states the same rules for people.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import click

PKG = Path(__file__).resolve().parent.parent / "ddpdoctor"

# What checks/ may import: the model, the registry, the facts they judge, and small pure helpers.
CHECKS_MAY_IMPORT = {
    "ddpdoctor", "ddpdoctor.model", "ddpdoctor.registry", "ddpdoctor.facts", "ddpdoctor.units",
    "ddpdoctor.checks", "ddpdoctor.validate", "ddpdoctor.ifname", "ddpdoctor.knownvars",
}
# What facts/ may import: the probes that gather them, small pure helpers, and the site config
# (thresholds a node's facts carry). Never a check, a renderer, a command or a feature package.
FACTS_MAY_IMPORT = {
    "ddpdoctor", "ddpdoctor.model", "ddpdoctor.facts", "ddpdoctor.probes",
    "ddpdoctor.memo", "ddpdoctor.units", "ddpdoctor.hostlist", "ddpdoctor.validate", "ddpdoctor.ifname",
    "ddpdoctor.knownvars", "ddpdoctor.launch", "ddpdoctor.siteconfig",
}
# What render/ may import: reports in, text out (facts only for their plain-data helpers).
# ddpdoctor.commands: each command's declaration names the module of its own text section.
RENDER_MAY_IMPORT = {"ddpdoctor.model", "ddpdoctor.facts", "ddpdoctor.units", "ddpdoctor.render", "ddpdoctor.streams",
                     "ddpdoctor.commands"}
# Imports that break the rule today, each with the reason it is still there. The test fails when
# an entry is no longer needed, so this list can only shrink.
KNOWN_DEBT: dict[tuple[str, str], str] = {}

# The layers, bottom first: a module may import its own layer and those below, never one above.
# A top-level package or module not named here is a feature (the layer under cli/): a new feature
# package needs no edit, a new core helper must be placed here by whoever adds it.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # commands: the declarations (names, "module:attr" strings resolved at run time), imported by the
    # registry and render/text; it imports nothing of ddpdoctor itself
    ("core helpers", frozenset({"ddpdoctor", "model", "units", "validate", "memo", "streams", "tomlread", "hostlist",
                                "launch", "knownvars", "siteconfig", "commands", "readfile"})),
    ("probes", frozenset({"probes"})),       # read the world -> plain data
    ("facts", frozenset({"facts", "ifname"})),  # typed contexts built from probes
    ("judgement", frozenset({"registry", "checks", "runner"})),
    ("render", frozenset({"render"})),
    ("features", frozenset()),               # smoke/ cluster/ slurm/ inspect/ lint/ peerprobe/ ... (the default)
    ("commands", frozenset({"cli", "__main__"})),
)
# Import cycles that exist today, each with its reason; the test fails when one is gone (shrink only).
KNOWN_CYCLES: dict[frozenset[str], str] = {  # modules ("ddpdoctor.x.y") or top-level packages ("checks")
    frozenset({"registry", "checks"}):
        "the registry imports every module of checks/ on first use to register them (found with pkgutil, "
        "so a new module needs no list); checks import the registry's @check",
}
# The modules the torch worker runs in every rank: they import no check (judgement runs in the supervisor).
WORKER_MODULES = ("ddpdoctor.smoke.worker", "ddpdoctor.smoke.rendezvous", "ddpdoctor.smoke.collectives",
                  "ddpdoctor.smoke.bandwidth_run", "ddpdoctor.smoke.gpumem", "ddpdoctor.smoke.watchdog",
                  "ddpdoctor.smoke.faults")


def _modname(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.AST:
    """A module's syntax tree, parsed once per session (the tests here read every module several times)."""
    return ast.parse(path.read_text(), str(path))


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`: read by type checkers, never executed."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _imports(path: Path, src: str | None = None) -> set[str]:
    """Absolute names of the ddpdoctor modules a file imports (top level and inside functions;
    not those under `if TYPE_CHECKING:`, which never run)."""
    mod = _modname(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    tree = _parsed(path) if src is None else ast.parse(src, str(path))
    type_only = _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from ddpdoctor.smoke import plan` imports the module ddpdoctor.smoke.plan; a name that is
            # not a module (a function, a class) counts as an import of `name` itself
            for a in node.names:
                sub = PKG.parent / f"{name}.{a.name}".replace(".", "/")
                out.add(f"{name}.{a.name}" if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists() else name)
    return {n for n in out if n == "ddpdoctor" or n.startswith("ddpdoctor.")}


@functools.lru_cache(maxsize=1)
def _graph_once() -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((_modname(p), frozenset(_imports(p))) for p in sorted(PKG.rglob("*.py")))


def _graph() -> dict[str, set[str]]:
    """Every module's imports (parsed once per session: the tree does not change under a test run)."""
    return {m: set(d) for m, d in _graph_once()}


def _allowed(name: str, allow: set[str]) -> bool:
    return any(name == a or (a != "ddpdoctor" and name.startswith(a + ".")) for a in allow)


def test_the_graph_is_read():
    g = _graph()
    # guards against a walker that silently finds nothing: these imports exist today
    assert "ddpdoctor.registry" in g["ddpdoctor.checks.env"]
    assert "ddpdoctor.cli.common" in g["ddpdoctor.cli.network"]
    assert "ddpdoctor.smoke.plan" in g["ddpdoctor.smoke.worker"]


def test_checks_import_only_model_registry_facts_and_helpers():
    bad = []
    for mod, deps in _graph().items():
        if not mod.startswith("ddpdoctor.checks"):
            continue
        bad += [(mod, d) for d in sorted(deps) if not _allowed(d, CHECKS_MAY_IMPORT) and (mod, d) not in KNOWN_DEBT]
    assert not bad, "checks/ must judge facts, not import feature packages:\n" + "\n".join(f"{m} -> {d}" for m, d in bad)


def _breaking(prefix: str, allow: set[str]) -> list[tuple[str, str]]:
    return [(mod, d) for mod, deps in _graph().items() if mod == prefix or mod.startswith(prefix + ".")
            for d in sorted(deps) if not _allowed(d, allow)]


def test_facts_import_no_judgement_renderer_or_command():
    bad = _breaking("ddpdoctor.facts", FACTS_MAY_IMPORT)
    assert not bad, f"facts/ gathers and types facts; these imports break that: {bad}"


def test_renderers_import_only_the_model_facts_and_units():
    bad = _breaking("ddpdoctor.render", RENDER_MAY_IMPORT)
    assert not bad, f"render/ turns reports into text; these imports break that: {bad}"


def test_every_commands_own_section_has_a_renderer():
    """render/text.py imports each command's section renderer by name (importlib, which the walker
    cannot see): every name must be a module with lines(report)."""
    import importlib
    from ddpdoctor.commands import COMMANDS
    sections = [(c.name, c.section) for c in COMMANDS if c.section]
    assert sections
    for command, name in sections:
        assert callable(getattr(importlib.import_module(name), "lines", None)), (command, name)


def test_every_declared_command_and_context_type_resolves():
    """commands.py names modules by string (so nothing is imported before it is used): each must exist."""
    from ddpdoctor.commands import COMMANDS
    for c in COMMANDS:
        assert isinstance(c.load_cli(), click.Command), c.name
        if c.context_type:
            assert isinstance(c.load_context_type(), type), c.name


def test_no_table_is_keyed_by_command_name():
    """One declaration per command (ddpdoctor/commands.py): a dict or set literal elsewhere whose keys
    are command names is a second table that a new command would have to be added to."""
    from ddpdoctor.commands import COMMANDS
    names = {c.name for c in COMMANDS}
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "commands.py":
            continue
        tree = _parsed(path)
        tags = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "tags"}  # a check's own tags
        for node in ast.walk(tree):
            if id(node) in tags:
                continue
            keys = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, (ast.Set, ast.Tuple, ast.List)) else []
            strs = {k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(strs & names) >= 3 and len(strs & names) * 2 >= len(strs):
                bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {sorted(strs & names)}")
    assert not bad, "tables keyed by command name (declare the command in ddpdoctor/commands.py):\n" + "\n".join(bad)


def test_no_command_puts_pre_rendered_text_in_a_report():
    """Reports carry data; render/ writes the text (issue 9: smoke, network, inspect and cluster did)."""
    bad = []
    for path in sorted((PKG / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "text" for k in node.keys):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"a report's extra holds pre-rendered text: {bad}"


def test_known_debt_is_still_debt():
    g = _graph()
    stale = [k for k in KNOWN_DEBT if k[1] not in g.get(k[0], set())]
    assert not stale, f"remove these from KNOWN_DEBT, the import is gone: {stale}"


def test_nothing_imports_cli():
    bad = [(m, d) for m, deps in _graph().items() if not m.startswith("ddpdoctor.cli") and m != "ddpdoctor.__main__"
           for d in deps if d == "ddpdoctor.cli" or d.startswith("ddpdoctor.cli.")]
    assert not bad, f"only cli/ (and __main__) may import cli: {bad}"


def test_the_torch_worker_imports_no_check():
    g = _graph()
    for mod in WORKER_MODULES:
        assert not [d for d in g[mod] if d.startswith("ddpdoctor.checks")], mod


def test_rules_catch_a_violation():
    """The walker sees every import form the rules rely on (else the rule tests could pass vacuously)."""
    src = ("from ddpdoctor.smoke import plan\nimport ddpdoctor.cli\nfrom . import gpu\n"
           "def f():\n    from ..siteconfig import ConfigError\n")
    deps = _imports(PKG / "checks" / "x.py", src)
    assert deps == {"ddpdoctor.smoke.plan", "ddpdoctor.cli", "ddpdoctor.checks.gpu", "ddpdoctor.siteconfig"}
    assert [d for d in deps if not _allowed(d, CHECKS_MAY_IMPORT)] != []


def _top(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "ddpdoctor"


def _layer(mod: str) -> int:
    top = _top(mod)
    for i, (_, members) in enumerate(LAYERS):
        if top in members:
            return i
    return [name for name, _ in LAYERS].index("features")


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} ({LAYERS[_layer(m)][0]}) -> {d} ({LAYERS[_layer(d)][0]})"
            for m, deps in sorted(graph.items()) for d in sorted(deps) if _layer(d) > _layer(m)]


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(_top(m), set()).update(_top(d) for d in deps if _top(d) != _top(m))
    return out


def test_no_import_runs_up_a_layer():
    bad = _upward(_graph())
    assert not bad, "an import runs up a layer (LAYERS, bottom first):\n" + "\n".join(bad)


def test_no_import_cycle_between_modules():
    found = set(_cycles(_graph()))
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if all("." in m for m in c) and c not in found]
    assert not gone, f"remove these from KNOWN_CYCLES, the cycle is gone: {gone}"


def test_no_import_cycle_between_packages():
    found = set(_cycles(_package_graph(_graph())))
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not new, f"packages that import each other: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if all("." not in m for m in c) and c not in found]
    assert not gone, f"remove these from KNOWN_CYCLES, the cycle is gone: {gone}"


def test_layer_and_cycle_rules_catch_a_violation():
    """The knot issue 20 untied, rebuilt by hand: a probe importing a feature package that imports
    facts/ back is both an upward arrow and a cycle."""
    g = {"ddpdoctor.probes.pathmtu": {"ddpdoctor.peerprobe.protocol"},
         "ddpdoctor.peerprobe.protocol": {"ddpdoctor.probes.sockets"},
         "ddpdoctor.peerprobe.server": {"ddpdoctor.facts.network"},
         "ddpdoctor.facts.network": {"ddpdoctor.probes.pathmtu"},
         "ddpdoctor.probes.sockets": set()}
    # peerprobe -> facts runs down (a feature reads facts); probes -> peerprobe runs up
    assert _upward(g) == ["ddpdoctor.probes.pathmtu (probes) -> ddpdoctor.peerprobe.protocol (features)"]
    assert _cycles(g) == [] and _cycles(_package_graph(g)) == [frozenset({"probes", "peerprobe", "facts"})]
    g["ddpdoctor.probes.sockets"] = {"ddpdoctor.probes.pathmtu"}
    assert _cycles(g) == [frozenset({"ddpdoctor.probes.pathmtu", "ddpdoctor.peerprobe.protocol",
                                     "ddpdoctor.probes.sockets"})]


def test_imports_for_type_checkers_only_are_not_arrows():
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ddpdoctor.smoke.worker import Worker\n"
    assert _imports(PKG / "smoke" / "x.py", src) == set()


def test_commands_write_json_only_through_render_json():
    """One writer of JSON (render/json.py: strict, NaN -> null, one error shape): cli/ calls it."""
    bad = []
    for path in sorted((PKG / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("dumps", "dump")
                    and isinstance(node.value, ast.Name) and node.value.id == "json"):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"json.dumps in cli/ (use ddpdoctor.render.json): {bad}"

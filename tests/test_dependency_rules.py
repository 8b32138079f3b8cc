"""The package's dependency rules, read from every module's imports (AST, no import side effects).

Data-driven: the rules name what a layer MAY import; every other ddpdoctor package is forbidden,
so a feature package added later (inspect/, lint/, flightrec/, runcmd/ ...) is covered without
editing this file. docs/writing-a-check.md states the same rules for people.
"""
from __future__ import annotations

import ast

import click
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "ddpdoctor"

# What checks/ may import: the model, the registry, the facts they judge, and small pure helpers.
CHECKS_MAY_IMPORT = {
    "ddpdoctor", "ddpdoctor.model", "ddpdoctor.registry", "ddpdoctor.facts", "ddpdoctor.units",
    "ddpdoctor.checks", "ddpdoctor.validate", "ddpdoctor.ifname", "ddpdoctor.knownvars",
}
# What facts/ may import: the probes that gather them, small pure helpers, and the site config
# (thresholds a node's facts carry). Never a check, a renderer, a command or a feature package.
FACTS_MAY_IMPORT = {
    "ddpdoctor", "ddpdoctor.model", "ddpdoctor.facts", "ddpdoctor.probes", "ddpdoctor.peerprobe.protocol",
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


def _imports(path: Path, src: str | None = None) -> set[str]:
    """Absolute names of the ddpdoctor modules a file imports (top level and inside functions)."""
    mod = _modname(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if src is None else src, str(path))):
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


def _graph() -> dict[str, set[str]]:
    return {_modname(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


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
        tree = ast.parse(path.read_text(), str(path))
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


def test_commands_write_json_only_through_render_json():
    """One writer of JSON (render/json.py: strict, NaN -> null, one error shape): cli/ calls it."""
    bad = []
    for path in sorted((PKG / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("dumps", "dump")
                    and isinstance(node.value, ast.Name) and node.value.id == "json"):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"json.dumps in cli/ (use ddpdoctor.render.json): {bad}"

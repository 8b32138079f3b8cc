"""TOML on Python < 3.11: the package declares Python >= 3.9, where `tomllib` does not exist and tomli
(a dependency there) reads the site configuration and the failure catalog. Simulated here by hiding
`tomllib` from the import system, the way a 3.10 interpreter lacks it."""
from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import ddpdoctor
from ddpdoctor import tomlread

PKG = Path(ddpdoctor.__file__).parent


@pytest.fixture
def without_tomllib(monkeypatch):
    pytest.importorskip("tomli", reason="tomli is a test dependency (pyproject [test]); pip install tomli")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` now raises ModuleNotFoundError
    importlib.reload(tomlread)
    # and a module that reads TOML, imported afresh as on 3.10 (a top-level `import tomllib` there fails)
    import ddpdoctor.catalog.load as catalog_load
    importlib.reload(catalog_load)
    yield tomlread
    monkeypatch.undo()
    importlib.reload(tomlread)
    importlib.reload(catalog_load)


def test_the_reader_falls_back_to_tomli_without_tomllib(without_tomllib):
    assert without_tomllib.PARSER == "tomli"
    with pytest.raises(ModuleNotFoundError):
        import tomllib  # noqa: F401 - the simulation holds


def test_the_failure_catalog_loads_through_tomli(without_tomllib, tmp_path):
    from ddpdoctor.catalog.load import MODES_DIR, CatalogError, load_catalog
    assert set(load_catalog()) == {p.stem for p in MODES_DIR.glob("*.toml")}
    bad = tmp_path / "modes"
    bad.mkdir()
    (bad / "BROKEN.toml").write_text("id = \n")
    with pytest.raises(CatalogError, match="not valid TOML"):  # tomli's decode error is caught too
        load_catalog(bad)


def test_the_site_configuration_loads_through_tomli(without_tomllib, tmp_path):
    from ddpdoctor.siteconfig import ConfigError, load
    good = tmp_path / "ddpdoctor.toml"
    good.write_text('[prolog]\nignore = ["DD304"]\ndeadline = 4.0\n')
    cfg = load(str(good))
    assert cfg.ignore == ("DD304",) and cfg.deadline == 4.0
    bad = tmp_path / "bad.toml"
    bad.write_text("[prolog\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(str(bad))


def test_with_tomllib_present_the_standard_library_reads(monkeypatch):
    if sys.version_info < (3, 11):
        pytest.skip("no tomllib before Python 3.11")
    assert importlib.reload(tomlread).PARSER == "tomllib"


def test_no_module_imports_tomllib_or_tomli_but_the_reader():
    """One place chooses the parser; a direct `import tomllib` elsewhere breaks Python 3.9/3.10."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "tomlread.py" or "toml" not in path.read_text():
            continue  # parse only the modules that could import it
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.relative_to(PKG)}: {n}" for n in names if n.split(".")[0] in ("tomllib", "tomli")]
    assert not bad, bad

"""The TOML reader: `tomllib` (standard library from Python 3.11), else `tomli`, its backport with the
same API (pyproject.toml depends on it for Python < 3.11). Every TOML file ddpdoctor reads (the site
configuration, the failure catalog) goes through here, so no module imports `tomllib` on its own and
breaks on 3.9/3.10.
"""
from __future__ import annotations

try:
    import tomllib as _toml
except ModuleNotFoundError:  # Python < 3.11
    import tomli as _toml  # type: ignore[no-redef]

TOMLDecodeError = _toml.TOMLDecodeError
load = _toml.load
loads = _toml.loads
PARSER = _toml.__name__  # "tomllib" or "tomli": which one this Python uses

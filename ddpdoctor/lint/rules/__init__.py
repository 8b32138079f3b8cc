"""The lint rules, one module per rule (`dlNNN_name.py`), with fixtures in `fixtures/DLNNN/`.

Importing this package registers every rule: each module here is imported in name order, and
its `@rule(...)` decorator adds it to the registry. A new rule is a new file (scaffold one with
`python -m ddpdoctor.lint.new_rule DL015 short_name`); nothing else needs editing.
"""
from __future__ import annotations

import importlib
import pkgutil

for _m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _m.name.startswith("dl") and not _m.ispkg:
        importlib.import_module(f"{__name__}.{_m.name}")

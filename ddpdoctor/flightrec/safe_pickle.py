"""Load a flight-recorder pickle without ever executing code from it.

torch writes its dump with `pickle.dumps` of plain dicts, lists, tuples, str, int, float, bool and None
(torch/csrc/distributed/c10d/FlightRecorder*.cpp build it with `new_dict()` / `new_list()` / `py::tuple`).
Those need no global at all: pickle builds them with opcodes. A pickle that names a global (os.system,
builtins.eval, any class) is not a flight-recorder dump, so `find_class` refuses every one of them; that is
the one place pickle can reach code (the REDUCE/BUILD/INST/OBJ opcodes all go through find_class first).
"""
from __future__ import annotations

import io
import pickle


class UnsafePickle(pickle.UnpicklingError):
    """The pickle names a global (a class or a function): refused, never called."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise UnsafePickle(f"refused to load {module}.{name}: a flight-recorder dump holds only plain data")


def loads(data: bytes):
    """Unpickle `data` allowing only plain containers and scalars; raise UnsafePickle on any global."""
    return _NoGlobals(io.BytesIO(data)).load()

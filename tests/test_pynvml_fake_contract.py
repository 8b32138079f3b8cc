"""The NVML fake (tests/fakes/pynvml.py) against the real nvidia-ml-py it stands in for.

The fake is only worth its tests if ddpdoctor's calls would work against the real library: every
nvml* function the fake offers exists in real pynvml with the same parameters, its constants have
the real values, its error classes exist, and the struct fields callers read are real fields.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
import sysconfig
from pathlib import Path

import pytest

FAKE = Path(__file__).resolve().parent / "fakes" / "pynvml.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # pynvml looks itself up there to add its error classes
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(name, None)
    return mod


@pytest.fixture(scope="module")
def real():
    path = Path(sysconfig.get_paths()["purelib"]) / "pynvml.py"
    if not path.exists():
        pytest.fail("nvidia-ml-py is a dependency of ddpdoctor: pip install nvidia-ml-py")
    return _load("_real_pynvml", path)


@pytest.fixture(scope="module")
def fake():
    return _load("_fake_pynvml", FAKE)


def _public_functions(mod):
    return {n: f for n, f in vars(mod).items() if n.startswith("nvml") and inspect.isfunction(f)}


def test_every_fake_function_has_the_real_signature(real, fake):
    fns = _public_functions(fake)
    assert len(fns) >= 8, sorted(fns)  # the walk found the fake's API
    for name, f in fns.items():
        assert hasattr(real, name), f"{name} is not in nvidia-ml-py"
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(real, name)).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
        assert got == want, f"{name}{inspect.signature(f)} but nvidia-ml-py has {inspect.signature(getattr(real, name))}"


def test_constants_have_the_real_values(real, fake):
    names = [n for n in vars(fake) if n.startswith("NVML_")]
    assert names
    for n in names:
        assert getattr(fake, n) == getattr(real, n), n


def test_error_classes_exist_in_the_real_library(real, fake):
    classes = [n for n, v in vars(fake).items() if n.startswith("NVMLError_") and inspect.isclass(v)]
    assert classes
    for n in classes:
        assert hasattr(real, n), n
        assert issubclass(getattr(fake, n), fake.NVMLError)
    assert fake.NVMLError(fake.NVML_ERROR_NOT_FOUND).__class__.__name__ == "NVMLError_NotFound" \
        == real.NVMLError(real.NVML_ERROR_NOT_FOUND).__class__.__name__


def test_struct_fields_callers_read_are_real_fields(real, fake):
    mem = fake.c_nvmlMemory_t(8 << 30, 1 << 30)
    real_mem = {f[0] for f in real.c_nvmlMemory_t._fields_}
    assert {k for k in vars(mem) if not k.startswith("_")} <= real_mem
    proc = fake._ProcessInfo(123, 1 << 20)
    real_proc = {f[0] for f in real.c_nvmlProcessInfo_v3_t._fields_}
    assert {k for k in vars(proc) if not k.startswith("_")} <= real_proc

"""ddpdoctor: diagnostics for distributed PyTorch set-ups (DDP, torchrun, Gloo/NCCL, Slurm)."""

__version__ = "0.1.0"


def __getattr__(name):
    # `from ddpdoctor import setup_ddp` without importing torch on `import ddpdoctor` (PEP 562).
    # Importing the submodule binds `ddpdoctor.setup_ddp` to the module; it is callable (see
    # ddpdoctor/setup_ddp.py), and the function replaces it here.
    if name in ("setup_ddp", "DDPContext"):
        import importlib
        mod = importlib.import_module("ddpdoctor.setup_ddp")
        globals()["setup_ddp"] = mod.setup_ddp
        return getattr(mod, name)
    raise AttributeError(f"module 'ddpdoctor' has no attribute {name!r}")

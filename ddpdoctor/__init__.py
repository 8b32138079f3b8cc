"""ddpdoctor: diagnostics for distributed PyTorch set-ups (DDP, torchrun, Gloo/NCCL, Slurm)."""

__version__ = "0.1.0"

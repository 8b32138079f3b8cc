"""The environment variables that shape torch.distributed, Gloo and NCCL, as a rank reports them."""
from __future__ import annotations

from typing import Mapping

SETTING_PREFIXES = ("NCCL_", "GLOO_", "TORCH_")


def settings_of(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that shape torch.distributed, Gloo and NCCL, as a rank reports them."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(SETTING_PREFIXES) or k == "CUDA_VISIBLE_DEVICES"}

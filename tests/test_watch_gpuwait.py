"""watch/gpuwait.py and probes/ipsample.py: a main thread that spins in the CUDA driver at one Python line.

The native-stack fixtures (tests/gpu_jobs/native/README.md) are py-spy's JSON recorded here and public
gdb backtraces of real CUDA hangs in py-spy's shape. The sampler and the node side on real processes:
tests/test_watch_gpuwait_torchjob.py.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ddpdoctor.watch.gpuwait import classify_native, driver_only

NATIVE = Path(__file__).parent / "gpu_jobs" / "native"


def main_frames(name: str) -> list[dict]:
    threads = json.loads((NATIVE / name).read_text())
    return next(t for t in threads if t["os_thread_id"] == t["pid"])["frames"]


def test_item_of_a_cuda_tensor_hung_in_the_driver_is_a_gpu_wait_named_by_its_torch_op():
    got = classify_native(main_frames("pytorch-95944_item_cudaMemcpyAsync.json"))
    assert got == {"lib": "libcuda.so.1", "call": "cudaMemcpyAsync"}


def test_a_stream_sync_spinning_on_the_clock_inside_libcuda_is_a_gpu_wait():
    got = classify_native(main_frames("returnn-1811_cudaStreamSynchronize.json"))
    assert got == {"lib": "libcuda.so.1", "call": "cudaStreamSynchronize"}


def test_py_spys_own_native_output_of_a_thread_in_libcuda_is_read():
    got = classify_native(main_frames("pyspy-0.4.3_fake-libcuda_cuStreamSynchronize.json"))
    assert got == {"lib": "libcuda.so.1", "call": "cuStreamSynchronize"}


def test_a_real_torch_item_hung_on_an_h200_is_a_gpu_wait_named_by_the_driver_call():
    """Recorded on the lent H200 (torch 2.11+cu130, driver 580.159.04) by tests/test_device_gpu.py: `.item()`
    behind a kernel that never ends; libcuda's frames unnamed but cuStreamSynchronize, under libcudart."""
    got = classify_native(main_frames("pyspy-0.4.3_h200-torch-2.11-cu130_item_cuStreamSynchronize.json"))
    assert got == {"lib": "libcuda.so.580.159.04", "call": "cuStreamSynchronize"}


def test_a_thread_asleep_in_libc_or_computing_on_the_cpu_is_not_a_gpu_wait():
    assert classify_native(main_frames("pyspy-0.4.3_time-sleep.json")) is None
    # py-spy 0.4.3 --native of a torch CPU matmul (recorded here, text output): OpenMP innermost
    gomp = [{"name": n, "module": f"/x/{m}", "line": 0} for n, m in (
        ("0x7f18cb61e02a", "libgomp.so.1"), ("mkl_blas_sgemm", "libtorch_cpu.so"),
        ("at::native::cpublas::gemm", "libtorch_cpu.so"))] + [{"name": "<module>", "module": None, "line": 7}]
    assert classify_native(gomp) is None
    assert classify_native([{"name": "<module>", "module": None, "line": 7}]) is None


def test_the_driver_and_its_clock_reads_count_apart_from_everything_else():
    assert driver_only(Counter({"libcuda.so.1": 900, "[vdso]": 80, "libc.so.6": 20})) == (900, 0)
    assert driver_only(Counter({"libcuda.so.1": 800, "libpython3.11.so.1.0": 3, "libtorch_cpu.so": 1})) == (800, 4)

"""Modes and wordings added from their emitting code (issue 23: "where a failure mode is missing from the catalog, add
it with its emitting code found"): RANK_OUT_OF_WORLD_SIZE (NCCL's ncclCommInitRank argument check, Gloo's Context
enforce), the ROCm/HIP wordings of existing modes (ROCm/clr's hipGetErrorString and code
object loader, torch's hipified checks; RCCL's WARNs, which keep NCCL's `NCCL WARN` head with hipified source paths),
and CUDA's `unspecified launch failure` / CUBLAS_STATUS_EXECUTION_FAILED as CUDA_KERNEL_ERROR; MPI_NOT_ENOUGH_SLOTS
(Open MPI / PRRTE help files) and SLURM_MPI_PLUGIN_UNAVAILABLE (srun and its MPI plugins)."""
from ddpdoctor.logscan.render import LOW
from test_explain_calibration import explain, top


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def test_nccl_s_invalid_rank_names_the_rank_and_the_world_it_does_not_fit():
    ex = explain(["node1:6859:6859 [5] init.cc:981 NCCL WARN Invalid rank requested : 5/4",
                  "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid "
                  "argument, NCCL version 2.10.3",
                  "ncclInvalidArgument: Invalid value for an argument."])
    fid, conf = top(ex)
    assert fid == "RANK_OUT_OF_WORLD_SIZE" and conf >= LOW
    assert "rank 5 of a communicator of 4" in ex.diagnoses[0].evidence[0].note
    # torch 2.x repeats NCCL's last error (ncclGetLastError) without the WARN head: the same reading
    assert top(explain(["Last error:", "Invalid rank requested : 1/1"]))[0] == "RANK_OUT_OF_WORLD_SIZE"


def test_gloo_s_context_enforce_is_the_same_failure():
    ex = explain(["RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/context.cc:23] "
                  "rank < size. 2 vs 2"])
    assert top(ex)[0] == "RANK_OUT_OF_WORLD_SIZE" and top(ex)[1] >= LOW
    # another Gloo enforce is not this failure
    other = explain(["RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
                     "op.preamble.length <= op.nbytes. 1046204 vs 1040256"])
    assert "RANK_OUT_OF_WORLD_SIZE" not in ids(other)


def test_under_lightning_the_nccl_line_after_its_member_line_decides():
    # Lightning's `MEMBER: 2/1` is not a signature (its own gate would split the gate pass): NCCL's line decides
    ex = explain(["Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/1",
                  "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
                  "invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5",
                  "ncclInvalidArgument: Invalid value for an argument.", "Last error:", "Invalid rank requested : 1/1"])
    assert top(ex)[0] == "RANK_OUT_OF_WORLD_SIZE" and top(ex)[1] >= LOW
    # a healthy Lightning start names nothing
    healthy = [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(8)]
    assert "RANK_OUT_OF_WORLD_SIZE" not in ids(explain(healthy))


def test_rocm_wordings_name_the_modes_their_cuda_twins_name():
    assert top(explain(['"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"']))[0] == \
        "TORCH_BUILD_LACKS_GPU_ARCH"
    assert top(explain(["RuntimeError: HIP error: invalid device function"]))[0] == "TORCH_BUILD_LACKS_GPU_ARCH"
    assert top(explain(["RuntimeError: HIP error: no kernel image is available for execution on the device"]))[0] \
        == "TORCH_BUILD_LACKS_GPU_ARCH"
    assert top(explain(["RuntimeError: HIP error: invalid device ordinal"]))[0] == "NPROC_EXCEEDS_GPUS"
    assert top(explain(["RuntimeError: No HIP GPUs are available"]))[0] == "TORCH_SEES_NO_GPU"


def test_a_hip_out_of_memory_is_an_oom_but_never_a_confident_one_alone():
    # the differential reads the CUDA line's figures (whose memory filled the GPU); it does not read the HIP one yet
    for line in ["torch.OutOfMemoryError: HIP out of memory. Tried to allocate 124.00 MiB. GPU 0 has a total capacity "
                 "of 19.94 GiB of which 554.47 MiB is free.", "RuntimeError: HIP error: out of memory"]:
        fid, conf = top(explain([line]))
        assert fid == "GPU_OUT_OF_MEMORY" and conf < LOW


def test_rccl_warns_with_hipified_source_paths_read_as_nccl_s():
    # RCCL's debug.cc prints NCCL's head ("%s:%d:%d [%d] %s:%d NCCL WARN ") with the hipified file's full path
    shm = explain(["host1:31965:31971 [0] /usr/src/debug/rccl/build/hipify/src/transport/shm.cc:55 NCCL WARN Error: "
                   "failed to extend /dev/shm/nccl-abc to 9637892 bytes"])
    assert top(shm)[0] == "NCCL_SHM_TOO_SMALL"
    rank = explain(["host1:31965:31971 [0] /app/rccl/build/release/hipify/src/init.cc:981 NCCL WARN Invalid rank "
                    "requested : 5/4"])
    assert top(rank)[0] == "RANK_OUT_OF_WORLD_SIZE"


def test_a_launch_failure_or_a_failed_cublas_call_is_a_kernel_error_of_low_confidence():
    for line in ["RuntimeError: CUDA error: unspecified launch failure",
                 "RuntimeError: HIP error: unspecified launch failure",
                 "node1:1:2 [0] enqueue.cc:100 NCCL WARN Cuda failure 'unspecified launch failure'",
                 "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, "
                 "opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`"]:
        fid, conf = top(explain([line]))
        assert fid == "CUDA_KERNEL_ERROR" and conf < LOW, line
    # a device-side assert above it is the decisive line, the cuBLAS failure its consequence
    ex = explain(["/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1284: indexSelectLargeIndex: block: [37,0,0], "
                  "thread: [92,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
                  "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasLtMatmul( ltHandle, "
                  "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), mat2_ptr)`"])
    assert top(ex)[0] == "CUDA_KERNEL_ERROR" and top(ex)[1] >= LOW


def test_open_mpi_s_slot_refusal_in_its_wordings_names_the_launcher_not_the_gpus():
    for first in ["There are not enough slots available in the system to satisfy the 8",      # v3 .. v4.1
                  "There are not enough slots available in the system to satisfy the 6 slots ",  # v1.10 .. v2.1
                  "There are not enough slots available in the system or not enough"]:      # PRRTE round-robin
        ex = explain(["-" * 74, first, "slots that were requested by the application:", "", "  python3"])
        assert top(ex)[0] == "MPI_NOT_ENOUGH_SLOTS" and top(ex)[1] >= LOW, first


def test_srun_s_invalid_mpi_type_in_each_release_s_wording_and_a_missing_pmix_library():
    for line in ["srun: error: Invalid MPI type 'pmix_v3', --mpi=list for acceptable types",          # 22.05+
                 "srun: error: invalid MPI type 'pmix', --mpi=list for acceptable types",             # 17.11 .. 21.08
                 'srun: error: "--mpi=pmix" -- long invalid MPI type, --mpi=list for acceptable types.',  # .. 17.02
                 "srun: error:  mpi/pmix_v5: init: (null) [0]: mpi_pmix.c:193: pmi/pmix: can not load PMIx library",
                 "srun: error: MPI: Cannot create context for mpi/pmix"]:
        fid, conf = top(explain([line]))
        assert fid == "SLURM_MPI_PLUGIN_UNAVAILABLE" and conf >= LOW, line
    # another srun error is not this failure
    other = explain(["srun: error: Unable to create step for job 1234: Invalid generic resource (gres) specification"])
    assert "SLURM_MPI_PLUGIN_UNAVAILABLE" not in ids(other)

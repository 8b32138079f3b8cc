"""Failure modes inside NCCL and the GPUs: transports, versions, fabric, timeouts, device choice, memory."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CLUE, CONSEQUENCE, SYMPTOM, FailureMode, Signature, fix

MODES = (
    FailureMode(
        id="IB_ROCE_GID_MISMATCH",
        title="RDMA traffic between nodes fails (RoCE GID index, fabric path)",
        category="nccl",
        summary="NCCL's TCP bootstrap works but the first collective fails with `NET/IB : Got completion ... with "
                "error 12, ... vendor err 129`.",
        cause="Error 12 / vendor error 129 is a transport retry timeout: RDMA packets do not get through between "
              "the two NICs. On RoCE the usual reason is the wrong GID index (RoCE v1 vs v2, IPv4-mapped entry); "
              "otherwise nodes on different subnets/switches or a fabric fault.",
        fix=fix("Pick the GID index of the RoCE v2 IPv4 entry (`show_gids`, often 3) with NCCL_IB_GID_INDEX and test "
                "the pair with ib_write_bw; NCCL_IB_DISABLE=1 falls back to TCP while you fix the fabric.",
                "show_gids", "ib_write_bw -d mlx5_0 <peer>   # on both nodes"),
        signatures=(
            Signature(r"NET/IB : Got completion (?:from peer (?P<peer>\S+) )?with error 12, opcode \d+, len \d+, "
                      r"vendor err 129", 0.9, trigger="got completion",
                      example="transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion from peer 192.168.17.147<38560> "
                              "with error 12, opcode 0, len 0, vendor err 129"),
            Signature(r"NET/IB : Got completion (?:from peer \S+ )?with error 12\b", 0.75, trigger="got completion",
                      example="NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 244"),
        ),
        checks=("DD501", "DD502"),
        confirm="show_gids; ib_write_bw between the two nodes; then torchrun --nnodes=2 ... -m ddpdoctor smoke",
        preflight="DD501/DD502 (smoke across two nodes) fail the same way in seconds; proposed DD3xx 'RoCE NICs with "
                  "NCCL_IB_GID_INDEX unset'.",
        related=("MTU_MISMATCH",),
        sources=("pytorch/pytorch#81628", "NVIDIA/nccl#426", "NVIDIA/nccl#1405"),
    ),
    FailureMode(
        id="NCCL_VERSION_MISMATCH_ACROSS_NODES",
        title="Nodes run different NCCL builds",
        category="nccl",
        summary="The bootstrap reads garbage from peers: `connecting to address with family 0 is neither AF_INET(2) "
                "nor AF_INET6(10)`, or nodes log different `NCCL version` lines.",
        cause="Different torch / nvidia-nccl wheels, a system libnccl picked up through LD_LIBRARY_PATH or "
              "LD_PRELOAD, or different container images: NCCL's bootstrap wire format differs between versions.",
        fix=fix("Run the same image / environment on every node; pin the NCCL wheel; remove stray libnccl from "
                "LD_LIBRARY_PATH / LD_PRELOAD.",
                "python -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'   # on every node"),
        signatures=(
            Signature(S.NCCL_BAD_FAMILY, 0.45, SYMPTOM, example=S.NCCL_BAD_FAMILY_EX),
        ),
        checks=("DD504", "DD716"),
        confirm="srun -N <nodes> --ntasks-per-node=1 ddpdoctor cluster   (DD716: versions agree)",
        preflight="DD716 (cluster) and DD504 (smoke) compare torch, CUDA, NCCL and driver versions across nodes.",
        related=("NCCL_SOCKET_IFNAME_NOT_FOUND",),
        sources=("NVIDIA/nccl#1267", "NVIDIA/nccl#286", "pytorch/pytorch#122571"),
    ),
    FailureMode(
        id="NCCL_P2P_ACS_IOMMU_HANG",
        title="GPU peer-to-peer transfers stall behind PCIe ACS / IOMMU",
        category="nccl",
        summary="A single-node multi-GPU job hangs right after NCCL reports `Init COMPLETE` with channels `via "
                "P2P/IPC`; the same job works with NCCL_P2P_DISABLE=1.",
        cause="PCIe Access Control Services or an IOMMU (VT-d, AMD-Vi) route peer-to-peer traffic through the root "
              "complex, where it stalls or is dropped (common on PCIe workstations and some AMD boards).",
        fix=fix("Disable ACS on the PCIe bridges (BIOS, or setpci) and boot with iommu=pt (or the IOMMU off); "
                "NCCL_P2P_DISABLE=1 is a slower workaround.",
                "sudo lspci -vvv | grep -i acsctl", "cat /proc/cmdline"),
        signatures=(
            Signature(r"ACSCtl:\s+SrcValid\+", 0.8,
                      example="ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
                      note="a PCIe bridge has ACS source validation on"),
        ),
        checks=("DD501", "DD502"),
        confirm="ddpdoctor smoke --nproc <GPUs>   # hangs name the stuck ranks; then NCCL_P2P_DISABLE=1 and again",
        preflight="DD501/DD502 (smoke) hang or fail the same way in seconds; proposed DD4xx 'ACS/IOMMU on bridges "
                  "above the GPUs' would catch it without running NCCL.",
        related=("CONSUMER_GPU_P2P_BROKEN", "NCCL_COLLECTIVE_TIMEOUT"),
        sources=("NVIDIA/nccl#2079", "NVIDIA/nccl#631", "pytorch/pytorch#85334"),
    ),
    FailureMode(
        id="CONSUMER_GPU_P2P_BROKEN",
        title="Peer-to-peer between consumer GPUs hangs (RTX 40xx)",
        category="nccl",
        summary="DDP / DeepSpeed hang at the first collective on several GeForce cards; NCCL_P2P_DISABLE=1 makes "
                "them work.",
        cause="Some GeForce cards (RTX 4090 notably) report peer-to-peer support that the driver does not really "
              "provide, and NCCL's P2P transport deadlocks.",
        fix=fix("Disable NCCL's P2P transport, or use a driver that reports P2P correctly.",
                "export NCCL_P2P_DISABLE=1", env={"NCCL_P2P_DISABLE": "1"}),
        signatures=(
            Signature(r"GeForce RTX 40\d0", 0.3, CLUE, example="NVIDIA GeForce RTX 4090"),
        ),
        checks=("DD501", "DD502"),
        confirm="ddpdoctor smoke --nproc <GPUs>; then NCCL_P2P_DISABLE=1 ddpdoctor smoke --nproc <GPUs>",
        preflight="DD501/DD502 (smoke) reproduce the hang; proposed DD4xx 'GeForce multi-GPU with P2P enabled'.",
        related=("NCCL_P2P_ACS_IOMMU_HANG",),
        sources=("deepspeedai/DeepSpeed#4433", "dmlc/xgboost#11242", "pytorch/pytorch#129749"),
    ),
    FailureMode(
        id="FABRIC_MANAGER_NOT_RUNNING",
        title="NVSwitch fabric manager is not running (or does not match the driver)",
        category="gpu",
        summary="CUDA fails with error 802 `system not yet initialized` on an HGX/DGX node, or NCCL hangs / NVLS "
                "reports `Cuda failure 'invalid argument'`.",
        cause="GPUs behind NVSwitch need nvidia-fabricmanager running with exactly the driver's version. Restarting "
              "it while GPUs are in use also breaks NVLS.",
        fix=fix("Install and start nvidia-fabricmanager of the same version as the driver; reboot if it was restarted "
                "under load.",
                "systemctl status nvidia-fabricmanager", "nvidia-smi -q | grep -i -A2 fabric"),
        signatures=(
            Signature(r"(?i)(?:error|failure)[^\n]*system not yet initialized", 0.9, trigger=("error", "fail"),
                      example="RuntimeError: CUDA error: system not yet initialized"),
            Signature(r"Cuda failure 802\b", 0.9, example="NCCL WARN Cuda failure 802 'system not yet initialized'"),
            Signature(r"cudaErrorSystemNotReady", 0.9, example="cudaErrorSystemNotReady"),
            Signature(r"transport/nvls\.cc:\d+ NCCL WARN Cuda failure 'invalid argument'", 0.6,
                      example="transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'"),
        ),
        checks=("DD507",),
        confirm="systemctl is-active nvidia-fabricmanager; nvidia-smi -q | grep -i -A2 fabric",
        preflight="DD507 (smoke) reports ranks without a usable GPU; proposed DD4xx 'fabric manager active and "
                  "matching the driver on NVSwitch systems'.",
        sources=("pytorch/pytorch#129749", "NVIDIA/nccl#1231", "NVIDIA/nccl-tests#264"),
    ),
    FailureMode(
        id="NCCL_COLLECTIVE_TIMEOUT",
        title="A collective timed out (NCCL watchdog)",
        category="nccl",
        kind=CONSEQUENCE,
        summary="`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)` and the process "
                "is taken down, often 10-30 minutes after the last progress.",
        cause="A symptom: some rank never entered, or never finished, the collective. Usual reasons: one rank does "
              "long work alone (evaluation, checkpointing on rank 0), ranks run different numbers of steps or "
              "different collectives, a peer died, or the network path between GPUs is broken.",
        fix=fix("Find the rank that was not in the collective: compare SeqNum/OpType across ranks, enable the flight "
                "recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) or py-spy dump every rank; raise init_process_group(timeout=) "
                "only for legitimately long rank-0 work.",
                "py-spy dump --pid <pid of each rank>",
                "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 <rerun>"),
        signatures=(
            Signature(S.NCCL_WATCHDOG, 0.6, SYMPTOM, example=S.NCCL_WATCHDOG_EX,
                      note="collective #{seq} ({op}) did not complete on this rank"),
            Signature(r"Some NCCL operations have failed or timed out", 0.5, SYMPTOM,
                      example="Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
                              "kernels, subsequent GPU operations might run on corrupted/incomplete data."),
            Signature(r"Heartbeat monitor timed out", 0.45, SYMPTOM,
                      example="[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! "
                              "Process will be terminated after dumping debug info."),
        ),
        checks=("DD501", "DD502"),
        confirm="torchrun ... -m ddpdoctor smoke   # with the job's nodes: names a rank that hangs or dies",
        preflight="Mostly visible only in logs; DD501 (smoke) names ranks that hang in a collective, which "
                  "catches broken network paths before a job.",
        related=("UNEVEN_INPUTS_HANG", "COLLECTIVE_MISMATCH_ACROSS_RANKS", "NCCL_P2P_ACS_IOMMU_HANG"),
        sources=("XPixelGroup/BasicSR#737", "hiyouga/LlamaFactory#7396", "pytorch/pytorch#118369",
                 "EleutherAI/lm-evaluation-harness#1404"),
    ),
    FailureMode(
        id="NCCL_SYSTEM_ERROR",
        title="NCCL reported a system error without saying which",
        category="nccl",
        kind=CONSEQUENCE,
        origin="ddpdoctor",
        summary="`NCCL error ... unhandled system error` / `ncclSystemError` / `ncclRemoteError` with no detail "
                "in the log.",
        cause="A summary NCCL gives for failed system calls: shared memory, sockets, RDMA registration, a peer "
              "that exited. The specific reason is printed only with NCCL_DEBUG=INFO (or WARN).",
        fix=fix("Rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET,SHM) and explain that log: the WARN line "
                "before the error names the cause.",
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,SHM <rerun> 2>&1 | tee nccl.log",
                "ddpdoctor explain --log nccl.log"),
        signatures=(
            Signature(S.NCCL_SYSTEM_ERROR, 0.5, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
            Signature(r"ncclRemoteError|remote process exited or there was a network error", 0.45, SYMPTOM,
                      trigger="error",
                      example="ncclRemoteError: A call failed possibly due to a network error or a remote process "
                              "exiting prematurely."),
        ),
        checks=("DD501",),
        confirm="NCCL_DEBUG=INFO <rerun>; ddpdoctor explain --log <that log>",
        related=("NCCL_SHM_TOO_SMALL", "DEV_SHM_PERMISSION_DENIED", "CONTAINER_BRIDGE_NETWORK", "IB_MEMLOCK_LIMIT",
                 "FIREWALL_BLOCKS_PORTS", "NCCL_WRONG_INTERFACE_AUTOSELECTED"),
    ),
    FailureMode(
        id="DUPLICATE_GPU_PER_RANK",
        title="Two ranks use the same GPU",
        category="gpu",
        summary="NCCL init fails with `Duplicate GPU detected : rank 0 and rank 1 both on CUDA device ...` or "
                "`ncclInvalidUsage`.",
        cause="Each rank must own one GPU within a communicator: `torch.cuda.set_device(local_rank)` is missing "
              "or comes after NCCL init, a device is hard-coded, or CUDA_VISIBLE_DEVICES / a scheduler gave "
              "several ranks the same GPU.",
        fix=fix("Bind each rank to its GPU before init_process_group.",
                code="torch.cuda.set_device(int(os.environ['LOCAL_RANK']))  # before init_process_group, or pass "
                     "device_id=torch.device('cuda', local_rank)"),
        signatures=(
            Signature(r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device (?P<dev>\w+)",
                      0.95, example="init.cc:1192 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA "
                                    "device 2000",
                      note="ranks {a} and {b} share CUDA device {dev}"),
            Signature(r"ncclInvalidUsage", 0.35, SYMPTOM,
                      example="ncclInvalidUsage: This usually reflects invalid usage of NCCL library."),
            Signature(r"invalid usage \(run with NCCL_DEBUG=WARN for details\)", 0.35, SYMPTOM,
                      example="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                              "ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
                              "version 2.19.3"),
        ),
        checks=("DD403",),
        confirm="grep -n set_device <your script>   # it must run before init_process_group",
        preflight="DD403 (smoke) checks that no two ranks of a host select the same GPU.",
        related=("GPU0_EXTRA_MEMORY",),
        sources=("NVIDIA/Megatron-LM#661", "facebookresearch/fairchem#597", "verl-project/verl#161"),
    ),
    FailureMode(
        id="GLOBAL_RANK_USED_AS_DEVICE",
        title="The global rank is used as the CUDA device index",
        category="code",
        summary="Ranks on the second and later nodes fail with `invalid device ordinal`; the first node works.",
        cause="The script selects `cuda:{rank}` or `set_device(rank)` with the global RANK; on node 2 the rank is "
              "at least the number of GPUs per node.",
        fix=fix("Select the device with LOCAL_RANK.",
                code="torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"),
        signatures=(
            Signature(S.CUDA_INVALID_ORDINAL, 0.35, SYMPTOM, example=S.CUDA_INVALID_ORDINAL_EX,
                      trigger="invalid device ordinal"),
            Signature(r"set_device\(\s*(?:args\.|opt\.|self\.)?(?:global_)?rank\s*\)", 0.5, CLUE,
                      example="    torch.cuda.set_device(rank)"),
        ),
        checks=("DD403",),
        confirm="grep -n -E \"set_device\\(rank|cuda:\\{rank\" <your script>",
        preflight="DD403 (smoke) checks the launch layout; the script's use of RANK needs a look (proposed DD5xx "
                  "lint 'device chosen from RANK instead of LOCAL_RANK').",
        related=("NPROC_EXCEEDS_GPUS",),
        sources=("LMCache/LMCache#814",),
    ),
    FailureMode(
        id="GPU0_EXTRA_MEMORY",
        title="Every rank also allocates memory on GPU 0",
        category="gpu",
        summary="nvidia-smi shows all ranks' processes on the first GPU, and GPU 0 runs out of memory first.",
        cause="Each process creates a CUDA context (or tensors) on device 0 before, or without, "
              "`torch.cuda.set_device(local_rank)`: `.cuda()` before set_device, barrier/NCCL init with no device "
              "bound, `torch.load` of a checkpoint saved from cuda:0 without map_location.",
        fix=fix("Call torch.cuda.set_device(local_rank) first thing in each process, and load checkpoints with "
                "map_location.",
                "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv",
                code="torch.cuda.set_device(local_rank)\nstate = torch.load(path, map_location='cpu')"),
        signatures=(
            Signature(r"Error: CUDA out of memory[^\n]*GPU 0 has a total capacity of [^\n]*Process \d+ has [^\n]*Process \d+ "
                      r"has", 0.85,
                      example="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
                              "total capacity of 79.15 GiB of which 3.94 MiB is free. Process 1201 has 70.1 GiB memory "
                              "in use. Process 1202 has 4.5 GiB memory in use. Process 1203 has 4.5 GiB memory in use.",
                      note="several processes hold memory on GPU 0"),
            Signature(r"Error: CUDA out of memory\. Tried to allocate [^\n]*\(GPU 0;", 0.3, CLUE,
                      example="RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.70 GiB total "
                              "capacity; 21.1 GiB already allocated)"),
        ),
        checks=("DD401", "DD404"),
        confirm="torchrun --nproc-per-node=<GPUs> -m ddpdoctor smoke --preamble <your set-up code> --fix",
        preflight="DD401 (smoke) finds ranks holding memory on another rank's GPU; DD404 shows what the fix saves.",
        related=("DUPLICATE_GPU_PER_RANK", "GPU_OUT_OF_MEMORY"),
        sources=("pytorch/examples#969", "NVIDIA/apex#222", "pytorch/pytorch#64130"),
    ),
    FailureMode(
        id="GPU_OUT_OF_MEMORY",
        title="A GPU ran out of memory",
        category="gpu",
        origin="ddpdoctor",
        summary="`CUDA out of memory. Tried to allocate ...` on one or more ranks; the other ranks then fail or "
                "time out in the next collective.",
        cause="The model, activations and optimiser state of one rank do not fit its GPU: batch too large, no "
              "activation checkpointing or sharding, or another process on the same GPU.",
        fix=fix("Reduce per-GPU memory (smaller micro-batch with gradient accumulation, activation checkpointing, "
                "FSDP/ZeRO sharding, mixed precision) and make sure nothing else runs on the GPU.",
                "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv"),
        signatures=(
            Signature(r"Error: CUDA out of memory\. Tried to allocate", 0.7,
                      example="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
                              "total capacity of 79.15 GiB of which 1.2 GiB is free."),
            Signature(r"CUDA error: out of memory", 0.7, example="RuntimeError: CUDA error: out of memory"),
        ),
        checks=("DD402", "DD702"),
        confirm="nvidia-smi   (while the job runs: memory per GPU and the processes on it)",
        related=("GPU0_EXTRA_MEMORY", "HOST_OOM_SIGKILL"),
    ),
    FailureMode(
        id="CUDA_REINIT_IN_FORKED_SUBPROCESS",
        title="CUDA initialised before forking worker processes",
        category="code",
        summary="`Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
                "the 'spawn' start method`.",
        cause="The parent touched CUDA, then forked (multiprocessing 'fork', DataLoader workers, a Dataset calling "
              "CUDA); a forked child cannot use the parent's CUDA context.",
        fix=fix("Use the spawn start method and keep CUDA out of the parent before workers start (Dataset and "
                "collate_fn on CPU).",
                code="torch.multiprocessing.set_start_method('spawn', force=True)"),
        signatures=(
            Signature(r"Error: Cannot re-initialize CUDA in forked subprocess", 0.95,
                      example="RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                              "multiprocessing, you must use the 'spawn' start method"),
        ),
        confirm="grep -n -E 'set_start_method|\\.cuda\\(|device=.cuda' <your dataset / entry script>",
        preflight="Proposed DD5xx lint 'CUDA used at import time or in Dataset code with the fork start method'.",
        sources=("facebookresearch/pycls#183", "traveller59/spconv#408", "open-mmlab/OpenPCDet#460"),
    ),
)

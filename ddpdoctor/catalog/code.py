"""Failure modes in the training script and its scheduler layout: DDP usage, collectives, Slurm tasks."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CLUE, SYMPTOM, FailureMode, Signature, fix

MODES = (
    FailureMode(
        id="DDP_UNUSED_PARAMETERS",
        title="Some parameters received no gradient (DDP reduction not finished)",
        category="code",
        summary="The second iteration fails with `Expected to have finished reduction in the prior iteration "
                "before starting a new one`.",
        cause="DDP waits for a gradient of every parameter. Parameters unused in an iteration (conditional "
              "branches, frozen or unused heads, outputs not in the loss) leave its buckets unfinished.",
        fix=fix("Make every output contribute to the loss or drop unused modules; otherwise pass "
                "find_unused_parameters=True (or static_graph=True). TORCH_DISTRIBUTED_DEBUG=DETAIL names the "
                "parameters.",
                "TORCH_DISTRIBUTED_DEBUG=DETAIL <rerun>",
                code="model = DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=True)"),
        signatures=(
            Signature(r"Error: Expected to have finished reduction in the prior iteration before starting a new one",
                      0.95,
                      example="RuntimeError: Expected to have finished reduction in the prior iteration before "
                              "starting a new one. This error indicates that your module has parameters that were not "
                              "used in producing loss."),
        ),
        confirm="TORCH_DISTRIBUTED_DEBUG=DETAIL <rerun one step>   # names the unused parameters",
        preflight="Not static: a one-step dry run on two ranks with TORCH_DISTRIBUTED_DEBUG=DETAIL shows it.",
        sources=("open-mmlab/mmdetection#2153", "pytorch/pytorch#43259", "pytorch/pytorch#57473"),
    ),
    FailureMode(
        id="DEFAULT_PG_NOT_INITIALIZED",
        title="torch.distributed used without init_process_group",
        category="code",
        summary="`Default process group has not been initialized, please make sure to call init_process_group.`",
        cause="DDP, SyncBatchNorm or a dist.* call runs in a process that never initialised the process group: "
              "the script was started with plain `python` instead of the launcher, or a single-GPU run uses a "
              "config with SyncBatchNorm.",
        fix=fix("Start the script through torchrun (world size 1 is fine) or call init_process_group; on one GPU "
                "replace SyncBatchNorm by BatchNorm; guard dist calls.",
                "torchrun --nproc-per-node=1 train.py ...",
                code="if dist.is_available() and dist.is_initialized():\n    dist.barrier()"),
        signatures=(
            Signature(r"Error: Default process group has not been initialized", 0.95,
                      example="RuntimeError: Default process group has not been initialized, please make sure to call "
                              "init_process_group."),
            Signature(r"Error: Default process group is not initialized", 0.95,
                      example="AssertionError: Default process group is not initialized"),
        ),
        confirm="check that the failing process was started by torchrun (it sets RANK, WORLD_SIZE, MASTER_ADDR)",
        preflight="Proposed DD5xx lint 'dist/SyncBatchNorm used without a launcher'.",
        sources=("facebookresearch/detectron2#3972", "pytorch/pytorch#63662", "open-mmlab/mmsegmentation#354"),
    ),
    FailureMode(
        id="COLLECTIVE_MISMATCH_ACROSS_RANKS",
        title="Ranks called different collectives",
        category="code",
        summary="`Detected mismatch between collectives on ranks` (with TORCH_DISTRIBUTED_DEBUG=DETAIL) or NCCL's "
                "`Mismatched collective detected`; without the debug flag, a hang and a watchdog timeout.",
        cause="Control flow differs between ranks: a collective under `if rank == 0`, per-rank metric keys, "
              "rank-dependent checkpoint loading, tensors of data-dependent shape.",
        fix=fix("Make every rank call the same collectives in the same order with the same shapes (same metric "
                "keys, no collectives in rank-only branches, pad tensors).",
                "TORCH_DISTRIBUTED_DEBUG=DETAIL <rerun>"),
        signatures=(
            Signature(r"Detected mismatch between collectives on ranks", 0.95,
                      example="[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is "
                              "running collective: CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, "
                              "TensorShape=[195812480]"),
            Signature(r"Mismatched collective detected", 0.9,
                      example="init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective "
                              "calls at and around rank 39."),
        ),
        confirm="TORCH_DISTRIBUTED_DEBUG=DETAIL <rerun>   # reports the first mismatching call",
        preflight="A dry run with TORCH_DISTRIBUTED_DEBUG=DETAIL; lint for collectives inside rank-only branches.",
        related=("UNEVEN_INPUTS_HANG", "NCCL_COLLECTIVE_TIMEOUT"),
        sources=("Lightning-AI/pytorch-lightning#19106", "pytorch/pytorch#78022", "NVIDIA/nccl#296"),
    ),
    FailureMode(
        id="UNEVEN_INPUTS_HANG",
        title="Ranks ran different numbers of steps",
        category="code",
        summary="Training hangs at the end of an epoch and later dies with collective timeouts at different "
                "sequence numbers on different ranks.",
        cause="Ranks get different numbers of batches (custom or bucketing samplers without padding, drop_last "
              "differences, shards of different size); the rank that finishes first stops calling all_reduce "
              "while the others wait.",
        fix=fix("Give every rank the same number of batches (DistributedSampler pads; drop_last=True), or wrap the "
                "loop in DDP's join() context for uneven inputs.",
                code="with model.join():\n    for batch in loader:\n        ..."),
        signatures=(
            Signature(r"Error: Detected at least one rank that exhausted inputs", 0.95,
                      example="RuntimeError: Detected at least one rank that exhausted inputs. Throwing across all "
                              "ranks."),
            Signature(S.NCCL_WATCHDOG, 0.2, SYMPTOM, example=S.NCCL_WATCHDOG_EX),
        ),
        confirm="print len(dataloader) on every rank before training: the values must agree",
        preflight="Proposed DD5xx 'len(dataloader) agrees across ranks' (all_gather in a dry run).",
        related=("COLLECTIVE_MISMATCH_ACROSS_RANKS", "NCCL_COLLECTIVE_TIMEOUT"),
        sources=("pytorch/pytorch#49180", "lhotse-speech/lhotse#695", "lifeiteng/vall-e#131"),
    ),
    FailureMode(
        id="SLURM_NTASKS_MISMATCH",
        title="Slurm tasks do not match what the launcher expects",
        category="slurm",
        summary="Lightning stops with `You set devices=N ... does not match`, or only some of the `MEMBER: k/N` "
                "lines appear (or each twice) and the job hangs.",
        cause="Lightning and plain srun launches need one Slurm task per GPU (`--ntasks-per-node` = GPUs); "
              "torchrun needs one task per node. A mismatch starts too few processes, or one torchrun per GPU.",
        fix=fix("For Lightning / srun-per-GPU: `--ntasks-per-node` = GPUs per node, matching Trainer(devices, "
                "num_nodes). For torchrun: `--ntasks-per-node=1` and let torchrun start the per-GPU processes.",
                "#SBATCH --nodes=2 --ntasks-per-node=8 --gres=gpu:8   # Lightning / srun per GPU",
                "#SBATCH --nodes=2 --ntasks-per-node=1 --gres=gpu:8   # torchrun"),
        signatures=(
            Signature(r"Error: You set `?devices=(?P<devices>\d+)`? in Lightning, but the number of tasks per node "
                      r"configured in SLURM `?--ntasks-per-node=(?P<ntasks>\d+)`? does not match", 0.95,
                      example="ValueError: You set `devices=2` in Lightning, but the number of tasks per node "
                              "configured in SLURM `--ntasks-per-node=1` does not match. HINT: Set `devices=1`.",
                      note="devices={devices} but --ntasks-per-node={ntasks}"),
            Signature(r"Error: You set `?num_nodes=(?P<nodes>\d+)`? in Lightning, but the number of nodes configured in "
                      r"SLURM", 0.95,
                      example="ValueError: You set `num_nodes=2` in Lightning, but the number of nodes configured in "
                              "SLURM `--nodes=1` does not match. HINT: Set `num_nodes=1`."),
            Signature(r"srun: Warning: can't honor --ntasks-per-node set to \d+", 0.6,
                      example="srun: Warning: can't honor --ntasks-per-node set to 8 which doesn't match the requested "
                              "tasks 2 with the number of requested nodes 2. Ignoring --ntasks-per-node."),
        ),
        confirm="echo $SLURM_NNODES $SLURM_NTASKS_PER_NODE $SLURM_GPUS_ON_NODE   (inside the job)",
        preflight="Proposed DD7xx 'Slurm task layout matches the launcher'.",
        related=("STORE_BARRIER_WORKER_COUNT_MISMATCH",),
        sources=("Lightning-AI/pytorch-lightning#6206", "Lightning-AI/pytorch-lightning#8707",
                 "Lightning-AI/pytorch-lightning#20391"),
    ),
)

"""An old training script whose argparse only knows --local_rank (LOCAL_RANK_ARG_MISMATCH)."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
print(f"local rank {args.local_rank}", flush=True)

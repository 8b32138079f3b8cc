"""Lint rules on small scripts: each rule fires on the mistake and stays silent on the correct form."""
import textwrap
from pathlib import Path

import pytest

from ddpdoctor.lint import lint_paths


def lint_src(tmp_path, src, name="train.py", **kw):
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    return lint_paths([str(p)], **kw).findings


def ids(findings):
    return sorted((f.rule, f.line) for f in findings)


TORCHRUN_OK = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
    sampler = torch.utils.data.distributed.DistributedSampler(range(8))
    loader = torch.utils.data.DataLoader(range(8), sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "ckpt.pt")
    ckpt = torch.load("ckpt.pt", map_location="cpu")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""


def test_a_correct_torchrun_script_has_no_finding(tmp_path):
    assert lint_src(tmp_path, TORCHRUN_OK) == []


def test_cuda_work_before_set_device_names_the_line_and_the_variable(tmp_path):
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        def main():
            device = torch.device("cuda")
            model = torch.nn.Linear(2, 2).to(device)
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL001", 5)]
    assert "device = torch.device('cuda')" in fs[0].message and "line 6" in fs[0].message


def test_a_local_helper_doing_cuda_counts(tmp_path):
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        def build():
            return torch.nn.Linear(2, 2).cuda()
        def main():
            model = build()
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL001", 4)]
    assert "main() -> build()" in fs[0].message


def test_import_module_form_is_followed_and_binding_inside_it_counts(tmp_path):
    (tmp_path / "dutils.py").write_text(textwrap.dedent("""\
        import os, torch
        import torch.distributed as dist
        def init_distributed_mode(args):
            if "RANK" in os.environ:
                args.gpu = int(os.environ["LOCAL_RANK"])
            else:
                os.environ["MASTER_ADDR"] = "127.0.0.1"
            dist.init_process_group("nccl")
            torch.cuda.set_device(args.gpu)
        """))
    fs = lint_src(tmp_path, """\
        import torch
        import dutils
        def main(args):
            dutils.init_distributed_mode(args)
            model = torch.nn.Linear(2, 2).cuda()
        if __name__ == "__main__":
            main(None)
        """)
    assert [(f.rule, Path(f.path).name, f.line) for f in fs] == [("DL014", "dutils.py", 8)]


def test_an_imported_local_module_is_followed_one_level(tmp_path):
    (tmp_path / "helpers.py").write_text("import torch\n\ndef to_gpu(m):\n    return m.cuda()\n")
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        from helpers import to_gpu
        def main():
            dist.init_process_group("nccl")
            model = to_gpu(torch.nn.Linear(2, 2))
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert [(f.rule, f.line, f.path.endswith("helpers.py")) for f in fs] == [("DL001", 4, True)]


def test_binding_first_makes_cuda_work_fine(tmp_path):
    assert lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        def main():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")
            x = torch.zeros(3, device="cuda")
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """) == []


def test_global_rank_as_device_followed_through_assignments(tmp_path):
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        def setup():
            dist.init_process_group("nccl")
            r = dist.get_rank()
            return r
        def main():
            rank = setup()
            torch.cuda.set_device(rank)
            x = torch.ones(1).to(f"cuda:{rank}")
            ok = torch.ones(1).to(rank % torch.cuda.device_count())
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL003", 9), ("DL003", 10)]
    assert "rank is the global rank" in fs[0].message


def test_local_rank_from_env_is_a_fine_device_index(tmp_path):
    assert not [f for f in lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl")
        dist.destroy_process_group()
        """) if f.rule == "DL003"]


def test_hard_coded_master_addr_in_a_torchrun_script_but_not_in_a_spawn_script(tmp_path):
    launcher = lint_src(tmp_path, """\
        import os
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "localhost"
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("gloo")
        dist.destroy_process_group()
        """)
    assert ids(launcher) == [("DL004", 3)]
    spawn = lint_src(tmp_path, """\
        import os
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def worker(rank, n):
            os.environ["MASTER_ADDR"] = "localhost"
            dist.init_process_group("gloo", rank=rank, world_size=n)
            dist.destroy_process_group()
        if __name__ == "__main__":
            mp.spawn(worker, args=(2,), nprocs=2)
        """, name="spawn.py")
    assert spawn == []


def test_sampler_without_set_epoch_and_shuffle_with_sampler(tmp_path):
    fs = lint_src(tmp_path, """\
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        s = DistributedSampler(range(4))
        v = DistributedSampler(range(4), shuffle=False)
        dl = DataLoader(range(4), shuffle=True, sampler=s)
        ok = DataLoader(range(4), shuffle=True, sampler=None)
        for epoch in range(3):
            for x in dl:
                pass
        """)
    assert ids(fs) == [("DL005", 3), ("DL006", 5)]


def test_spawn_without_main_guard_and_signature_mismatch(tmp_path):
    fs = lint_src(tmp_path, """\
        import torch.multiprocessing as mp
        def work(rank, world, epochs):
            pass
        def ok(rank, world, epochs=1):
            pass
        mp.spawn(work, args=(2,), nprocs=2)
        if __name__ == "__main__":
            mp.spawn(ok, args=(2,), nprocs=2)
            mp.spawn(ok, args=(2, 3, 4), nprocs=2)
        """)
    assert ids(fs) == [("DL007", 6), ("DL008", 6), ("DL008", 9)]
    assert "work(rank, world, epochs) takes 3" in [f for f in fs if f.rule == "DL008"][0].message


def test_local_rank_argparse_only(tmp_path):
    fs = lint_src(tmp_path, """\
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=0)
        """)
    assert ids(fs) == [("DL009", 3)] and fs[0].severity.label == "error"
    env = lint_src(tmp_path, """\
        import argparse, os
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=int(os.environ["LOCAL_RANK"]))
        """, name="b.py")
    assert ids(env) == [("DL009", 3)] and env[0].severity.label == "warning"  # only launch >= 2.0 breaks
    assert lint_src(tmp_path, """\
        import argparse, os
        p = argparse.ArgumentParser()
        p.add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
        """, name="c.py") == []


def test_collective_and_ddp_forward_under_rank_zero(tmp_path):
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        def evaluate(net, xs):
            return [net(x) for x in xs]
        def main():
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
            t = torch.ones(1, device="cuda")
            if dist.get_rank() == 0:
                dist.all_reduce(t)
                evaluate(model, [t])
                model.module(t)
            if dist.get_rank() != 0:
                dist.barrier()
            if dist.get_rank() == 0:
                dist.barrier()
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL010", 13)]  # one finding per guarded block: the first collective


def test_every_rank_saving_and_per_node_guard(tmp_path):
    fs = lint_src(tmp_path, """\
        import os, torch
        import torch.distributed as dist
        def save(m):
            torch.save(m, "ckpt.pt")
        def main():
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
            save(1)
            if local_rank == 0:
                torch.save(2, "other.pt")
            torch.save(3, f"rank{dist.get_rank()}.pt")
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL011", 4), ("DL011", 11)]
    assert "one process per node" in fs[1].message


def test_barrier_before_binding_and_ddp_without_device_ids_and_no_destroy(tmp_path):
    fs = lint_src(tmp_path, """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        def main():
            dist.init_process_group("nccl")
            dist.barrier()
            model = DDP(torch.nn.Linear(2, 2).to(dist.get_rank() % 8))
        if __name__ == "__main__":
            main()
        """)
    assert ids(fs) == [("DL012", 6), ("DL013", 7), ("DL014", 5)]


def test_noqa_select_and_ignore(tmp_path):
    src = """\
        import torch
        s = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])  # noqa: DL006
        t = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])
        u = torch.utils.data.DistributedSampler(range(3))
        """
    assert ids(lint_src(tmp_path, src)) == [("DL005", 4), ("DL006", 3)]
    assert ids(lint_src(tmp_path, src, select=["DL006"])) == [("DL006", 3)]
    assert ids(lint_src(tmp_path, src, ignore=["DL00"])) == []


def test_accelerate_and_lightning_scripts_that_delegate_are_clean(tmp_path):
    assert lint_src(tmp_path, """\
        import torch
        from accelerate import Accelerator
        acc = Accelerator()
        model = torch.nn.Linear(2, 2).to(acc.device)
        model, = acc.prepare(model)
        torch.save(model.state_dict(), "x.pt")
        """) == []
    assert lint_src(tmp_path, """\
        import torch, lightning as L
        trainer = L.Trainer(accelerator="gpu", devices=8, strategy="ddp")
        model = torch.nn.Linear(2, 2).cuda()
        """, name="l.py") == []


def _rule_ids():
    from ddpdoctor.lint.registry import all_rules
    return sorted(all_rules())


@pytest.mark.parametrize("rid", _rule_ids())  # every registered rule: a new one needs no edit here
def test_every_rule_is_documented(rid):
    from ddpdoctor.lint.registry import DOC_SECTIONS, all_rules
    r = all_rules()[rid]
    for s in DOC_SECTIONS:
        assert r.doc_section(s), f"{rid} lacks ## {s}"

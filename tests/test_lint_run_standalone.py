"""`ddpdoctor run` judges DL003 with what the launch command says: one node means rank == local rank."""
import textwrap

from ddpdoctor.runcmd import preflight

GLOBAL_RANK_AS_DEVICE = textwrap.dedent("""\
    import torch
    import torch.distributed as dist

    def main():
        dist.init_process_group("nccl")
        torch.cuda.set_device(dist.get_rank())
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    """)


def dl003(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(GLOBAL_RANK_AS_DEVICE)
    pf = preflight(argv, network=False, env={})
    return next(r for r in pf.report.results if r.id == "DL003")


def test_a_standalone_launch_is_not_refused_for_the_global_rank_as_device(tmp_path, monkeypatch):
    r = dl003(tmp_path, monkeypatch, ["torchrun", "--standalone", "--nproc-per-node=2", "train.py"])
    assert r.status.value == "warn"
    assert "single-node" in r.findings[0].message


def test_nnodes_1_is_single_node_too(tmp_path, monkeypatch):
    r = dl003(tmp_path, monkeypatch, ["torchrun", "--nnodes=1", "--nproc-per-node=2", "train.py"])
    assert r.status.value == "warn"


def test_a_multi_node_launch_still_fails_on_it(tmp_path, monkeypatch):
    r = dl003(tmp_path, monkeypatch, ["torchrun", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                                      "--rdzv-endpoint=node1:29400", "--rdzv-id=7", "train.py"])
    assert r.status.value == "fail"

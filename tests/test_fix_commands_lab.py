"""DD202's fix, pasted for real on a lab node whose /etc/hosts (a bind mount, as in Docker) maps its
name to 127.0.1.1 the way Debian's installer does: before, a real 2-node torchrun + Gloo job fails;
after the suggested commands, DD202 passes and the same job runs. The commands run in the node's
mount namespace with an overlay over /etc (so the backup they write never lands in this machine's
/etc), /etc/hosts bound again to the node's own file."""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from lab import run_torchrun_job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dd202(lab, node):
    p = lab.run(node, ["python3", "-m", "ddpdoctor", "network", "--master", "node1", "--json", "--select", "DD202"],
                env={"PYTHONPATH": ROOT}, timeout=60)
    (res,) = json.loads(p.stdout)["results"]
    return res


def _paste(lab, node, commands):
    """Each command in bash as root (`sudo` a no-op), /etc an overlay, /etc/hosts the node's own file."""
    work = tempfile.mkdtemp(prefix="ddpd-lab-fix-")
    try:
        for d in ("upper", "work"):
            os.mkdir(os.path.join(work, d))
        script = "\n".join([
            "set -u", 'sudo() { "$@"; }',
            # keep a handle on the node's own file (the bind mount `ip netns exec` made) before /etc is overlaid
            f"touch {work}/hosts && mount --bind /etc/hosts {work}/hosts",
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={work}/upper,workdir={work}/work /etc",
            f"mount --bind {work}/hosts /etc/hosts",
            *(f"( {c}\n ); echo \"rc=$?\"" for c in commands)])
        p = lab.run(node, ["unshare", "-m", "bash", "-c", script], timeout=60)
        return [ln for ln in p.stdout.splitlines() if ln.startswith("rc=")], p.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_dd202_fix_pasted_on_a_debian_style_node_makes_the_gloo_job_run(make_lab):
    lab = make_lab(("node1", "node2"))
    debian = ["127.0.0.1\tlocalhost", "127.0.1.1\tnode2.lab\tnode2", f"{lab.addr('node1')}\tnode1", "",
              "# The following lines are desirable for IPv6 capable hosts",
              "::1     localhost ip6-localhost ip6-loopback"]
    lab.set_hosts("node2", debian)
    before = run_torchrun_job(lab, master="node1", rdzv="static", job_timeout=10, wall_timeout=90)
    assert not before.ok, "the fault must break the real job first"
    res = _dd202(lab, "node2")
    assert res["status"] == "fail"
    cmds = res["findings"][0]["fix"]["commands"]
    rcs, err = _paste(lab, "node2", cmds)
    assert rcs == ["rc=0"] * len(cmds), err
    text = (lab.node("node2").etc_dir / "hosts").read_text()
    assert "127.0.1.1\tnode2.lab\n" in text and "127.0.0.1\tlocalhost\n" in text, text  # FQDN and localhost kept
    assert text.rstrip().endswith(f"{lab.addr('node2')} node2"), text
    assert _dd202(lab, "node2")["status"] == "pass"
    after = run_torchrun_job(lab, master="node1", rdzv="static", job_timeout=10, wall_timeout=90)
    assert after.ok, after.key_lines("node2")

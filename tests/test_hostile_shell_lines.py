"""Every line `ddpdoctor arm` prints for `eval` and `prolog --task` prints for slurmstepd stays one
line, whatever a path, a node name or the site config holds (issue 21: a newline in TMPDIR ended
the "cannot write" note and `eval` ran the rest)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hostile import ROOT, run_bounded, assert_bounded
from ddpdoctor.render.safe import export_line, note_line, one_line, printable

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

PAYLOAD = "\ntouch {marker}\n"


def _eval(output: str, tmp_path):
    """What `eval "$(ddpdoctor arm)"` does with the output, in a real bash."""
    return subprocess.run(["bash", "-c", 'eval "$1"', "_", output], cwd=tmp_path, capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize("how", ["TMPDIR", "DDPDOCTOR_FR_ROOT", "--dir", "--dir-unwritable"])
def test_a_newline_in_the_dump_directory_never_reaches_eval(tmp_path, how):
    marker = tmp_path / "PWNED"
    evil = str(tmp_path / "d") + PAYLOAD.format(marker=marker)
    env = {"SLURM_JOB_ID": "", "TMPDIR": str(tmp_path)}
    args = ["arm"]
    if how in ("TMPDIR", "DDPDOCTOR_FR_ROOT"):
        env[how] = evil
    elif how == "--dir":
        args += ["--dir", evil]
    else:  # a directory that cannot be made (under a file): the "cannot write" note
        args += ["--dir", "/dev/null/x" + PAYLOAD.format(marker=marker)]
    o = run_bounded(args, env=env)
    assert_bounded(o, codes=(0,))
    for line in o.stdout.splitlines():
        assert line.startswith(("export ", "# ")), line
    _eval(o.stdout, tmp_path)
    assert not marker.exists(), o.stdout
    assert not any(p.name.startswith("d\n") for p in tmp_path.iterdir())  # nothing made at the hostile path


def test_arm_still_exports_a_plain_directory_with_a_space_quoted(tmp_path):
    o = run_bounded(["arm", "--dir", str(tmp_path / "a b")], env={"SLURM_JOB_ID": "77"})
    assert_bounded(o, codes=(0,))
    r = _eval(o.stdout + '\necho "$TORCH_FR_DUMP_TEMP_FILE"', tmp_path)
    assert r.stdout.strip() == f"{tmp_path}/a b/77/fr_rank_"


@pytest.mark.parametrize("where", ["fr_dir", "SLURMD_NODENAME", "SLURM_JOB_NODELIST"])
def test_prolog_task_prints_one_line_per_value(tmp_path, where):
    marker = tmp_path / "PWNED"
    conf = tmp_path / "site.toml"
    fr_dir = str(tmp_path / "fr")
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "nodea,nodeb", "SLURMD_NODENAME": "nodeb",
           "DDPDOCTOR_CONFIG": str(conf)}
    if where == "fr_dir":
        fr_dir = "/dev/null/x" + PAYLOAD.format(marker=marker)
    else:
        env[where] = "nodea\nexport LD_PRELOAD=/tmp/evil.so\nprint x"
    conf.write_text('[task]\nfr_dir = "' + fr_dir.replace("\n", "\\n") + '"\n')  # TOML's \n: a real newline
    o = run_bounded(["prolog", "--task"], env=env)
    assert_bounded(o, codes=(0,))
    lines = o.stdout.splitlines()
    assert all(line.startswith(("export ", "print ")) for line in lines), o.stdout
    assert not any("LD_PRELOAD" in line.split("=", 1)[0] for line in lines if line.startswith("export "))
    assert not any(line.startswith("touch") for line in lines)


def test_the_quoting_functions():
    assert one_line("a\nb\rc\x1bd\u2028") == "a\\nb\\rc\\x1bd\\u2028"
    assert printable("ok\tx\n\x1bc\x9b") == "ok\tx\n\\x1bc\\x9b"
    assert note_line("x\ny", shell=True) == "# x\\ny"
    assert export_line("A", "a b", shell=True) == "export A='a b'"
    assert export_line("A", "a b", shell=False) is None
    assert export_line("A", "a\nb", shell=True) is None
    assert export_line("A;B", "x", shell=True) is None

"""Hostile site configs and --reference files (issue 21): over 1 MiB is an error, never a silent cut
(later keys vanished, here a drain followed); a FIFO or /dev/zero is one line, never a wait."""
from __future__ import annotations

import json
import os

import pytest

from hostile import assert_bounded, assert_one_line_refusal, run_bounded
from ddpdoctor import siteconfig

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob


def test_a_site_config_over_1_mib_is_an_error_not_a_cut(tmp_path):
    conf = tmp_path / "site.toml"
    # the keys that matter come last: a cut at 1 MiB would drop them and silently use the defaults
    conf.write_text("# " + "x" * (1 << 20) + "\n[prolog]\ndrain = false\n")
    with pytest.raises(siteconfig.ConfigError, match="larger than 1 MiB"):
        siteconfig.load(str(conf))


def test_a_site_config_just_under_1_mib_is_read(tmp_path):
    conf = tmp_path / "site.toml"
    head = "[prolog]\ndrain = false\n"
    conf.write_text(head + "#" * ((1 << 20) - len(head) - 1) + "\n")
    assert siteconfig.load(str(conf)).drain is False


@pytest.mark.parametrize("make", ["fifo", "zero"])
def test_a_special_site_config_is_one_line(tmp_path, make):
    conf = tmp_path / "site.toml"
    if make == "fifo":
        os.mkfifo(conf)
    else:
        conf.symlink_to("/dev/zero")
    o = run_bounded(["prolog", "--json", "--config", str(conf)])
    assert_bounded(o, codes=(0, 1, 2))
    assert "not a regular file" in o.stderr, o.stderr
    json.loads(o.stdout)


@pytest.mark.parametrize("make", ["fifo", "zero", "big"])
def test_cluster_reference_that_is_not_a_small_file_is_one_line(tmp_path, make):
    ref = tmp_path / "ref.json"
    if make == "fifo":
        os.mkfifo(ref)
    elif make == "zero":
        ref.symlink_to("/dev/zero")
    else:
        ref.write_text(json.dumps({"torch": "2.13.0", "pad": "x" * (2 << 20)}))
    o = run_bounded(["cluster", "--reference", str(ref)], env={"SLURM_JOB_ID": ""})
    assert_one_line_refusal(o)
    assert "--reference" in o.stderr


def test_a_deeply_nested_reference_is_one_line(tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text("[" * 100_000 + "]" * 100_000)
    o = run_bounded(["cluster", "--reference", str(ref)], env={"SLURM_JOB_ID": ""})
    assert_one_line_refusal(o)

"""Lint quality and speed, and TorchFix beside it.

Quality: precision and recall per rule against the hand labels of tests/lint_corpus (manifest.json),
on dev/ (rules were tuned on it) and on heldout/ (never looked at while tuning: the score that
counts). A finding matches a label with the same rule, file and line.
Speed: 100 scripts of ~300 lines linted in one call (target < 2 s), a generated project of 500 files
that import each other (target < 10 s), and `import torch` never happens.
TorchFix (pytorch-labs/torchfix, `pip install torchfix`; found on PATH or as $TORCHFIX) runs on the
same corpus files and the same 100 scripts, one process (-j 1) like lint: its findings by code and
its time. It has no DDP rule, so none of its findings match a label; the comparison shows what each
tool looks at and what it costs.

    python3 benchmarks/bench_lint.py [--json] [--no-run] [--no-torchfix]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO / "tests" / "lint_corpus"
SPLITS = ("dev", "heldout", "fresh", "fresh2", "fresh3")


def score(split: str, kind: str | None = None):
    from ddpdoctor.lint import lint_paths
    from ddpdoctor.lint.registry import all_rules

    man = json.loads((CORPUS / "manifest.json").read_text())
    tp, fp, fn = Counter(), Counter(), Counter()
    errors_on_clean = []
    n = 0
    for e in man["entries"]:
        if e["split"] != split or (kind and e["kind"] != kind):
            continue
        n += 1
        path = CORPUS / split / e["file"]
        res = lint_paths([str(path)])
        base = Path(e["file"]).name
        want = {(lb["rule"], lb.get("file", base), lb["line"]) for lb in e["labels"]}
        got = {(f.rule, Path(f.path).name, f.line) for f in res.findings}
        for k in got & want:
            tp[k[0]] += 1
        for k in got - want:
            fp[k[0]] += 1
        for k in want - got:
            fn[k[0]] += 1
        if not e["labels"] and any(f.severity.label == "error" for f in res.findings):
            errors_on_clean.append(e["file"])
    rows = {}
    for rid in sorted(all_rules()):
        t, f_, m = tp[rid], fp[rid], fn[rid]
        rows[rid] = {"tp": t, "fp": f_, "fn": m,
                     "precision": round(t / (t + f_), 3) if t + f_ else None,
                     "recall": round(t / (t + m), 3) if t + m else None}
    T, F, M = sum(tp.values()), sum(fp.values()), sum(fn.values())
    total = {"scripts": n, "tp": T, "fp": F, "fn": M,
             "precision": round(T / (T + F), 3) if T + F else None,
             "recall": round(T / (T + M), 3) if T + M else None,
             "clean_scripts_with_error_findings": errors_on_clean}
    return rows, total


def speed():
    """100 generated scripts of ~300 lines, shaped like real DDP scripts (several rules fire)."""
    from ddpdoctor.lint import lint_paths

    src = (CORPUS / "dev" / "pex_multinode_f45e418.py").read_text().splitlines()
    with tempfile.TemporaryDirectory() as d:
        for i in range(100):
            lines = list(src)
            k = 0
            while len(lines) < 300:
                lines += [f"def helper_{i}_{k}(x, device):", f"    y = x.to(device) * {k}",
                          "    if y.sum() > 0:", "        return y.cuda()", "    return y", ""]
                k += 1
            Path(d, f"s{i:03d}.py").write_text("\n".join(lines[:300]) + "\n")
        best = cpu = None
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            res = lint_paths([d])
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            best = dt if best is None else min(best, dt)
            cpu = dc if cpu is None else min(cpu, dc)
        # CPU seconds too: on a shared machine the wall clock measures the neighbours
        return {"files": res.files, "lines_each": 300, "seconds": round(best, 3), "cpu_seconds": round(cpu, 3),
                "target_s": 2.0, "ratio_to_target": round(best / 2.0, 3), "findings": len(res.findings)}


def _project(d: Path, n: int = 500):
    """A package of n modules: a utils/ package, model and data modules importing siblings, train scripts."""
    src = (CORPUS / "dev" / "pex_multinode_f45e418.py").read_text()
    (d / "proj" / "utils").mkdir(parents=True)
    (d / "proj" / "utils" / "__init__.py").write_text("")
    (d / "proj" / "utils" / "dist.py").write_text(
        "import os\nimport torch\nimport torch.distributed as dist\n\n\ndef setup():\n"
        "    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n    dist.init_process_group('nccl')\n"
        "    return dist.get_rank()\n\n\ndef cleanup():\n    dist.destroy_process_group()\n")
    body = "\n".join(f"def f{k}(x, device):\n    y = x.to(device) * {k}\n    return y.cuda() if y.sum() else y\n"
                     for k in range(30))
    for i in range(n - 2):
        if i % 10 == 0:
            text = f"from utils.dist import setup, cleanup\nimport m{(i + 1) % (n - 2)}\n" + src
        else:
            text = f"import torch\nimport m{(i + 1) % (n - 2)}\nfrom utils import dist as du\n\n" + body
        (d / "proj" / f"m{i}.py").write_text(text)
    return d / "proj"


def project_speed():
    from ddpdoctor.lint import lint_paths

    with tempfile.TemporaryDirectory() as d:
        proj = _project(Path(d))
        t0, c0 = time.perf_counter(), time.process_time()
        res = lint_paths([str(proj)])
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        lines = sum(len(p.read_text().splitlines()) for p in proj.rglob("*.py"))
    return {"files": res.files, "lines": lines, "seconds": round(dt, 3), "cpu_seconds": round(dc, 3), "target_s": 10.0,
            "ratio_to_target": round(dt / 10.0, 3), "findings": len(res.findings)}


def _torchfix_bin():
    import shutil
    return os.environ.get("TORCHFIX") or shutil.which("torchfix")


def torchfix_side_by_side():
    """TorchFix and lint on the same files: findings by code, seconds (one process each)."""
    import re
    import subprocess
    from ddpdoctor.lint import lint_paths

    exe = _torchfix_bin()
    if not exe:
        return {"installed": False}
    out = {"installed": True, "version": subprocess.run([exe, "--version"], capture_output=True, text=True,
                                                        timeout=60).stdout.strip()}
    sets = {split: [str(CORPUS / split)] for split in ("heldout", "fresh2")}
    with tempfile.TemporaryDirectory() as d:
        src = (CORPUS / "dev" / "pex_multinode_f45e418.py").read_text().splitlines()
        for i in range(100):
            Path(d, f"s{i:03d}.py").write_text("\n".join((src * 3)[:300]) + "\n")
        sets["speed_100x300"] = [d]
        for name, paths in sets.items():
            t0 = time.perf_counter()
            p = subprocess.run([exe, "-j", "1", *paths], capture_output=True, text=True, timeout=900)
            tf_s = time.perf_counter() - t0
            codes = Counter(re.findall(r": (TOR\d+) ", p.stdout))
            t0 = time.perf_counter()
            res = lint_paths(paths)
            ours_s = time.perf_counter() - t0
            out[name] = {"torchfix": {"seconds": round(tf_s, 3), "findings": sum(codes.values()),
                                      "by_code": dict(sorted(codes.items()))},
                         "lint": {"seconds": round(ours_s, 3), "findings": len(res.findings),
                                  "by_rule": dict(sorted(Counter(f.rule for f in res.findings).items()))}}
    return out


def run_overhead(n: int = 7):
    """Seconds `ddpdoctor run` adds before exec: wall(ddpdoctor run -- python noop.py) - wall(python noop.py).

    Two commands: a single-node torchrun (parse + DD82x + lint; torchrun itself replaced by the noop
    via --dry-run is not the same path, so the plain-python form is measured end to end), and a
    multi-node torchrun command checked with --dry-run including the network pre-flight.
    """
    import statistics
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory() as d:
        Path(d, "noop.py").write_text("pass\n")
        Path(d, "train.py").write_text((CORPUS / "dev" / "pex_multinode_HEAD.py").read_text())

        def wall(cmd):
            ts = []
            for _ in range(n):
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=d, env=env, capture_output=True, timeout=60)
                ts.append(time.perf_counter() - t0)
            return statistics.median(ts)

        base = wall([sys.executable, "noop.py"])
        via = wall([sys.executable, "-m", "ddpdoctor", "run", "--", sys.executable, "noop.py"])
        host = __import__("socket").gethostname()
        tr = wall([sys.executable, "-m", "ddpdoctor", "run", "--dry-run", "--", "torchrun", "--nnodes=2",
                   "--nproc-per-node=8", "--rdzv-backend=c10d", f"--rdzv-endpoint={host}:29400", "--rdzv-id=7",
                   "train.py"])
        empty = wall([sys.executable, "-c", "pass"])
    return {"python_noop_s": round(base, 3), "via_run_s": round(via, 3),
            "overhead_before_exec_s": round(via - base, 3),
            "torchrun_multinode_dry_run_s": round(tr - empty, 3), "target_s": 0.3}


def main():
    out = {}
    for split in SPLITS:
        rows, total = score(split)
        out[split] = {"per_rule": rows, "total": total,
                      "by_kind": {k: score(split, k)[1] for k in ("verbatim", "reduced")}}
    out["speed"] = speed()
    out["project"] = project_speed()
    if "--no-torchfix" not in sys.argv:
        out["torchfix"] = torchfix_side_by_side()
    out["torch_imported"] = "torch" in sys.modules
    if "--no-run" not in sys.argv:
        out["run"] = run_overhead()
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1))
        return
    for split in SPLITS:
        t = out[split]["total"]
        print(f"{split}: {t['scripts']} scripts  precision {t['precision']}  recall {t['recall']}  "
              f"(tp {t['tp']} fp {t['fp']} fn {t['fn']}); clean scripts with an error finding: "
              f"{len(t['clean_scripts_with_error_findings'])} {t['clean_scripts_with_error_findings']}")
        for k, kt in out[split]["by_kind"].items():
            if kt["scripts"]:
                print(f"  {k:8} {kt['scripts']:3} scripts  precision {kt['precision']}  recall {kt['recall']}  "
                      f"(tp {kt['tp']} fp {kt['fp']} fn {kt['fn']})")
        for rid, r in out[split]["per_rule"].items():
            if r["tp"] or r["fp"] or r["fn"]:
                print(f"  {rid}  P {r['precision']!s:5}  R {r['recall']!s:5}  tp {r['tp']} fp {r['fp']} fn {r['fn']}")
    s = out["speed"]
    print(f"speed: {s['files']} files x {s['lines_each']} lines in {s['seconds']} s wall, {s['cpu_seconds']} s CPU "
          f"({s['ratio_to_target']} of the {s['target_s']} s budget); torch imported: {out['torch_imported']}")
    pj = out["project"]
    print(f"project: {pj['files']} files ({pj['lines']} lines, importing each other) in {pj['seconds']} s wall, "
          f"{pj['cpu_seconds']} s CPU "
          f"({pj['ratio_to_target']} of the {pj['target_s']} s budget)")
    tf = out.get("torchfix")
    if tf is not None and not tf.get("installed"):
        print("torchfix: not installed (pip install torchfix, or TORCHFIX=/path/to/torchfix)")
    elif tf is not None:
        print(f"torchfix {tf['version']} beside lint, same files, one process each:")
        for name in ("heldout", "fresh2", "speed_100x300"):
            a, b = tf[name]["torchfix"], tf[name]["lint"]
            print(f"  {name:14} torchfix {a['findings']:3} findings {a['seconds']:7.2f} s {a['by_code']}")
            print(f"  {'':14} lint     {b['findings']:3} findings {b['seconds']:7.2f} s {b['by_rule']}")
    if "run" in out:
        r = out["run"]
        print(f"run: overhead before exec {r['overhead_before_exec_s']} s (python noop {r['python_noop_s']} s, via "
              f"ddpdoctor run {r['via_run_s']} s); multi-node torchrun pre-flight incl. network "
              f"{r['torchrun_multinode_dry_run_s']} s beyond interpreter start; target {r['target_s']} s")


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main()

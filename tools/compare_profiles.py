"""scripts/compare-profiles: run the pipeline under two profiles over the same input and compare them.

    scripts/compare-profiles --profiles cpu,gpu [--customers N | --input DIR] [--out DIR] [--master URL]

Generates the input once (unless --input), runs the whole pipeline per profile into <out>/<profile>, then
compares every table, the quarantine, the model and the stage times (tools/compare.py). Writes
<out>/comparison.json and comparison.md; exits 0 on full parity, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PY = sys.executable


def sh(args: list[str]) -> None:
    print("+ " + " ".join(args), flush=True)
    rc = subprocess.call(args)
    if rc != 0:
        raise SystemExit(rc)


def render(result: dict, left: str, right: str) -> str:
    lines = [f"# {left} vs {right}", "", f"Parity: **{'yes' if result['parity'] else 'NO'}**", "",
             "| table | rows | parity | differences |", "| --- | --- | --- | --- |"]
    for name, t in result["tables"].items():
        lines.append(f"| {name} | {' / '.join(map(str, t.get('rows', [])))} | {'yes' if t['parity'] else 'NO'} | "
                     f"{'; '.join(t['diffs'][:5])} |")
    m = result["model"]
    lines += ["", f"Model: test ROC AUC {m['roc_auc'][0]} vs {m['roc_auc'][1]}; parity {'yes' if m['parity'] else 'NO'}"
              + (f" ({'; '.join(m['diffs'][:5])})" if m["diffs"] else ""), "",
              *_predictions_line(m.get("predictions") or {}),
              f"| stage | {left} s | {right} s | speed-up |", "| --- | ---: | ---: | ---: |"]
    for stage, t in result["timings"].items():
        lines.append(f"| {stage} | {t['left_s']} | {t['right_s']} | {t['speedup']} |")
    return "\n".join(lines) + "\n"


def _predictions_line(p: dict) -> list[str]:
    if not p:
        return []
    return [f"Predictions, customer by customer: {p['matched']} of {p['rows']} matched; probability difference "
            f"max {p['max_abs_diff']:.3g}, mean {p['mean_abs_diff']:.3g}; same decile {p['same_decile_share']:.4f} "
            f"(largest move {p.get('max_decile_step')})", ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/compare-profiles", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default="cpu,gpu-explain")
    p.add_argument("--out", default="runs/compare")
    p.add_argument("--input", help="existing CSV folder with manifest.json (default: generate into <out>/data)")
    p.add_argument("--customers", type=int, default=20_000)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--reuse", action="store_true", help="keep a profile's finished run in <out> instead of rerunning")
    p.add_argument("--only", choices=("generate", "left", "right", "compare"),
                   help="do one step only (long runs split over several calls)")
    p.add_argument("--conf", action="append", default=[], help="extra Spark property for both runs")
    p.add_argument("--profile-conf", action="append", default=[], metavar="PROFILE:KEY=VALUE",
                   help="extra Spark property for one profile's run only (e.g. gpu:spark.executor.cores=16)")
    args = p.parse_args(argv)
    left, right = args.profiles.split(",")
    out = Path(args.out)
    data = Path(args.input) if args.input else out / "data"
    common = ["--master", args.master, *sum((["--conf", c] for c in args.conf), [])]
    steps = [args.only] if args.only else ["generate", "left", "right", "compare"]
    if "generate" in steps and not args.input and not (data / "manifest.json").exists():
        sh([PY, "-m", "jobs.launch", "submit", "--profile", "cpu", *common, "generate", "--out", str(data),
            "--customers", str(args.customers)])
    for step, profile in (("left", left), ("right", right)):
        if step not in steps or (args.reuse and (out / profile / "report" / "report.json").exists()):
            continue
        own = sum((["--conf", pc.split(":", 1)[1]] for pc in args.profile_conf if pc.split(":", 1)[0] == profile), [])
        sh([PY, "-m", "jobs.launch", "pipeline", "--profile", profile, *common, *own,
            "--out", str(out / profile), "--input", str(data)])
    if "compare" not in steps:
        return 0
    sh([PY, "-m", "jobs.launch", "submit", "--profile", "cpu", *common, "tools/compare.py",
        "--left", str(out / left), "--right", str(out / right), "--out", str(out / "comparison.json")])
    result = json.loads((out / "comparison.json").read_text())
    (out / "comparison.md").write_text(render(result, left, right))
    print((out / "comparison.md").read_text())
    return 0 if result["parity"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""``scripts/advise``: which profile and layout for an input, with estimated stage times (docs/advise.md).

    scripts/advise --input DIR [--json | --emit-conf] [resources]
    scripts/advise --calibrate [--customers 50000,300000] [--profile cpu|gpu]
    scripts/advise --add-run REPORT_OR_LAKE --host NAME --profile cpu|gpu --cores N [--gpus N] [--wall S]
                   [--source TEXT] [--calibration FILE]      a measured run into a calibration file

Resources (left out: this machine's, detected): --cores N (in all), --memory GIB (a node), --gpus N (in all),
--gpu-memory GIB (a GPU), --gpu-model NAME, --nodes N, --cores-per-node N. With --nodes or --cores-per-node the
layout is a standalone cluster's; without, one machine (local[*]).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from jobs.advise import calibration as cal_mod
from jobs.advise.advisor import advise, render, this_host_name
from jobs.advise.calibration import Host
from jobs.advise.layout import Resources, check, detect
from jobs.advise.sizing import size_input
from jobs.core.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION_SIZES = (50_000, 300_000)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/advise", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="the input folder (customers/ and events/ of CSV files)")
    p.add_argument("--json", action="store_true", help="the advice as JSON")
    p.add_argument("--emit-conf", action="store_true",
                   help="only the recommended scripts/pipeline options, on one line")
    p.add_argument("--calibrate", action="store_true", help="measure this machine: short runs on generated samples")
    p.add_argument("--customers", default=",".join(map(str, CALIBRATION_SIZES)),
                   help="--calibrate's sample sizes in customers (default 50000,300000)")
    p.add_argument("--profile", choices=("cpu", "gpu"), help="--calibrate: the profile to measure (default cpu, and "
                                                            "gpu too when this machine has one)")
    p.add_argument("--add-run", metavar="REPORT_OR_LAKE",
                   help="add a measured run: a pipeline's report.json, or its lake folder (lake/_stages)")
    p.add_argument("--host", help="--add-run: the calibration host's name (new hosts take --cores, --memory, --gpus, "
                                  "--gpu-memory, --gpu-model)")
    p.add_argument("--wall", type=float, help="--add-run: the run's wall seconds, when known")
    p.add_argument("--source", help="--add-run: where the figures come from (default: the path given)")
    p.add_argument("--commit", default="", help="--add-run: the project commit that ran")
    p.add_argument("--work", default=str(ROOT / "runs" / "calibrate"), help="--calibrate's folder")
    p.add_argument("--calibration", action="append", type=Path,
                   help="calibration file(s) (default conf/calibration.json, then conf/calibration.local.json)")
    for name, kind, what in (("cores", int, "cores in all"), ("memory", float, "GiB of memory a node"),
                             ("gpus", int, "GPUs in all"), ("gpu-memory", float, "GiB of memory a GPU"),
                             ("gpu-model", str, "GPU model (e.g. H200)"), ("nodes", int, "nodes"),
                             ("cores-per-node", int, "cores a node")):
        p.add_argument(f"--{name}", type=kind, help=what)
    return p


def resources(a: argparse.Namespace) -> tuple[Resources, bool]:
    """The target and whether it is this machine as detected."""
    given = [a.cores, a.memory, a.gpus, a.gpu_memory, a.gpu_model, a.nodes, a.cores_per_node]
    here = detect()
    if all(v is None for v in given):
        return check(here), True
    cluster = a.nodes is not None or a.cores_per_node is not None
    nodes = a.nodes if a.nodes is not None else 1
    if a.cores_per_node is not None:
        per_node = a.cores_per_node
    elif a.cores is not None:
        if nodes > 0 and a.cores % nodes:
            raise UserError(f"--cores {a.cores} do not split evenly over {nodes} nodes: give --cores-per-node")
        per_node = a.cores // nodes if nodes > 0 else a.cores
    else:
        per_node = here.cores_per_node
    gpus = a.gpus if a.gpus is not None else (0 if cluster or a.cores is not None else here.gpus)
    r = Resources(nodes, per_node, a.memory if a.memory is not None else here.memory_per_node_gib, gpus,
                  a.gpu_memory if a.gpu_memory is not None else (here.gpu_memory_gib if gpus else 0.0),
                  a.gpu_model if a.gpu_model is not None else (here.gpu_model if gpus else ""), not cluster)
    check(r)
    same = replace(r, memory_per_node_gib=round(r.memory_per_node_gib)) == replace(
        here, memory_per_node_gib=round(here.memory_per_node_gib))
    return r, same


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def calibrate(a: argparse.Namespace) -> int:
    """Short pipeline runs on generated samples of this machine; their stage records into conf/calibration.local.json."""
    sizes = [int(x) for x in a.customers.split(",") if x.strip()]
    if len(sizes) < 2 or min(sizes) <= 0:
        raise UserError(f"--customers {a.customers!r}: give two sizes or more, e.g. 50000,300000 (two separate the "
                        f"fixed costs from those per record)")
    here = detect()
    profiles = [a.profile] if a.profile else ["cpu"] + (["gpu"] if here.gpus else [])
    work = Path(a.work)
    name = this_host_name()
    host = Host(name, here.cores, here.memory_per_node_gib, here.gpus, here.gpu_model, here.gpu_memory_gib,
                f"calibrated here on {dt.date.today()} by scripts/advise --calibrate --customers {a.customers}")
    runs = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    for n in sizes:
        data = work / f"input-{n}"
        if not (data / "manifest.json").is_file():
            print(f"advise: generating {n:,} customers into {data}", flush=True)
            subprocess.run([str(ROOT / "scripts" / "submit"), "--conf", "spark.ui.showConsoleProgress=false", "generate",
                            "--out", str(data), "--customers", str(n), "--overwrite"], check=True, cwd=ROOT)
        for profile in profiles:
            out = work / f"run-{profile}-{n}"
            shutil.rmtree(out, ignore_errors=True)
            print(f"advise: the pipeline under {profile} on {n:,} customers", flush=True)
            wall = _timed([str(ROOT / "scripts" / "pipeline"), "--profile", profile, "--input", str(data),
                           "--out", str(out), "--conf", "spark.ui.showConsoleProgress=false"])
            run = cal_mod.run_from_lake(out / "lake", source=f"scripts/advise --calibrate ({out})", host=name,
                                        profile=profile, cores=here.cores, gpus=here.gpus if profile == "gpu" else 0,
                                        wall_s=wall, commit=commit)
            runs.append(run)
            print(f"advise: {run.records:,} records in {wall:.1f} s", flush=True)
    path = (a.calibration or [cal_mod.LOCAL_FILE])[-1]
    cal_mod.write(cal_mod.Calibration({name: host}, runs), path)
    cal = cal_mod.load([cal_mod.REPO_FILE, path])
    print(f"advise: wrote {path}")
    for profile in profiles:
        for stage, m in cal.fit(name, profile).items():
            unit = "customers" if stage in cal_mod.CUSTOMER_STAGES else "records"
            print(f"  {profile} {stage:<9} fixed {m.fixed_s:7.1f} s + {m.us_per_unit:8.2f} us x {unit} / "
                  f"{'GPUs' if profile == 'gpu' else 'cores'}")
    return 0


def add_run(a: argparse.Namespace) -> int:
    """One measured run (a report.json or a lake) appended to a calibration file, its host added if new."""
    if not (a.host and a.profile and a.cores):
        raise UserError("--add-run needs --host NAME, --profile cpu|gpu and --cores N (the application's task cores)")
    path = (a.calibration or [cal_mod.REPO_FILE])[-1]
    cal = cal_mod.read(path) if path.is_file() else cal_mod.Calibration({}, [])
    src = Path(a.add_run)
    kw = dict(source=a.source or str(src), host=a.host, profile=a.profile, cores=a.cores,
              gpus=(a.gpus or 0) if a.profile == "gpu" else 0, wall_s=a.wall, commit=a.commit)
    if src.is_dir():
        run = cal_mod.run_from_lake(src, **kw)
    elif src.is_file():
        try:
            run = cal_mod.run_from_report(json.loads(src.read_text()), report_s=cal_mod.report_seconds(src), **kw)
        except (KeyError, ValueError) as e:
            raise UserError(f"{src} is not a pipeline's report.json ({e}): pass report/report.json or the lake") from None
    else:
        raise UserError(f"--add-run {src}: no such file or folder")
    if a.host not in cal.hosts:
        if a.memory is None:
            raise UserError(f"host {a.host!r} is new: describe it with --memory GIB (and --gpus, --gpu-memory, "
                            f"--gpu-model for a GPU host)")
        cal.hosts[a.host] = Host(a.host, a.cores, a.memory, a.gpus or 0, a.gpu_model or "", a.gpu_memory or 0.0,
                                 f"added by scripts/advise --add-run on {dt.date.today()}")
    cal.runs.append(run)
    about = json.loads(path.read_text()).get("about") if path.is_file() else None
    cal_mod.write(cal, path, about)
    print(f"advise: {path}: {a.profile} run of {run.records:,} records on {a.host} added "
          f"({', '.join(f'{k} {v:g}' for k, v in run.seconds.items())})")
    return 0


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        if a.add_run:
            return add_run(a)
        if a.calibrate:
            try:
                return calibrate(a)
            except subprocess.CalledProcessError as e:
                raise UserError(f"a calibration run failed (exit {e.returncode}): {' '.join(map(str, e.cmd))}; its "
                                f"output above says why") from None
        if not a.input:
            raise UserError("give --input DIR (the folder to run), or --calibrate")
        size = size_input(a.input)
        if size.records <= 0:
            raise UserError(f"{a.input}: its CSV files hold no records: pass --input a folder with data")
        r, here = resources(a)
        cal = cal_mod.load(a.calibration)
        advice = advise(size, r, cal, here)
    except UserError as e:
        print(f"advise: error: {e}", file=sys.stderr)
        return 2
    if a.emit_conf:
        best = advice.recommended
        print(" ".join([f"--profile {best.profile}", f"--master {best.layout.master}",
                        *(f"--conf {k}={v}" for k, v in best.layout.conf().items())]))
    elif a.json:
        print(json.dumps(advice.to_json(), indent=1))
    else:
        print(render(advice))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

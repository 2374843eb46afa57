"""The whole pipeline in one Spark application: generate -> ingest -> clean -> features -> train -> score
-> report, with one progress line per stage (start / end, elapsed time, row counts).

Started by scripts/pipeline (which validates the arguments first and turns on Spark event logs), or by hand:
    scripts/submit --profile cpu pipeline --out runs/demo --customers 100000
Output folder layout: data/ (generated CSV, unless --input), lake/ (Delta tables), models/, report/, eventlog/.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from jobs import gpu_explain
from jobs.errors import UserError

DEFAULT_CUSTOMERS = 100_000
DEFAULT_AS_OF = "2026-06-30"


@dataclass
class PipelineArgs:
    out: str
    input: str | None = None
    customers: int = DEFAULT_CUSTOMERS
    seed: int = 7
    as_of: str | None = None
    churn_rate: float = 0.2
    defect_rate: float = 0.01
    rows_per_file: int = 1_000_000
    reg_params: tuple[float, ...] = (0.0, 0.001, 0.01)
    stages: tuple[str, ...] = field(default=())

    @property
    def data(self) -> str:
        return self.input or os.path.join(self.out, "data")

    @property
    def lake(self) -> str:
        return os.path.join(self.out, "lake")

    @property
    def models(self) -> str:
        return os.path.join(self.out, "models")

    @property
    def report_dir(self) -> str:
        return os.path.join(self.out, "report")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pipeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/latest", help="output folder (default runs/latest)")
    p.add_argument("--input", help="existing CSV folder (customers/, events/); skips generate")
    p.add_argument("--customers", type=int, default=DEFAULT_CUSTOMERS, help="customers to generate (~10 events each)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--as-of", dest="as_of", help="as-of date YYYY-MM-DD (default: the manifest's, else 2026-06-30)")
    p.add_argument("--churn-rate", dest="churn_rate", type=float, default=0.2)
    p.add_argument("--defect-rate", dest="defect_rate", type=float, default=0.01)
    p.add_argument("--rows-per-file", dest="rows_per_file", type=int, default=1_000_000)
    return p


def parse(argv: list[str]) -> PipelineArgs:
    ns = parser().parse_args(argv)
    return PipelineArgs(**vars(ns))


def validate(args: PipelineArgs) -> PipelineArgs:
    """Every mistake a user can make in the call, found before anything is written."""
    if args.input is None and args.customers < 1:
        raise UserError(f"--customers {args.customers}: need at least 1 customer to generate")
    if not 0 <= args.defect_rate < 1 or not 0 < args.churn_rate < 1:
        raise UserError("--defect-rate must be in [0, 1) and --churn-rate in (0, 1)")
    if args.input is not None:
        src = Path(args.input)
        if not src.is_dir():
            raise UserError(f"--input {args.input}: no such folder; point it at a folder holding customers/ "
                            "and events/ CSV files, or leave it out to generate data")
        for ds in ("customers", "events"):
            if not any((src / ds).glob("*.csv*")):
                raise UserError(f"--input {args.input}: no CSV files in {src / ds}; expected "
                                f"{src}/customers/*.csv and {src}/events/*.csv (optionally .gz)")
        if args.as_of is None:
            manifest = src / "manifest.json"
            if not manifest.is_file():
                raise UserError(f"--input {args.input} has no manifest.json to take the as-of date from: "
                                "pass --as-of YYYY-MM-DD")
            args.as_of = json.loads(manifest.read_text())["generator"]["as_of"]
    args.as_of = args.as_of or DEFAULT_AS_OF
    try:
        date.fromisoformat(args.as_of)
    except ValueError:
        raise UserError(f"--as-of {args.as_of!r} is not a date: use YYYY-MM-DD") from None
    args.out = os.path.abspath(args.out)  # tables, reports and event logs name one place, whatever the cwd
    if args.input is not None:
        args.input = os.path.abspath(args.input)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UserError(f"--out {args.out} is not writable ({e.strerror}): choose another folder") from None
    if args.input is None and (Path(args.data) / "manifest.json").exists():
        # Regenerating over old data would mix two datasets' files; the lake is rebuilt idempotently anyway.
        raise UserError(f"{args.data} already holds generated data: pass --input {args.data} to reuse it, "
                        "or choose a new --out")
    return args


class Progress:
    """One line per stage start and end on stdout, with elapsed time and row counts. Each stage's Spark jobs
    carry the stage's name as their job group (the Spark UI and the event log group them by it;
    scripts/bench-memory reads each stage's memory peaks that way)."""

    def __init__(self, sc=None) -> None:
        self.t0 = time.perf_counter()
        self.timings: dict[str, float] = {}
        self.sc = sc

    def line(self, text: str) -> None:
        print(f"[pipeline {time.perf_counter() - self.t0:7.1f}s] {text}", flush=True)

    def stage(self, name: str, fn, describe=lambda r: ""):
        if self.sc is not None:
            self.sc.setJobGroup(name, f"pipeline stage {name}")
        self.line(f"{name}: start")
        t = time.perf_counter()
        result = fn()
        self.timings[name] = round(time.perf_counter() - t, 2)
        detail = describe(result)
        self.line(f"{name}: done in {self.timings[name]:.1f}s" + (f" ({detail})" if detail else ""))
        return result


def _rows(counts: dict, *keys: str) -> str:
    return ", ".join(f"{k} {counts[k]:,}" for k in keys if isinstance(counts.get(k), int))


def _per_dataset(record, *fields: str) -> str:
    """e.g. 'customers: bronze 99,010 quarantined 990; events: ...' from a stage record's totals."""
    parts = []
    for ds, t in record.counts.get("totals", {}).items():
        vals = [f"{f} {sum(t[f].values()) if isinstance(t.get(f), dict) else t.get(f, 0):,}" for f in fields]
        parts.append(f"{ds}: " + " ".join(vals))
    return "; ".join(parts)


def run(spark, args: PipelineArgs) -> dict:
    from jobs import clean, features, generate, ingest, ml, report, score, train

    progress = Progress(spark.sparkContext)
    ui = spark.sparkContext.uiWebUrl
    progress.line(f"Spark {spark.version}, master {spark.sparkContext.master}"
                  + (f", UI at {ui}" if ui else ""))
    plans = gpu_explain.PlanCollector.for_session(spark)
    records = {}
    if args.input is None:
        manifest = progress.stage("generate", lambda: generate.run(
            spark, args.data, customers=args.customers, seed=args.seed, as_of=args.as_of,
            churn_rate=args.churn_rate, defect_rate=args.defect_rate, rows_per_file=args.rows_per_file),
            lambda m: _rows({k: v["records"] for k, v in m["datasets"].items()}, "customers", "events"))
    with plans.stage("ingest"):
        records["ingest"] = progress.stage("ingest", lambda: ingest.run(spark, args.data, args.lake),
                                           lambda r: _per_dataset(r, "records", "bronze", "quarantined"))
    with plans.stage("clean"):
        records["clean"] = progress.stage("clean", lambda: clean.run(spark, args.lake, args.as_of),
                                          lambda r: _per_dataset(r, "silver", "quarantined", "duplicates_removed"))
    # The train stage's back-end check (spark-rapids-ml: a GPU probe that leaves a warm Python worker for the
    # fit) runs beside the features stage instead of before the fit.
    ml.start_checks(spark)
    with plans.stage("features"):
        records["features"] = progress.stage("features", lambda: features.run(spark, args.lake, args.as_of),
                                             lambda r: _rows(r.counts, "customers", "churned"))
    manifest_path = os.path.join(args.data, "manifest.json")
    with plans.stage("train"):
        records["train"] = progress.stage("train", lambda: train.run(
            spark, args.lake, args.models, reg_params=args.reg_params,
            manifest=manifest_path if os.path.exists(manifest_path) else None),
            lambda r: _rows(r.counts, "train", "validation", "test") + ", " +
            ", ".join(f"{k} {v:.4f}" for k, v in r.counts.items() if isinstance(v, float)))
    run_id = records["train"].extra["run_id"]
    with plans.stage("score"):
        records["score"] = progress.stage("score", lambda: score.run(
            spark, args.lake, records["train"].extra["model_path"], run_id),
            lambda r: _rows(r.counts, "predictions"))
    for name, seconds in progress.timings.items():
        if name in records:
            records[name].seconds = seconds
            records[name].save(args.lake)
    plans.save(os.path.join(args.report_dir, "gpu-fallbacks.json"))
    summary = progress.stage("report", lambda: report.run(spark, args.out, data=args.data,
                                                           timings=progress.timings),
                             lambda path: path)
    progress.line(f"finished: report at {summary}")
    return {"report": summary, "timings": progress.timings}


def main(argv: list[str]) -> int:
    from jobs.session import get_spark

    args = validate(parse(argv))
    spark = get_spark("churn-pipeline")
    run(spark, args)
    return 0

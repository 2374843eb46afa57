"""The one runner of stages: the command line, the session, timing, job groups, the plan collector, saving each
stage's record and turning a user's mistake into one line. A stage run alone (``scripts/submit <stage> ...``)
and the whole pipeline (``scripts/pipeline``) go through the same ``Runner.run``.

    python -m jobs <job> [job args]        (spark-submit runs jobs/__main__.py, which calls main)
"""
from __future__ import annotations

import json
import sys
import time

from jobs import stages
from jobs.core.errors import UserError
from jobs.core.stage import Stage, StageRecord
from jobs.lake import delta_io, lock, plans


def jobs() -> dict:
    """Every job by name: the stages, and the pipeline (the stages in order)."""
    from jobs.run.pipeline import PIPELINE

    return {**{name: stages.stage(name) for name in stages.MODULES}, PIPELINE.name: PIPELINE}


def driver_jit_seconds(spark) -> float | None:
    """The time the driver JVM's JIT compilers have spent so far (HotSpot's compilation counter: the sum over its
    compiler threads), None where the JVM does not keep it. Under ``local[*]`` the driver runs every task, so a
    stage's difference is the run's whole compilation for that stage; on a cluster the executors compile too."""
    bean = spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    if bean is None or not bean.isCompilationTimeMonitoringSupported():
        return None
    return bean.getTotalCompilationTime() / 1000


def job_names() -> tuple[str, ...]:
    return (*stages.MODULES, "pipeline")


def job(name: str):
    if name not in job_names():
        raise UserError(f"unknown job {name!r}; jobs: {', '.join(job_names())}, or a PySpark application file (.py)")
    return jobs()[name]


class Runner:
    """Runs stages in one Spark session: one progress line at each start and end (elapsed time, the stage's
    figures), each stage's Spark jobs under the stage's name as their job group (the Spark UI and the event log
    group them by it), what each stage's writes would not run on the GPU (``plans``), and each stage's record
    saved in ``<lake>/_stages/`` with its time, measured here once."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.t0 = time.perf_counter()
        self.plans = plans.PlanCollector.for_session(spark)
        self.records: dict[str, StageRecord] = {}

    def line(self, text: str) -> None:
        print(f"[churn {time.perf_counter() - self.t0:7.1f}s] {text}", flush=True)

    def run(self, stage: Stage, args: dict, lake: str | None = None) -> StageRecord:
        """Runs ``stage`` with ``args``; its record is saved in ``lake`` (default: the stage's own lake, if any).

        A stage is atomic as a whole: if it fails, every table it writes is put back as it was before it started
        (a table it created is removed, one it changed restored to its earlier version), so a stage that wrote
        one table of two leaves neither half-written."""
        self.spark.sparkContext.setJobGroup(stage.name, f"stage {stage.name}")
        self.line(f"{stage.name}: start")
        started = time.perf_counter()
        lake = lake or args.get("lake")
        before = self.versions(stage, lake)
        compiling = driver_jit_seconds(self.spark)
        try:
            with self.plans.stage(stage.name):
                record = stage.work(self.spark, **stage.arguments(args))
        except BaseException:
            self.roll_back(stage, lake, before)
            raise
        record.seconds = round(time.perf_counter() - started, 2)
        if compiling is not None:
            record.extra["driver_jit_s"] = round(driver_jit_seconds(self.spark) - compiling, 2)
        if lake:
            record.extra["record_path"] = record.save(lake)
        detail = stage.describe(record)
        self.line(f"{stage.name}: done in {record.seconds:.1f}s" + (f" ({detail})" if detail else ""))
        self.records[stage.name] = record
        return record

    def versions(self, stage: Stage, lake: str | None) -> dict[str, int | None]:
        """The latest committed version of each table ``stage`` writes (None: no table yet)."""
        if not lake:
            return {}
        return {t: delta_io.committed_version(self.spark, delta_io.table_path(lake, t)) for t in stage.writes}

    def roll_back(self, stage: Stage, lake: str | None, before: dict[str, int | None]) -> None:
        for table, version in before.items():
            path = delta_io.table_path(lake, table)
            if version is not None and delta_io.committed_version(self.spark, path) == version:
                continue
            if version is None and not delta_io.folder_exists(self.spark, path):
                continue
            try:
                delta_io.restore(self.spark, path, version)
                self.line(f"{stage.name}: failed; {table} put back to " +
                          ("no table" if version is None else f"version {version}"))
            except Exception as e:  # the stage's own error matters more; say what is left
                self.line(f"{stage.name}: failed, and {table} could not be put back ({e}): rerun the stage")


def main(argv: list[str] | None = None) -> int:
    """``<job> [args]``: the job's arguments are parsed and checked before its session starts; a user's mistake
    ends with one line and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv:
            raise UserError(f"no job given; jobs: {', '.join(job_names())}")
        chosen = job(argv[0])
        args = chosen.parse(argv[1:])
        from jobs.lake.session import get_spark

        with lock.held(output_folder(chosen, args), chosen.name):
            runner = Runner(get_spark(f"churn-{chosen.name}"))
            if isinstance(chosen, Stage):
                record = runner.run(chosen, args)
                print(json.dumps({"stage": record.stage, "seconds": record.seconds, "read": record.read,
                                  "wrote": record.wrote, "counts": _flat(record.counts),
                                  "record": record.extra.get("record_path")}, default=str))
            else:
                chosen.run(runner, args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def output_folder(chosen, args: dict) -> str:
    """The folder a job writes, which one run at a time may hold (``jobs.lake.lock``): its lake, else its output."""
    if chosen.name == "pipeline":
        return chosen.layout(args)["lake"]
    return args.get("lake") or args.get("out") or args["data"]


def _flat(counts: dict) -> dict:
    """The record's top-level figures (per-file detail stays in the saved record)."""
    return {k: v for k, v in counts.items() if k not in ("files", "totals")}

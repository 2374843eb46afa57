"""Memory peaks per pipeline stage, read from a Spark event log.

Every pipeline run writes an event log (scripts/pipeline turns it on) with, for each Spark stage and executor,
the peaks of the executor's memory metrics while the stage ran (``SparkListenerStageExecutorMetrics``, from
``spark.eventLog.logStageExecutorMetrics``), and with each job's job group, which the pipeline sets to the name
of its stage (``jobs.pipeline.Progress``). Joined, they give each pipeline stage's peaks: what
scripts/bench-memory reports. In local mode the one executor is the driver (``"driver"``).
"""
from __future__ import annotations

import json
from pathlib import Path

# Peaks kept, in bytes: the JVM's heap and off-heap use, what Spark's memory manager gave to execution (sorts,
# aggregations, joins, shuffles) and to storage (cached frames), and the resident memory of the executor's JVM
# and of its Python workers (process-tree metrics, where spark.executor.processTreeMetrics.enabled is set).
METRICS = ("JVMHeapMemory", "JVMOffHeapMemory", "OnHeapExecutionMemory", "OnHeapStorageMemory",
           "ProcessTreeJVMRSSMemory", "ProcessTreePythonRSSMemory")
NO_GROUP = "(no job group)"


def log_file(eventlog_dir: str | Path) -> Path:
    """The one application's event log in ``eventlog_dir`` (as scripts/pipeline leaves it)."""
    files = sorted(p for p in Path(eventlog_dir).iterdir() if p.is_file() and not p.name.endswith(".inprogress"))
    if len(files) != 1:
        raise ValueError(f"expected one finished event log in {eventlog_dir}, found {[p.name for p in files]}")
    return files[0]


def stage_peaks(path: str | Path) -> dict[str, dict[str, int]]:
    """{job group: {metric: peak bytes over its Spark stages and executors}}; Spark stages whose jobs had no
    group count under NO_GROUP. A metric an executor did not report is left out."""
    group_of_stage: dict[int, str] = {}
    peaks: dict[str, dict[str, int]] = {}
    pending: list[tuple[int, dict]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            kind = e["Event"]
            if kind == "SparkListenerJobStart":
                group = (e.get("Properties") or {}).get("spark.jobGroup.id") or NO_GROUP
                for stage in e["Stage IDs"]:
                    group_of_stage.setdefault(stage, group)
            elif kind == "SparkListenerStageExecutorMetrics":
                pending.append((e["Stage ID"], e["Executor Metrics"]))
    for stage, metrics in pending:
        mine = peaks.setdefault(group_of_stage.get(stage, NO_GROUP), {})
        for m in METRICS:
            if m in metrics:
                mine[m] = max(mine.get(m, 0), int(metrics[m]))
    return peaks

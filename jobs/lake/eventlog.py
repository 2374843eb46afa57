"""Memory peaks per pipeline stage, read from a Spark event log.

Every pipeline run writes an event log (scripts/pipeline turns it on) with, for each Spark stage and executor,
the peaks of the executor's memory metrics while the stage ran (``SparkListenerStageExecutorMetrics``, from
``spark.eventLog.logStageExecutorMetrics``), and with each job's job group, which the pipeline sets to the name
of its stage (``jobs.run.runner.Runner``). Joined, they give each pipeline stage's peaks: what
scripts/bench-memory reports. In local mode the one executor is the driver (``"driver"``).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse

# Peaks kept, in bytes: the JVM's heap and off-heap use, what Spark's memory manager gave to execution (sorts,
# aggregations, joins, shuffles) and to storage (cached frames), and the resident memory of the executor's JVM
# and of its Python workers (process-tree metrics: only with ``PROCESS_MEMORY`` set, which scripts/pipeline leaves
# off for its cost, jobs/launch/submit.py; without it Spark logs them as 0).
PROCESS_METRICS = ("ProcessTreeJVMRSSMemory", "ProcessTreePythonRSSMemory")
METRICS = ("JVMHeapMemory", "JVMOffHeapMemory", "OnHeapExecutionMemory", "OnHeapStorageMemory", *PROCESS_METRICS)
PROCESS_MEMORY = "spark.executor.processTreeMetrics.enabled=true"
NO_GROUP = "(no job group)"


def log_file(eventlog_dir: str | Path) -> Path:
    """The one application's event log in ``eventlog_dir`` (as scripts/pipeline leaves it)."""
    files = sorted(p for p in Path(eventlog_dir).iterdir() if p.is_file() and not p.name.endswith(".inprogress"))
    if len(files) != 1:
        raise ValueError(f"expected one finished event log in {eventlog_dir}, found {[p.name for p in files]}")
    return files[0]


# Task totals kept per job group: task time, JVM garbage collection, and what sorts, aggregations and joins
# spilled for want of execution memory (in memory, deserialised, and on disk, serialised).
TASK_TOTALS = {"run_ms": "Executor Run Time", "gc_ms": "JVM GC Time",
               "spilled_memory_bytes": "Memory Bytes Spilled", "spilled_disk_bytes": "Disk Bytes Spilled"}


def _grouped(path: str | Path):
    """Each event of the log with the job group of its Spark stage (None where the event names no stage; a stage's
    completion names it in its "Stage Info"). One
    pass: a job's start, which names its stages and carries its group, comes before anything of those stages.
    A log still being written (the report reads its own application's) may end in an event only partly flushed:
    Spark ends every event with a line break, so a last line without one is left out."""
    group_of_stage: dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            e = json.loads(line)
            if e["Event"] == "SparkListenerJobStart":
                group = (e.get("Properties") or {}).get("spark.jobGroup.id") or NO_GROUP
                for stage in e["Stage IDs"]:
                    group_of_stage.setdefault(stage, group)
            stage = e["Stage ID"] if "Stage ID" in e else (e.get("Stage Info") or {}).get("Stage ID")
            yield e, (group_of_stage.get(stage, NO_GROUP) if stage is not None else None)


def task_totals(path: str | Path) -> dict[str, dict[str, int]]:
    """{job group: {"tasks": n, and each of TASK_TOTALS summed over its tasks}}. Spilling is what shows a stage
    short of memory: execution memory itself is elastic (Spark lends a sort or aggregation whatever the unified
    pool has free, and spills beyond it), so its peak tracks what was free more than what was needed."""
    totals: dict[str, dict[str, int]] = {}
    for e, group in _grouped(path):
        if e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics"):
            t = totals.setdefault(group, {"tasks": 0, **{k: 0 for k in TASK_TOTALS}})
            t["tasks"] += 1
            for key, field in TASK_TOTALS.items():
                t[key] += int(e["Task Metrics"].get(field, 0))
    return totals


# Work per pipeline stage (job group): what its Spark tasks did, summed over their task metrics.
WORK_FIELDS = ("jobs", "tasks", "task_s", "cpu_s", "gc_s", "input_rows", "input_bytes", "output_rows", "output_bytes",
               "shuffle_read_bytes", "shuffle_write_bytes", "spill_bytes")


def stage_work(path: str | Path) -> dict[str, dict[str, float]]:
    """{job group: WORK_FIELDS}: Spark jobs and tasks, task seconds, the seconds the tasks' threads ran on a CPU
    (task seconds beyond them went to waiting: for the GPU, shuffle blocks, files, or a free core), their garbage
    collection, rows and bytes read from files and tables (input) and written (output), shuffle bytes read (local and
    remote) and written, and bytes spilled to disk. Tasks of a job still running when the log was read count as far
    as they went."""
    work: dict[str, dict[str, float]] = {}
    for e, group in _grouped(path):
        if e["Event"] == "SparkListenerJobStart":
            group = (e.get("Properties") or {}).get("spark.jobGroup.id") or NO_GROUP
            work.setdefault(group, dict.fromkeys(WORK_FIELDS, 0))["jobs"] += 1
        elif e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics"):
            m, w = e["Task Metrics"], work.setdefault(group, dict.fromkeys(WORK_FIELDS, 0))
            read, wrote = m.get("Shuffle Read Metrics") or {}, m.get("Shuffle Write Metrics") or {}
            w["tasks"] += 1
            w["task_s"] += m.get("Executor Run Time", 0) / 1000
            w["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9   # nanoseconds
            w["gc_s"] += m.get("JVM GC Time", 0) / 1000
            w["input_rows"] += (m.get("Input Metrics") or {}).get("Records Read", 0)
            w["input_bytes"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
            w["output_rows"] += (m.get("Output Metrics") or {}).get("Records Written", 0)
            w["output_bytes"] += (m.get("Output Metrics") or {}).get("Bytes Written", 0)
            w["shuffle_read_bytes"] += read.get("Remote Bytes Read", 0) + read.get("Local Bytes Read", 0)
            w["shuffle_write_bytes"] += wrote.get("Shuffle Bytes Written", 0)
            w["spill_bytes"] += m.get("Disk Bytes Spilled", 0)
    return {g: {k: round(v, 3) if isinstance(v, float) else v for k, v in w.items()} for g, w in work.items()}


def running_log(spark) -> Path | None:
    """This application's event log as Spark is writing it (``<spark.eventLog.dir>/<app id>.inprogress``, or the
    finished file), None when the application keeps none. Spark flushes it at each job's and stage's end, so
    everything up to the last finished job is in it."""
    conf = spark.sparkContext.getConf()
    if conf.get("spark.eventLog.enabled", "false").lower() != "true" or not conf.get("spark.eventLog.dir"):
        return None
    url = urlparse(conf.get("spark.eventLog.dir"))
    if url.scheme not in ("", "file"):
        return None   # on a cluster file system: read it with Spark's history server
    app = spark.sparkContext.applicationId
    for name in (f"{app}.inprogress", app):
        candidate = Path(unquote(url.path)) / name
        if candidate.is_file():
            return candidate
    return None


def stage_peaks(path: str | Path) -> dict[str, dict[str, int]]:
    """{job group: {metric: peak bytes over its Spark stages and executors}}; Spark stages whose jobs had no
    group count under NO_GROUP. A metric an executor did not report is left out, and so is a group none of whose
    Spark stages was sampled (``unsampled``)."""
    peaks: dict[str, dict[str, int]] = {}
    for e, group in _grouped(path):
        if e["Event"] != "SparkListenerStageExecutorMetrics" or unsampled(e["Executor Metrics"]):
            continue
        metrics = e["Executor Metrics"]
        mine = peaks.setdefault(group, {})
        for m in METRICS:
            if m in metrics:
                mine[m] = max(mine.get(m, 0), int(metrics[m]))
    return peaks


def unsampled(metrics: dict) -> bool:
    """Whether an executor's record for a Spark stage holds no sample: the executor samples its metrics every
    ``spark.executor.metrics.pollingInterval`` (and at each heartbeat), and a task that ends between two samples
    reports zeros for all of them. A sampled JVM always has a heap; a short stage's record may be all zeros."""
    return not metrics.get("JVMHeapMemory")


# The RAPIDS Accelerator's time per GPU operator: each SQL plan in the log (and each re-plan of adaptive execution)
# lists its operators' metrics with their accumulator ids; a Spark stage's completion carries those accumulators'
# totals over its tasks. An operator's "op time" is the nanoseconds it spent on its batches (summed over the tasks,
# so several tasks sharing the GPU add up to more than the wall time). TRANSITIONS are the operators that move
# batches between the JVM's rows or host memory and the GPU's columns: their time is the price of what stays on the
# CPU (a Delta write, a CPU-only scan) beside the GPU.
GPU_OP_TIME = "op time"
TRANSITIONS = ("GpuColumnarToRow", "GpuRowToColumnar", "HostColumnarToGpu")


def _op_time_metrics(plan: dict, into: dict[int, str]) -> None:
    """Accumulator id -> operator name of every "op time" metric in the plan tree ``plan``."""
    stack = [plan]
    while stack:
        node = stack.pop()
        for m in node.get("metrics", []):
            if m.get("name") == GPU_OP_TIME and m.get("metricType") == "nsTiming":
                into[m["accumulatorId"]] = node.get("nodeName", "").strip()
        stack.extend(node.get("children", []))


def _op_seconds(stage_info: dict, operator: dict[int, str]) -> Counter:
    """{operator name: seconds of op time} of one completed stage's accumulables (nanoseconds; a value that is not a
    number is skipped)."""
    seconds: Counter = Counter()
    for acc in stage_info.get("Accumulables", []):
        name = operator.get(acc.get("ID"))
        if name is None:
            continue
        try:
            seconds[name] += int(acc.get("Value")) / 1e9
        except (TypeError, ValueError):
            continue
    return seconds


def _with_operators(path: str | Path):
    """Each event of the log but the SQL plans' own, as (event, its job group, the op-time accumulators known by
    then: {id: operator name}), the plans' metrics gathered as the log goes (adaptive execution re-plans
    mid-query; a stage completes after the plan that names its operators)."""
    operator: dict[int, str] = {}
    for e, group in _grouped(path):
        if e["Event"].endswith(("SparkListenerSQLExecutionStart", "SparkListenerSQLAdaptiveExecutionUpdate")):
            _op_time_metrics(e.get("sparkPlanInfo") or {}, operator)
        else:
            yield e, group, operator


def gpu_operator_time(path: str | Path, top: int = 5) -> dict[str, dict]:
    """{job group: {"gpu_op_s": GPU operators' op time, "gpu_transition_s": the part of TRANSITIONS,
    "gpu_operators": the ``top`` operators by op time, {name: s}}}, for the groups that ran GPU operators (none
    under the cpu profile, or the plugin in explain-only mode)."""
    seconds: dict[str, Counter] = {}
    for e, group, operator in _with_operators(path):
        if e["Event"] == "SparkListenerStageCompleted":
            seconds.setdefault(group, Counter()).update(_op_seconds(e.get("Stage Info") or {}, operator))
    out = {}
    for group, per_op in seconds.items():
        if not any(per_op.values()):
            continue
        out[group] = {"gpu_op_s": round(sum(per_op.values()), 3),
                      "gpu_transition_s": round(sum(s for op, s in per_op.items() if op in TRANSITIONS), 3),
                      "gpu_operators": {op: round(s, 3) for op, s in per_op.most_common(top)}}
    return out


def longest_stages(path: str | Path, top: int | None = 10, ops: int = 3) -> list[dict]:
    """The ``top`` (None: all) completed Spark stages by wall time (submission to completion), longest first: where
    a pipeline stage's time goes inside it. Each: "group" (the pipeline stage), "stage_id", "name" (Spark's, the
    call site), "seconds", "tasks", "task_s" (its tasks' run time), "cpu_s" (the part of it their threads ran on a
    CPU), "shuffle_write_bytes" and "gpu_operators" (its
    ``ops`` largest GPU operators by op time, {name: s}; empty without GPU operators). One pass: a stage's tasks end
    before it completes."""
    task_s: Counter = Counter()
    cpu_s: Counter = Counter()
    shuffled: Counter = Counter()
    stages = []
    for e, group, operator in _with_operators(path):
        if e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics"):
            m = e["Task Metrics"]
            task_s[e["Stage ID"]] += m.get("Executor Run Time", 0) / 1000
            cpu_s[e["Stage ID"]] += m.get("Executor CPU Time", 0) / 1e9   # nanoseconds
            shuffled[e["Stage ID"]] += (m.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
        elif e["Event"] == "SparkListenerStageCompleted":
            info = e.get("Stage Info") or {}
            if "Submission Time" not in info or "Completion Time" not in info:
                continue   # skipped (its shuffle output reused) or never run
            sid = info["Stage ID"]
            stages.append({"group": group, "stage_id": sid, "name": info.get("Stage Name", ""),
                           "seconds": round((info["Completion Time"] - info["Submission Time"]) / 1000, 3),
                           "tasks": info.get("Number of Tasks", 0), "task_s": round(task_s[sid], 3),
                           "cpu_s": round(cpu_s[sid], 3), "shuffle_write_bytes": shuffled[sid],
                           "gpu_operators": {op: round(s, 3) for op, s in
                                             _op_seconds(info, operator).most_common(ops) if s > 0}})
    return sorted(stages, key=lambda st: -st["seconds"])[:top]


def idle_time(path: str | Path) -> dict[str, float]:
    """{job group: seconds from its first job's submission to its last job's completion during which none of its
    tasks ran}: the driver's own share of the stage's Spark work (planning a query, a Delta commit, collecting a
    result, starting the next job), where the cores wait. The stage's time before its first job and after its
    last (reading table snapshots, its own Python) is not in it."""
    group_of_job: dict[int, str] = {}
    span: dict[str, list[int]] = {}
    running: dict[str, list[tuple[int, int]]] = {}
    for e, group in _grouped(path):
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            g = (e.get("Properties") or {}).get("spark.jobGroup.id") or NO_GROUP
            group_of_job[e["Job ID"]] = g
            t = e.get("Submission Time")
            if t is not None:
                s = span.setdefault(g, [t, t])
                s[0], s[1] = min(s[0], t), max(s[1], t)
        elif kind == "SparkListenerJobEnd" and e.get("Job ID") in group_of_job:
            t = e.get("Completion Time")
            if t is not None and group_of_job[e["Job ID"]] in span:
                s = span[group_of_job[e["Job ID"]]]
                s[1] = max(s[1], t)
        elif kind == "SparkListenerTaskEnd":
            info = e.get("Task Info") or {}
            if info.get("Launch Time") is not None and info.get("Finish Time") is not None:
                running.setdefault(group, []).append((info["Launch Time"], info["Finish Time"]))
    out = {}
    for g, (start, end) in span.items():
        busy, reached = 0, start
        for a, b in sorted(running.get(g, [])):
            a, b = max(a, reached), min(b, end)
            if b > a:
                busy += b - a
                reached = b
        out[g] = round((end - start - busy) / 1000, 3)
    return out

"""What the RAPIDS Accelerator would not run on the GPU, read from its own planner.

``potential_gpu_plan(df)`` calls the plugin's ExplainPlan API on a DataFrame's plan (the RAPIDS jar must be
on the class path; the gpu-explain profile loads it in explain-only mode, which works without a GPU).
``fallbacks(report)`` turns the report's ``!`` lines into records: operator kind, name, reason.
"""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from pyspark.sql import DataFrame

_LINE = re.compile(r"^\s*!(?P<kind>\w*)\s*<(?P<name>[^>]+)>\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class Fallback:
    kind: str     # Exec, Expression, Partitioning, ...
    name: str     # e.g. ProjectExec, RegExpExtract
    reason: str   # the plugin's words after "because"

    def as_dict(self) -> dict:
        return asdict(self)


def potential_gpu_plan(df: DataFrame, level: str = "ALL") -> str:
    jvm = df.sparkSession._jvm
    return str(jvm.com.nvidia.spark.rapids.ExplainPlan.explainPotentialGpuPlan(df._jdf, level))


# The plugin's own operators and expressions (GpuProjectExec, GpuFileSourceScanExec, TargetSize, ...): classes of
# these packages.
_RAPIDS_CLASS = re.compile(r"operator class (com\.nvidia\.spark\.rapids|org\.apache\.spark\.sql\.rapids)\.")


def fallbacks(report: str) -> list[Fallback]:
    """The report's ``!`` lines as records, less those naming one of the plugin's own GPU operators: under a
    profile that runs on the GPU, a query without an exchange (a scan of files and a filter) is already converted
    to GPU operators when its plan is explained, and the planner then says it cannot convert them again; they run on
    the GPU."""
    found = []
    for line in report.splitlines():
        m = _LINE.match(line)
        if m:
            rest = m.group("rest")
            reason = rest.split("because", 1)[1].strip() if "because" in rest else rest.strip()
            if m.group("name").startswith("Gpu") or _RAPIDS_CLASS.search(reason):
                continue
            found.append(Fallback(m.group("kind") or "Operator", m.group("name"), reason))
    return found


def operators(report: str) -> list[str]:
    """Every operator the planner judged (on the GPU or not), e.g. ['ProjectExec', 'Alias', ...]."""
    return re.findall(r"^\s*[*!@#]\w*\s*<([^>]+)>", report, flags=re.M)


class PlanCollector:
    """Collects, per pipeline stage, what each Delta write's query would not run on the GPU.

    ``delta_io`` wraps every write of a DataFrame in ``observing``; while a collector is active and the RAPIDS
    jar is on the class path (gpu and gpu-explain profiles), the plugin's planner judges it. Under the cpu
    profile the jar is absent and this costs nothing. Planning only: no query is executed for it.
    """

    _active: "PlanCollector | None" = None

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.current = "unstaged"
        self.by_stage: dict[str, list[dict]] = {}
        self._lock = threading.Lock()  # stages write tables from several threads (session.together)

    @classmethod
    def for_session(cls, spark) -> "PlanCollector":
        collector = cls(enabled=rapids_available(spark))
        cls._active = collector
        return collector

    @contextmanager
    def stage(self, name: str):
        self.current = name
        self.by_stage.setdefault(name, [])
        try:
            yield self
        finally:
            self.current = "unstaged"

    def add(self, stage: str, found: list[Fallback], target: str) -> None:
        with self._lock:
            entries = self.by_stage.setdefault(stage, [])
            for fb in found:
                entry = {**fb.as_dict(), "target": target}
                if entry not in entries:
                    entries.append(entry)

    def save(self, path: str) -> None:
        import json
        import os

        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"collected": self.enabled, "stages": self.by_stage}, f, indent=2, sort_keys=True)


def rapids_available(spark) -> bool:
    """Whether the RAPIDS jar is on the session's class path (py4j resolves through Spark's class loader,
    which holds --jars; a plain Class.forName would only see the system class path)."""
    from py4j.java_gateway import JavaClass

    return isinstance(spark._jvm.com.nvidia.spark.rapids.ExplainPlan, JavaClass)


@contextmanager
def observing(df: DataFrame, target: str):
    """Called by jobs.lake.delta_io around each write: the plugin's planner judges ``df`` on a thread of its own
    while the write in the block plans and runs, instead of before it (a second planning of the whole query on the
    driver, 0.02-0.46 s a write under gpu-explain at 200k customers on 2 cores, off the write's critical path where
    the driver has a core to spare), and the block ends once both are done. The planner reads the session's
    settings as the write does, so the two see the same ones as long as the block holds them (a stage's
    ``session_conf`` around its writes)."""
    collector = PlanCollector._active
    if collector is None or not collector.enabled:
        yield
        return
    stage, outcome = collector.current, {}

    def judge() -> None:
        try:
            outcome["found"] = fallbacks(potential_gpu_plan(df))
        except BaseException as e:  # handed to the writing thread below
            outcome["error"] = e

    judging = threading.Thread(target=judge, name=f"plans-{target}", daemon=True)
    judging.start()
    try:
        yield
    finally:
        judging.join()
    if "error" in outcome:
        raise outcome["error"]
    collector.add(stage, outcome["found"], target)

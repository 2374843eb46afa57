"""What the RAPIDS Accelerator would not run on the GPU, read from its own planner.

``potential_gpu_plan(df)`` calls the plugin's ExplainPlan API on a DataFrame's plan (the RAPIDS jar must be
on the class path; the gpu-explain profile loads it in explain-only mode, which works without a GPU).
``fallbacks(report)`` turns the report's ``!`` lines into records: operator kind, name, reason.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from pyspark.sql import DataFrame

_LINE = re.compile(r"^\s*!(?P<kind>\w+)\s+<(?P<name>[^>]+)>\s*(?P<rest>.*)$")


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


def fallbacks(report: str) -> list[Fallback]:
    found = []
    for line in report.splitlines():
        m = _LINE.match(line)
        if m:
            rest = m.group("rest")
            reason = rest.split("because", 1)[1].strip() if "because" in rest else rest.strip()
            found.append(Fallback(m.group("kind"), m.group("name"), reason))
    return found


def operators(report: str) -> list[str]:
    """Every operator the planner judged (on the GPU or not), e.g. ['ProjectExec', 'Alias', ...]."""
    return re.findall(r"^\s*[*!@#]\w+\s+<([^>]+)>", report, flags=re.M)

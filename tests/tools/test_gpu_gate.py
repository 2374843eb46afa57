"""The GPU fallback gate (tools/gpu_gate.py) under the gpu-explain profile."""
from __future__ import annotations

import json

import pytest

from tests.support.sessions import run_python

GATE_PROBE = r"""
import json, sys
from tests.support.sessions import build_session
from pyspark.sql import functions as F
from jobs.lake import plans
from jobs.stages import clean
from tools import gpu_gate
spark = build_session("gpu-explain", sys.argv[1], app="gate-probe")
collector = plans.PlanCollector.for_session(spark)
# Built from range, not local rows: createDataFrame's RDD scan would itself be a (harmless) fallback.
df = spark.range(2).select(F.when(F.col("id") == 0, " month-TO-month ").otherwise("Two year").alias("contract_type"))
# Deliberately GPU-unfriendly: a JVM reflection call has no GPU version. (A Python UDF is not a fallback
# here: the plugin runs its exec and moves the data as Arrow, only the UDF body stays in Python.)
shout = lambda c: F.expr(f"reflect('java.lang.String', 'valueOf', {c})")
with collector.stage("clean"):
    with plans.observing(df.withColumn("c", F.upper(F.trim("contract_type"))), "built-ins"):
        pass  # where a write would run while the planner judges its frame
    built_ins = list(collector.by_stage["clean"])
    with plans.observing(df.withColumn("c", shout("contract_type")), "with-udf"):
        pass
bad = gpu_gate.unexpected(collector.by_stage, gpu_gate.load_allowlist())
print("RESULT " + json.dumps({"built_ins": built_ins, "unexpected": bad}))
"""


@pytest.mark.slow
def test_the_gate_catches_a_transform_that_gains_a_fallback(tmp_path):
    stdout = run_python(GATE_PROBE, str(tmp_path))
    got = json.loads(next(l for l in stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert got["built_ins"] == []  # trim/upper run on the GPU: nothing to report
    names = {f["name"] for f in got["unexpected"]}
    assert got["unexpected"] and all(f["target"] == "with-udf" and f["stage"] == "clean" for f in got["unexpected"])
    assert "CallMethodViaReflection" in names, got["unexpected"]

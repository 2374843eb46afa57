"""SparkSessions for tests, built from the same conf/ profiles scripts/submit uses, shrunk for small data."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.launch import jars, profiles

TEST_OVERRIDES = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "8m",
    "spark.driver.memory": "3g",
}


# The gpu profiles' check against arithmetic the GPU planner cannot plan (conf/rapids.conf), in every test session:
# the cpu profile's tests then fail on such a query too, which would otherwise only stall on a GPU.
NESTED_ARITHMETIC_CHECK = "churn.spark.NestedArithmeticCheck"


def build_session(profile: str, warehouse: str, master: str = "local[2]", app: str = "tests") -> SparkSession:
    props = profiles.load_profile(profile)
    props.update(TEST_OVERRIDES)
    extensions = props["spark.sql.extensions"].split(",")
    if NESTED_ARITHMETIC_CHECK not in extensions:
        props["spark.sql.extensions"] = ",".join([*extensions, NESTED_ARITHMETIC_CHECK])
    props["spark.jars"] = ",".join(str(p) for p in jars.jars_for(rapids=profiles.uses_rapids(props)))
    props["spark.sql.warehouse.dir"] = warehouse
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in props.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


ROOT = Path(__file__).resolve().parents[2]  # the repository root (tests/support/sessions.py)


def run_python(code: str, *args: str, timeout: int = 300) -> str:
    """Runs ``code`` in a Python process of its own, from the repository root, with ``args`` as ``sys.argv[1:]``,
    and returns its stdout; a nonzero exit fails the calling test with the end of its stderr. For a Spark session of
    another profile (or master) than the test session's: each needs a JVM of its own."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout

"""SparkSessions for tests, built from the same conf/ profiles scripts/submit uses, shrunk for small data."""
from __future__ import annotations

import sys
import os

from pyspark.sql import SparkSession

from jobs import jars, profiles

TEST_OVERRIDES = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "8m",
    "spark.driver.memory": "3g",
}


def build_session(profile: str, warehouse: str, master: str = "local[2]", app: str = "tests") -> SparkSession:
    props = profiles.load_profile(profile)
    props.update(TEST_OVERRIDES)
    props["spark.jars"] = ",".join(str(p) for p in jars.jars_for(rapids=profiles.uses_rapids(props)))
    props["spark.sql.warehouse.dir"] = warehouse
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in props.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

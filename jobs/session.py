"""The one way a job gets its SparkSession: whatever spark-submit configured (conf/ profiles), nothing added;
and the one way a job changes a Spark SQL setting for a while (``session_conf``)."""
from __future__ import annotations

import contextlib

from pyspark.sql import SparkSession


def get_spark(app_name: str) -> SparkSession:
    return SparkSession.builder.appName(app_name).getOrCreate()


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]):
    """Spark SQL settings for the queries run inside the block, restored (or unset) after it."""
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)

"""The one way a job gets its SparkSession: whatever spark-submit configured (conf/ profiles), nothing added;
the one way a job changes a Spark SQL setting for a while (``session_conf``); and the one way it reads a
profile's true/false switch (``conf_flag``)."""
from __future__ import annotations

import contextlib

from pyspark.sql import SparkSession

from jobs.errors import UserError


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


def conf_flag(spark: SparkSession, key: str, default: bool) -> bool:
    """A profile's true/false setting (case and surrounding spaces ignored), ``default`` when it is unset; any
    other value stops with one message naming the key, rather than being read as either."""
    value = spark.conf.get(key, None)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in ("true", "false"):
        raise UserError(f"{key}={value!r} is neither true nor false: set it to one of them in the profile (conf/*.conf)")
    return word == "true"

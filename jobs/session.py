"""The one way a job gets its SparkSession: whatever spark-submit configured (conf/ profiles), nothing added."""
from __future__ import annotations

from pyspark.sql import SparkSession


def get_spark(app_name: str) -> SparkSession:
    return SparkSession.builder.appName(app_name).getOrCreate()

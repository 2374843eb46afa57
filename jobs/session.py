"""The one way a job gets its SparkSession: whatever spark-submit configured (conf/ profiles), nothing added;
the one way a job changes a Spark SQL setting for a while (``session_conf``); the one way it reads a
profile's true/false switch (``conf_flag``); and the one way it runs independent Spark jobs side by side
(``together``)."""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from pyspark.sql import SparkSession

from jobs.errors import UserError

T = TypeVar("T")


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


def together(work: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Runs independent pieces of work (each one or more Spark jobs, e.g. writes of different tables) from
    threads of their own and returns their results by name, once every one has finished.

    Spark's scheduler shares the cores between the jobs, so a job with fewer tasks than cores (a dataset of a
    few unsplittable CSV files, a small table) no longer leaves the rest idle while it runs. Each thread is a
    PySpark inheritable thread (it carries the caller's job group and local properties). Nothing is left
    running behind a failure: all pieces finish (or fail) before the first failure, in ``work``'s order, is
    raised; a piece that succeeded stays done, as it would have run one after the other."""
    from pyspark import inheritable_thread_target

    with ThreadPoolExecutor(max_workers=max(1, len(work)), thread_name_prefix="together") as pool:
        futures = {name: pool.submit(inheritable_thread_target(fn)) for name, fn in work.items()}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        raise errors[0]
    return {name: f.result() for name, f in futures.items()}

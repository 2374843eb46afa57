"""The train / validation / test split: a pure function of customer_id, so a customer lands in the same part on
every run, engine and partitioning (``pmod(xxhash64(customer_id), 100)``: < 70 train, < 85 validation, else test)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.lake import contract

TRAIN_BELOW, VALIDATION_BELOW = 70, 85  # hash buckets 0..99


def with_split(df: DataFrame) -> DataFrame:
    """Adds ``split`` (train / validation / test)."""
    bucket = F.pmod(F.xxhash64(F.col(contract.ID)), F.lit(100))
    return df.withColumn("split", F.when(bucket < TRAIN_BELOW, "train")
                                   .when(bucket < VALIDATION_BELOW, "validation")
                                   .otherwise("test"))

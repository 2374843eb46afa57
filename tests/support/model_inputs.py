"""A synthetic gold table with a known signal, for the train, score and check-model stages and the estimators."""
from __future__ import annotations

from pyspark.sql import functions as F

from jobs.lake import contract

N_CUSTOMERS = 3000
# Churn log-odds = -1.5 + 1.2 * f0 - 0.8 * f1 + 0.5 * f2 on the first three (standard normal) features; the
# rest are noise. The best possible AUC on such data is about 0.8.
SIGNAL = {0: 1.2, 1: -0.8, 2: 0.5}


def synthetic_gold(spark, n: int = N_CUSTOMERS, seed: int = 7):
    df = spark.range(n, numPartitions=2).select(
        F.format_string("C%010d", F.col("id")).alias(contract.ID),
        *[F.randn(seed + i).alias(name) for i, name in enumerate(contract.FEATURES)],
    )
    logit = sum((F.col(contract.FEATURES[i]) * w for i, w in SIGNAL.items()), F.lit(-1.5))
    churned = F.rand(seed + 1000) < F.lit(1.0) / (F.lit(1.0) + F.exp(-logit))
    return df.withColumn(contract.LABEL, churned.cast("double")).select(contract.ID, contract.LABEL, *contract.FEATURES)

"""A tiny job that proves a deployment works end to end: writes and reads a Delta table on the executors.

    scripts/submit --master spark://127.0.0.1:7077 tools/smoke.py --out /tmp/smoke
"""
from __future__ import annotations

import argparse
import json

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.lake import delta_io
from jobs.lake.session import get_spark


def with_bucket_totals(df: DataFrame) -> DataFrame:
    return df.groupBy((F.col("id") % 10).alias("bucket")).agg(F.sum("id").alias("total")).orderBy("bucket")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="smoke")
    p.add_argument("--out", required=True, help="folder for the Delta table written")
    p.add_argument("--rows", type=int, default=100_000)
    args = p.parse_args(argv)
    spark = get_spark("smoke")
    path = f"{args.out}/smoke_totals"
    v = delta_io.overwrite(spark.range(args.rows, numPartitions=4).transform(with_bucket_totals), path)
    df, _ = delta_io.read(spark, path, v)
    total = df.agg(F.sum("total")).first()[0]
    print(json.dumps({"master": spark.sparkContext.master, "version": v, "rows": df.count(), "total": total}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

"""Every Delta table under a lake folder checkpointed at its current version, as Delta checkpoints a table at every
tenth commit on its own: the state a lake is in once the pipeline has run on it ten times (``scripts/bench-etl
--reruns``). Prints each table with its checkpoint files.

    scripts/submit tools/checkpoint_lake.py LAKE
"""
from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main(argv: list[str]) -> int:
    lake = Path(argv[0])
    tables = sorted(log.parent for log in lake.glob("**/_delta_log"))
    if not tables:
        print(f"checkpoint_lake: no Delta table under {lake}", file=sys.stderr)
        return 2
    spark = SparkSession.builder.getOrCreate()
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog
    for table in tables:
        delta_log.forTable(spark._jsparkSession, str(table)).checkpoint()
        found = sorted(p.name for p in (table / "_delta_log").glob("*.checkpoint*.parquet"))
        print(f"checkpoint_lake: {table} {', '.join(found)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

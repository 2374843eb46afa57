"""Score stage: gold features + a saved model -> predictions Delta table (one slice per run_id).

    scripts/submit --profile cpu score --lake data/lake --model data/models/<run_id>/model [--run-id <run_id>]

The model is a plain pyspark.ml PipelineModel, so scoring needs no GPU library whatever trained it. The
probability is computed from its coefficients with built-in expressions (the RAPIDS plugin runs them on the
GPU; MLlib's ``transform`` is a JVM UDF over vectors that it cannot run); it equals MLlib's ``probability[1]``.
Deciles (10 = highest risk) come from approximate quantiles of the scores. Re-running replaces the run's rows.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import contract, delta_io, evaluate, ml
from jobs.errors import UserError


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="score", description=__doc__.split("\n\n")[0])
    p.add_argument("--lake", required=True, help="lake root holding the gold table; predictions go there too")
    p.add_argument("--model", required=True, help="a saved model: <models-dir>/<run_id>/model")
    p.add_argument("--run-id", help="default: the name of the folder above the model (<run_id>)")
    args = p.parse_args(argv)
    from jobs.session import get_spark

    run_id = args.run_id or os.path.basename(os.path.dirname(os.path.normpath(args.model)))
    record = run(get_spark("score"), args.lake, args.model, run_id)
    print(json.dumps({"run_id": run_id, "predictions": record.wrote, "rows": record.counts["predictions"]}))
    return 0


def run(spark: SparkSession, lake: str, model_path: str, run_id: str) -> delta_io.StageRecord:
    started = time.time()
    if not run_id or "'" in run_id:
        raise UserError(f"run id {run_id!r} is empty or holds a quote: pass --run-id with a plain name")
    model = ml.load_model(spark, model_path)
    gold, gold_version = extract(spark, lake, model.feature_cols)
    probabilities = gold.select(contract.ID, model.probability().alias("churn_probability")).cache()
    boundaries = evaluate.decile_boundaries(probabilities, "churn_probability")
    predictions = probabilities.transform(lambda df: with_decile_and_run(df, boundaries, run_id))
    path = delta_io.table_path(lake, "predictions")
    version = delta_io.replace_where(predictions, path, f"run_id = '{run_id}'", partition_by=("run_id",))
    rows = probabilities.count()
    probabilities.unpersist()
    record = delta_io.StageRecord(
        stage="score",
        read={"gold_features": gold_version},
        wrote={"predictions": version},
        counts={"predictions": rows},
        seconds=round(time.time() - started, 3),
        extra={"run_id": run_id, "model_path": model_path, "decile_boundaries": boundaries},
    )
    record.save(lake)
    return record


def extract(spark: SparkSession, lake: str, feature_cols: tuple[str, ...]) -> tuple[DataFrame, int]:
    path = delta_io.table_path(lake, "gold_features")
    try:
        gold, version = delta_io.read(spark, path)
    except FileNotFoundError as e:
        raise UserError(str(e)) from None
    missing = [c for c in (contract.ID, *feature_cols) if c not in gold.columns]
    if missing:
        raise UserError(f"gold table {path} lacks the model's features {', '.join(missing)}: "
                        f"score with a model trained on this gold, or rebuild gold with the features stage")
    return gold, version


def with_decile_and_run(df: DataFrame, boundaries: list[float], run_id: str) -> DataFrame:
    return df.select(F.col(contract.ID), F.col("churn_probability").cast("double"),
                     evaluate.decile(F.col("churn_probability"), boundaries).alias("decile"),
                     F.lit(run_id).alias("run_id"))

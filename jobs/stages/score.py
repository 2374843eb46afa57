"""Score stage: gold features + a saved model -> predictions Delta table (one slice of files per run_id).

    scripts/submit score --lake data/lake --model data/models/<run_id>/model [--run-id <run_id>]

The model is a plain pyspark.ml PipelineModel, so scoring needs no GPU library whatever trained it. The
probability is computed from its coefficients with built-in expressions (the RAPIDS plugin runs them on the
GPU; MLlib's ``transform`` is a JVM UDF over vectors that it cannot run); it equals MLlib's ``probability[1]``.
Deciles (10 = highest risk) come from approximate quantiles of the scores. Re-running replaces the run's rows.
"""
from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.params import LAKE
from jobs.core.stage import Param, Stage, StageRecord
from jobs.lake import contract, delta_io
from jobs.lake.session import rescanned
from jobs.ml import estimators, evaluate


def run(spark: SparkSession, lake: str, model: str, run_id: str | None) -> StageRecord:
    run_id = run_id or os.path.basename(os.path.dirname(os.path.normpath(model)))
    if not run_id or "'" in run_id:
        raise UserError(f"run id {run_id!r} is empty or holds a quote: pass --run-id with a plain name")
    fitted = estimators.load_model(spark, model)
    gold, gold_version = extract(spark, lake, fitted.feature_cols)
    path = delta_io.table_path(lake, "predictions")
    with rescanned(gold.select(contract.ID, fitted.probability().alias("churn_probability"))) as probabilities:
        boundaries = evaluate.decile_boundaries(probabilities, "churn_probability")
        predictions = probabilities.transform(lambda df: with_decile_and_run(df, boundaries, run_id))
        # Unpartitioned: each run's rows are files of their own, whose statistics on run_id (min = max) let a reader
        # of one run skip the others' files and let the write be Parquet files and a commit of that slice, as every
        # table's (the GPU writes them under gpu). A table written partitioned by run_id before keeps its layout,
        # through Delta.
        commit = delta_io.replace_where_counted(predictions, path, f"run_id = '{run_id}'")
    rows = checked_rows(gold, commit, path, run_id)
    return StageRecord(stage=STAGE.name, read={"gold_features": gold_version}, wrote={"predictions": commit.version},
                       counts={"predictions": rows},
                       extra={"run_id": run_id, "model_path": model, "decile_boundaries": boundaries})


STAGE = Stage("score", "gold features + a saved model -> the predictions table (one slice per run id)", run,
              params=(LAKE, Param("model", "a saved model: <models-dir>/<run_id>/model"),
                      Param("run_id", "default: the name of the folder above the model (<run_id>)", default=None)),
              reads=("gold_features",), writes=("predictions",),
              describe=lambda r: f"predictions {r.counts['predictions']:,}")


def extract(spark: SparkSession, lake: str, feature_cols: tuple[str, ...]) -> tuple[DataFrame, int]:
    path = delta_io.table_path(lake, "gold_features")
    gold, version = delta_io.read(spark, path)
    missing = [c for c in (contract.ID, *feature_cols) if c not in gold.columns]
    if missing:
        raise UserError(f"gold table {path} lacks the model's features {', '.join(missing)}: "
                        f"score with a model trained on this gold, or rebuild gold with the features stage")
    return gold, version


def checked_rows(gold: DataFrame, commit: delta_io.Commit, path: str, run_id: str) -> int:
    """The predictions the write committed, which must be one per gold row. Neither side is a pass over the rows:
    the commit's row count, and gold's rows counted without reading a column (from its files' footers, or Delta's
    statistics of them). A second pass over the scores (then cached) cost half of the stage at 41M customers under gpu
    (docs/gpu-figures.md). A commit without metrics: the run's slice counted as read back."""
    expected = gold.count()
    written = commit.rows
    if written is None:
        written = delta_io.read(gold.sparkSession, path, commit.version)[0].where(F.col("run_id") == run_id).count()
    if written != expected:
        raise RuntimeError(f"the predictions' commit {commit.version} holds {written:,} rows for {expected:,} gold "
                           f"rows: a bug in score or in the table writer")
    return written


def with_decile_and_run(df: DataFrame, boundaries: list[float], run_id: str) -> DataFrame:
    return df.select(F.col(contract.ID), F.col("churn_probability").cast("double"),
                     evaluate.decile(F.col("churn_probability"), boundaries).alias("decile"),
                     F.lit(run_id).alias("run_id"))

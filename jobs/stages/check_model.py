"""check-model: load a saved model in this process and score gold with MLlib's own ``transform``; compare with
the predictions the score stage wrote for that run.

    scripts/submit check-model --lake LAKE [--model PATH] [--run-id ID] [--out result.json]

It shows that a model is portable: whichever profile trained it (a spark-rapids-ml model is saved after
``model.cpu()``), a CPU-only Spark with no GPU library loads it as a plain pyspark.ml ``PipelineModel`` and
gives the same churn probabilities, to 1e-9, for every customer. By default the model and run id are the ones
the train stage recorded in ``<lake>/_stages/train.json``. Nothing is written to the lake; exit status 2 with
one line when the probabilities or the row counts differ.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.params import LAKE
from jobs.core.stage import Param, Stage, StageRecord, load_stage_record
from jobs.lake import contract, delta_io
from jobs.ml import estimators

TOLERANCE = 1e-9


def checked(spark: SparkSession, lake: str, model: str | None, run_id: str | None, out: str | None) -> StageRecord:
    """``run``, its result printed (and written to ``out``); a model that does not reproduce the run is an error."""
    result = run(spark, lake, model, run_id)
    text = json.dumps(result, indent=2, sort_keys=True)
    if out:
        Path(out).write_text(text + "\n")
    print(text)
    if not result["same"]:
        raise UserError(f"the model at {result['model']} does not reproduce run {result['run_id']}'s predictions "
                        f"here ({result['rows_matched']:,} of {result['rows_gold']:,} customers matched, "
                        f"largest difference {result['max_abs_diff']}): re-run score with this model")
    return StageRecord("check-model", counts={"customers": result["rows_matched"]}, extra=result)


STAGE = Stage("check-model", "a saved model, loaded by plain MLlib here, reproduces its run's predictions", checked,
              params=(LAKE, Param("model", "saved model (default: the train stage's, from <lake>/_stages/train.json)",
                                  default=None),
                      Param("run_id", "predictions slice to compare with (default: the train stage's run id)",
                            default=None),
                      Param("out", "also write the result as JSON here", default=None)),
              reads=("gold_features", "predictions"),
              describe=lambda r: f"{r.counts['customers']:,} customers' probabilities reproduced")


def run(spark: SparkSession, lake: str, model_path: str | None, run_id: str | None) -> dict:
    if model_path is None or run_id is None:
        try:
            trained = load_stage_record(lake, "train")["extra"]
        except UserError as e:
            raise UserError(f"{e}, or pass --model and --run-id") from None
        model_path, run_id = model_path or trained["model_path"], run_id or trained["run_id"]
    run_json = Path(model_path).parent / "run.json"
    trained_by = json.loads(run_json.read_text())["implementation"] if run_json.is_file() else None

    from pyspark.ml import PipelineModel
    from pyspark.ml.functions import vector_to_array

    if not estimators.model_exists(spark, model_path):
        raise UserError(f"no saved model at {model_path}: pass --model <models-dir>/<run_id>/model")
    model = PipelineModel.load(model_path)  # plain pyspark.ml: the MLlib classes, no spark_rapids_ml import
    try:
        gold, gold_version = delta_io.read(spark, delta_io.table_path(lake, "gold_features"))
        predictions, predictions_version = delta_io.read(spark, delta_io.table_path(lake, "predictions"))
    except delta_io.TableMissing as e:
        raise UserError(f"{e}: run the features and score stages first") from None
    mine = model.transform(gold).select(contract.ID, vector_to_array("probability")[1].alias("p"))
    theirs = predictions.where(F.col("run_id") == run_id).select(contract.ID, "churn_probability")
    joined = mine.join(theirs, contract.ID, "full_outer")
    row = joined.agg(  # one row of aggregates
        F.count(F.col("p")).alias("gold"), F.count(F.col("churn_probability")).alias("predicted"),
        F.count(F.col("p") - F.col("churn_probability")).alias("matched"),
        F.max(F.abs(F.col("p") - F.col("churn_probability"))).alias("diff")).first()
    diff = None if row["diff"] is None else float(row["diff"])
    same = (row["gold"] == row["predicted"] == row["matched"] > 0) and diff is not None and diff <= TOLERANCE
    return {
        "run_id": run_id, "model": model_path, "trained_by": trained_by, "same": same, "tolerance": TOLERANCE,
        "rows_gold": row["gold"], "rows_predicted": row["predicted"], "rows_matched": row["matched"],
        "max_abs_diff": diff, "gold_version": gold_version, "predictions_version": predictions_version,
        "checked_in": {"implementation": estimators.implementation(spark), "spark.plugins": spark.conf.get("spark.plugins", None),
                       "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                       "spark_rapids_ml_imported": "spark_rapids_ml" in sys.modules},
    }

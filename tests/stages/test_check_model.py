"""The check-model stage on the session's ``trained`` run (tests/conftest.py): the saved model reproduces the
run's predictions in a fresh CPU-only process, and other predictions are caught."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from pyspark.sql import functions as F

from jobs.lake import delta_io
from jobs.stages import check_model
from tests.support.model_inputs import N_CUSTOMERS
from tests.support.sessions import ROOT


def test_saved_model_scores_the_same_in_a_fresh_cpu_process(trained, tmp_path):
    """The saved model is plain pyspark.ml: the check-model stage, in a new CPU-only spark-submit, loads it and
    MLlib's own transform gives the probabilities the score stage wrote, for every customer."""
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "jobs.launch", "submit", "--profile", "cpu", "--master", "local[1]",
                           "check-model", "--lake", trained["lake"], "--out", str(out)],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["run_id"], result["trained_by"], result["same"]) == ("r1", "pyspark.ml", True)
    assert result["rows_gold"] == result["rows_predicted"] == result["rows_matched"] == N_CUSTOMERS
    assert result["max_abs_diff"] < 1e-9
    assert result["checked_in"]["implementation"] == "pyspark.ml"
    assert result["checked_in"]["spark_rapids_ml_imported"] is False


def test_check_model_fails_when_the_predictions_are_not_the_models(spark, trained, tmp_path):
    lake = str(tmp_path / "lake")
    delta_io.overwrite(spark.read.format("delta").load(delta_io.table_path(trained["lake"], "gold_features")),
                       delta_io.table_path(lake, "gold_features"))
    other = spark.read.format("delta").load(delta_io.table_path(trained["lake"], "predictions")) \
        .withColumn("churn_probability", F.col("churn_probability") * 0.999)
    delta_io.overwrite(other, delta_io.table_path(lake, "predictions"))
    result = check_model.run(spark, lake, trained["record"].extra["model_path"], "r1")
    assert result["same"] is False and result["rows_matched"] == N_CUSTOMERS and result["max_abs_diff"] > 1e-6

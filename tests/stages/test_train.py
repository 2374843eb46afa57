"""The train stage on a small synthetic gold table (the session's ``trained`` run, tests/conftest.py): what it
learns and records, model selection, run ids and the runs table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.core.errors import UserError
from jobs.lake import contract, delta_io
from jobs.stages import train


def test_tuning_prefers_the_most_regularised_model_within_the_tolerance():
    def c(reg, auc, enet=0.0):
        return {"regParam": reg, "elasticNetParam": enet, "validation_roc_auc": auc}
    # H200 run 3's validation AUCs: 0.01 gives up 0.0002, within 0.0005 of the best -> 0.01.
    assert train.choose([c(0.0, 0.81190), c(0.001, 0.81191), c(0.01, 0.81171)])["regParam"] == 0.01
    # A real loss (0.003) is not given up.
    assert train.choose([c(0.0, 0.8119), c(0.001, 0.8120), c(0.01, 0.8090)])["regParam"] == 0.001
    assert train.choose([c(0.01, 0.80, 0.0), c(0.01, 0.80, 0.5)])["elasticNetParam"] == 0.5


def test_train_learns_the_signal_and_records_the_run(trained):
    record = trained["record"]
    assert record.extra["implementation"] == "pyspark.ml"
    assert record.extra["test"]["roc_auc"] > 0.7
    info = json.loads((Path(trained["models"]) / "r1" / "run.json").read_text())
    assert info["oracle_auc"] == 0.8
    assert info["gold"]["version"] == 0
    assert set(info["versions"]) == {"pyspark", "delta-spark", "spark-rapids-ml"}
    assert 0.0 < info["threshold"] < 1.0
    assert {c["regParam"] for c in info["tuning"]} == {0.0, 0.01}
    # max_iter 300 by default: these fits converge (at tol) well before it.
    assert all(isinstance(c["iterations"], int) and 0 < c["iterations"] < 300 and c["max_iter_reached"] is False
               for c in info["tuning"]), info["tuning"]
    assert set(info["timings"]) == {"read_gold", "build_estimators", "split_counts", "check_wait", "fit_grid",
                                    "validation_aucs", "fit_and_tune", "evaluate", "total"}
    assert set(info["coefficients"]) == set(contract.FEATURES)
    # The signal's directions are recovered; a noise feature stays small.
    coefficients = info["coefficients"]
    assert coefficients[contract.FEATURES[0]] > 0.8 and coefficients[contract.FEATURES[1]] < -0.5
    assert abs(coefficients[contract.FEATURES[-1]]) < 0.3
    assert len(info["metrics"]["test"]["calibration_by_decile"]) == 10
    assert info["metrics"]["test"]["lift_top_decile"] > 1.5


def test_a_fit_stopped_by_max_iter_says_so(spark, trained):
    record = train.STAGE(spark, trained["lake"], trained["models"], run_id="few-iterations", reg_params=(0.01,),
                         max_iter=2)
    info = json.loads(Path(record.extra["run_json"]).read_text())
    assert [(c["iterations"], c["max_iter_reached"]) for c in info["tuning"]] == [(2, True)]


def test_rerunning_train_with_the_same_run_id_adds_no_runs_row(spark, trained):
    lake, models = trained["lake"], trained["models"]
    train.STAGE(spark, lake, models, run_id="r1", reg_params=(0.0, 0.01))
    runs, _ = delta_io.read(spark, delta_io.table_path(lake, "runs"))
    assert runs.where("run_id = 'r1'").count() == 1
    # The same run id for other parameters would leave a runs row that no longer matches its model.
    with pytest.raises(UserError, match="already names a run with other parameters"):
        train.STAGE(spark, lake, models, run_id="r1", reg_params=(0.01,))


def test_runs_append_once_per_run_id_whatever_the_order(spark, tmp_path):
    """Runs whose ids sort (or hash) lower than an earlier run's are still appended: one txn app id per run."""
    path = str(tmp_path / "runs")
    info = {"run_id": None, "implementation": "pyspark.ml", "gold": {"version": 0}, "threshold": 0.5,
            "oracle_auc": None, "model_path": "m", "coefficients": {},
            "metrics": {"test": {"roc_auc": 0.8, "pr_auc": 0.5, "log_loss": 0.4}}}
    for run_id in ("zzz", "aaa", "aaa", "zzz"):
        delta_io.append_once(train.runs_row(spark, {**info, "run_id": run_id}), path, *train.runs_txn(run_id))
    assert sorted(r["run_id"] for r in spark.read.format("delta").load(path).collect()) == ["aaa", "zzz"]


def test_default_run_id_depends_on_gold_contents_and_params_only():
    params = {"reg_params": [0.0], "max_iter": 100}
    assert train.default_run_id("a1b2", params) == train.default_run_id("a1b2", dict(params))
    assert train.default_run_id("a1b2", params) != train.default_run_id("a1b3", params)
    assert train.default_run_id("a1b2", params) != train.default_run_id("a1b2", {**params, "max_iter": 50})


def test_rebuilding_gold_with_the_same_rows_then_training_and_scoring_again_adds_nothing(spark, tmp_path):
    """A features rerun writes a new version of the same rows: the run id must not follow the version, or score
    would add a second prediction per customer (and train a second runs row)."""
    from jobs.stages import score
    from tests.support.model_inputs import synthetic_gold

    lake, models = str(tmp_path / "lake"), str(tmp_path / "models")
    gold = synthetic_gold(spark, n=1200)
    for _ in range(2):
        delta_io.overwrite(gold, delta_io.table_path(lake, "gold_features"))
        trained = train.STAGE(spark, lake, models, reg_params=(0.01,), max_iter=50)
        score.STAGE(spark, lake, trained.extra["model_path"])
    assert delta_io.committed_version(spark, delta_io.table_path(lake, "gold_features")) == 1
    predictions = spark.read.format("delta").load(delta_io.table_path(lake, "predictions"))
    assert predictions.count() == 1200 and predictions.select("customer_id").distinct().count() == 1200
    assert spark.read.format("delta").load(delta_io.table_path(lake, "runs")).count() == 1


def test_missing_gold_is_a_user_error(spark, tmp_path):
    with pytest.raises(UserError, match="no Delta table"):
        train.STAGE(spark, str(tmp_path / "empty-lake"), str(tmp_path / "models"))
    assert not (tmp_path / "models").exists()

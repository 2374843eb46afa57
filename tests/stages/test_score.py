"""The score stage on the session's ``trained`` run (tests/conftest.py): the predictions table, a re-run, a
missing model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake import contract, delta_io
from jobs.ml import estimators
from jobs.stages import score
from tests.support.model_inputs import N_CUSTOMERS


def test_predictions_have_ids_probabilities_and_deciles(spark, trained):
    df, _ = delta_io.read(spark, delta_io.table_path(trained["lake"], "predictions"))
    assert df.columns == ["customer_id", "churn_probability", "decile", "run_id"]
    stats = df.agg(F.count("*").alias("n"), F.countDistinct(contract.ID).alias("ids"),
                   F.min("decile").alias("lo"), F.max("decile").alias("hi")).first()
    assert (stats["n"], stats["ids"], stats["lo"], stats["hi"]) == (N_CUSTOMERS, N_CUSTOMERS, 1, 10)
    # Deciles follow the probabilities: every decile's lowest score is above the previous one's highest.
    ranges = df.groupBy("decile").agg(F.min("churn_probability").alias("lo"), F.max("churn_probability").alias("hi")) \
               .orderBy("decile").collect()
    assert all(a["hi"] < b["lo"] for a, b in zip(ranges, ranges[1:]))
    assert all(250 <= n <= 350 for n in (r["count"] for r in df.groupBy("decile").count().collect()))


def test_rerunning_score_leaves_predictions_unchanged(spark, trained):
    # Before the train re-run in tests/stages/test_train.py (a later file): a re-fit may differ from the first in the
    # last bit of a coefficient.
    path = delta_io.table_path(trained["lake"], "predictions")
    before = sorted(delta_io.read(spark, path)[0].collect())
    score.run(spark, trained["lake"], trained["record"].extra["model_path"], "r1")
    after = sorted(delta_io.read(spark, path)[0].collect())
    assert after == before


def test_scores_recomputed_per_scan_are_the_cached_ones(spark, trained):
    # The gpu profiles' setting (conf/rapids.conf): the probabilities are not cached for the decile boundaries and the
    # write but computed again from gold by each; the run's predictions are the same rows.
    from jobs.lake.session import CACHE_SCORES_KEY, session_conf

    path = delta_io.table_path(trained["lake"], "predictions")
    before = sorted(delta_io.read(spark, path)[0].collect())
    with session_conf(spark, {CACHE_SCORES_KEY: "false"}):
        record = score.run(spark, trained["lake"], trained["record"].extra["model_path"], "r1")
    assert record.counts == {"predictions": N_CUSTOMERS}
    assert sorted(delta_io.read(spark, path)[0].collect()) == before


def test_predictions_are_counted_from_the_commit_and_held_to_gold(spark, trained):
    assert trained["score"].counts == {"predictions": N_CUSTOMERS}
    gold, _ = delta_io.read(spark, delta_io.table_path(trained["lake"], "gold_features"))
    path = delta_io.table_path(trained["lake"], "predictions")
    version = delta_io.version(spark, path)
    # A commit without metrics: the run's slice is read back and counted.
    assert score.checked_rows(gold, delta_io.Commit(version, None), path, "r1") == N_CUSTOMERS
    # A commit that wrote a row more or less than gold holds stops the stage.
    for wrong in (N_CUSTOMERS - 1, N_CUSTOMERS + 1):
        with pytest.raises(RuntimeError, match=f"holds {wrong:,} rows for {N_CUSTOMERS:,} gold rows"):
            score.checked_rows(gold, delta_io.Commit(version, wrong), path, "r1")
    with pytest.raises(RuntimeError, match=f"holds 0 rows for {N_CUSTOMERS:,} gold rows"):
        score.checked_rows(gold, delta_io.Commit(version, None), path, "no-such-run")


def test_the_model_loads_as_the_trained_one_without_a_python_task(spark, trained):
    # PipelineModel.load reads the model's metadata in a Python task (PySpark's RDD first(), a Python worker
    # started for one line); the JVM's reader needs none. Every job the load runs is the JVM's.
    sc = spark.sparkContext
    sc.setJobGroup("load-model", "load_model")
    try:
        fitted = estimators.load_model(spark, trained["record"].extra["model_path"])
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("load-model")
              for s in tracker.getJobInfo(j).stageIds]
    assert stages and not [st.name for st in stages if st is not None and "PythonRDD" in st.name]
    saved = json.loads(Path(trained["record"].extra["run_json"]).read_text())
    assert fitted.intercept == saved["intercept"]
    assert fitted.coefficients_by_name() == saved["coefficients"]


def test_missing_model_is_a_user_error(spark, trained, tmp_path):
    with pytest.raises(UserError, match="no saved model"):
        score.run(spark, trained["lake"], str(tmp_path / "nowhere" / "model"), "r9")


def test_each_run_is_a_slice_of_files_and_an_older_partitioned_table_keeps_its_layout(spark, trained, tmp_path):
    model = trained["record"].extra["model_path"]
    gold, _ = delta_io.read(spark, delta_io.table_path(trained["lake"], "gold_features"))
    # The session's table: unpartitioned, every file holding one run.
    path = delta_io.table_path(trained["lake"], "predictions")
    files = spark.read.format("delta").load(path).select(F.input_file_name().alias("f"), "run_id").distinct()
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["partitionColumns"] == []
    assert files.groupBy("f").count().where("count > 1").count() == 0
    # written as Parquet files and committed (the cpu profile's file commits), not by Delta's writer
    assert all(f"/{delta_io.WRITE_FOLDER_PREFIX}" in r["f"] for r in files.collect())
    # A lake whose predictions were written partitioned by run_id, holding another run: that run's rows stay, r1's
    # are replaced, the table keeps its partitioning.
    lake = str(tmp_path / "lake")
    delta_io.overwrite(gold, delta_io.table_path(lake, "gold_features"))
    old = delta_io.table_path(lake, "predictions")
    rows = [("C1", 0.5, 5, "older"), ("C2", 0.25, 3, "older"), ("C1", 0.9, 10, "r1")]
    (spark.createDataFrame(rows, "customer_id string, churn_probability double, decile int, run_id string")
     .write.format("delta").partitionBy("run_id").save(old))
    record = score.run(spark, lake, model, "r1")
    assert record.counts == {"predictions": N_CUSTOMERS}
    assert spark.sql(f"DESCRIBE DETAIL delta.`{old}`").first()["partitionColumns"] == ["run_id"]
    by_run = {r["run_id"]: r["count"] for r in spark.read.format("delta").load(old).groupBy("run_id").count().collect()}
    assert by_run == {"older": 2, "r1": N_CUSTOMERS}

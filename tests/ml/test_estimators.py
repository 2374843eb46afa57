"""The estimator back ends (jobs.ml.estimators). MLlib's: a grid fitted in order, the default over an assembled
vector, the margin as a shallow tree of additions. Then the gpu profile's ML setting on a machine without a GPU:
the train job builds spark-rapids-ml's estimator with MLlib's parameters mapped, refuses what the GPU cannot do
unless CPU fallback is on, stops before fitting with one clear message when no GPU/cuML is there, and probes with
one task per executor."""
from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake import contract, delta_io
from jobs.launch import profiles
from jobs.ml import estimators
from jobs.run import runner
from jobs.stages import train
from tests.support.expressions import depth
from tests.support.sessions import run_python

GPU_ML = {k: v for k, v in profiles.load_profile("gpu").items()
          if k in (estimators.IMPLEMENTATION_KEY, estimators.FALLBACK_KEY, estimators.FLOAT32_INPUTS_KEY)}


def test_fit_grid_returns_the_models_in_the_grids_order(spark, trained):
    gold, _ = delta_io.read(spark, delta_io.table_path(trained["lake"], "gold_features"))
    rows = gold.select(contract.LABEL, *contract.FEATURES)
    trainer = estimators.logistic_regression(spark, contract.FEATURES, regParam=0.0, labelCol=contract.LABEL)
    cached = spark.sparkContext._jsc.getPersistentRDDs().size()
    strong, none = trainer.fit_grid(rows, [{"regParam": 1.0}, {"regParam": 0.0}])
    # the fits' shared copy of their input is freed once they end (and MLlib frees its own caches)
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == cached
    alone = estimators.logistic_regression(spark, contract.FEATURES, regParam=1.0, labelCol=contract.LABEL).fit(rows)
    assert strong.coefficients == pytest.approx(alone.coefficients, rel=1e-9, abs=1e-12)
    # a strong L2 penalty shrinks the coefficients: the two models are not the same one twice
    assert sum(abs(c) for c in strong.coefficients) < 0.5 * sum(abs(c) for c in none.coefficients)


def test_one_partition_reads_plan_a_scan_of_many_files_as_one_partition(spark, tmp_path):
    # What spark-rapids-ml's input looks like under spark.churn.ml.fitInputOnePartition: gold's files, filtered and
    # narrowed as train does, in one partition, so that it has no repartition to add before its fit.
    from jobs.lake.session import session_conf

    path = str(tmp_path / "files")
    spark.range(0, 40_000, numPartitions=12).selectExpr("id", "id % 2 AS label", "cast(id AS double) AS x") \
        .write.parquet(path)
    rows = lambda: spark.read.parquet(path).where(F.col("id") % 10 < 7).select("label", "x")  # noqa: E731
    assert rows().rdd.getNumPartitions() > 1
    with session_conf(spark, estimators.ONE_PARTITION_READS):
        frame = rows()
        assert frame.rdd.getNumPartitions() == 1
        assert frame.count() == 28_000
    assert rows().rdd.getNumPartitions() > 1   # the session's settings as they were


def test_default_back_end_is_mllib_over_an_assembled_vector(spark):
    trainer = estimators.logistic_regression(spark, ["a", "b"], regParam=0.1, labelCol="label")
    from pyspark.ml.classification import LogisticRegression

    assert type(trainer.estimator) is LogisticRegression
    assert trainer.estimator.getRegParam() == 0.1 and trainer.estimator.getFeaturesCol() == estimators.VECTOR_COL
    prepared = trainer.prepare(spark.createDataFrame([(1.0, 2.0, 0.0)], "a double, b double, label double"))
    assert prepared.first()[estimators.VECTOR_COL].toArray().tolist() == [1.0, 2.0]


def test_margin_is_a_shallow_tree_of_additions(spark):
    # 43 features + intercept as a left-deep chain would be ~46 levels deep: RAPIDS 25.04 plans that in
    # exponential time (NVIDIA/spark-rapids#13224). Balanced: ceil(log2(44)) = 6 additions, then multiply, col.
    n = len(contract.FEATURES)
    model = estimators.FittedLogisticRegression(contract.FEATURES, tuple(0.5 for _ in range(n)), -1.0,
                                                estimators.PYSPARK_ML, None)
    assert depth(model.margin()._jc.expr()) <= 6 + 2
    # and the sum is the same number: features 1..n, weights 0.5, intercept -1
    row = spark.range(1).select(*[F.lit(float(i + 1)).alias(c) for i, c in enumerate(contract.FEATURES)]) \
        .select(model.margin().alias("m")).first()
    assert row["m"] == pytest.approx(-1.0 + 0.5 * n * (n + 1) / 2)


def test_balanced_sum_of_none_one_and_odd_counts(spark):
    cols = [F.lit(float(x)) for x in (1, 2, 4, 8, 16)]
    got = spark.range(1).select(estimators.balanced_sum([]).alias("s0"),
                                estimators.balanced_sum(cols[:1]).alias("s1"),
                                estimators.balanced_sum(cols).alias("s5")).first()
    assert (got["s0"], got["s1"], got["s5"]) == (0.0, 1.0, 31.0)


def test_gpu_profile_names_spark_rapids_ml_without_fallback_in_float64():
    assert GPU_ML == {estimators.IMPLEMENTATION_KEY: "spark_rapids_ml", estimators.FALLBACK_KEY: "false",
                      estimators.FLOAT32_INPUTS_KEY: "false"}


@pytest.fixture
def gpu_ml(spark):
    """The fixture session with the gpu profile's ML settings, restored afterwards."""
    saved = {k: spark.conf.get(k, None) for k in GPU_ML}
    for k, v in GPU_ML.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in saved.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_train_builds_spark_rapids_ml_estimators_with_mapped_params(gpu_ml):
    from spark_rapids_ml.classification import LogisticRegression

    trainers = train.estimators_for(gpu_ml, reg_params=(0.0, 0.01), elastic_net=(0.0, 0.5), max_iter=50, tol=1e-9)
    assert set(trainers) == {(0.0, 0.0), (0.0, 0.5), (0.01, 0.0), (0.01, 0.5)}
    trainer = trainers[(0.01, 0.5)]
    est = trainer.estimator
    assert trainer.implementation == estimators.SPARK_RAPIDS_ML and type(est) is LogisticRegression
    # Spark ML params as given ...
    assert est.getFeaturesCols() == list(contract.FEATURES)
    assert (est.getRegParam(), est.getElasticNetParam(), est.getMaxIter(), est.getTol()) == (0.01, 0.5, 50, 1e-9)
    assert (est.getStandardization(), est.getFitIntercept(), est.getLabelCol()) == (True, True, "label")
    # ... and mapped onto cuML's: C = 1/regParam, l1_ratio, max_iter, tol, penalty.
    cuml = est.cuml_params
    assert cuml["C"] == pytest.approx(100.0) and cuml["l1_ratio"] == 0.5 and cuml["penalty"] == "elasticnet"
    assert (cuml["max_iter"], cuml["tol"], cuml["fit_intercept"], cuml["standardization"]) == (50, 1e-9, True, True)
    # The profile keeps the features double for cuML (spark-rapids-ml's default casts them to float32) ...
    assert est._float32_inputs is False
    # ... and without the setting, spark-rapids-ml's own default holds.
    gpu_ml.conf.unset(estimators.FLOAT32_INPUTS_KEY)
    assert estimators.logistic_regression(gpu_ml, contract.FEATURES).estimator._float32_inputs is True
    assert trainers[(0.0, 0.0)].estimator.cuml_params["penalty"] is None  # regParam 0: no penalty, as in MLlib
    # No VectorAssembler: spark-rapids-ml reads the double columns directly.
    df = gpu_ml.createDataFrame([(1.0,) * (len(contract.FEATURES) + 1)], [contract.LABEL, *contract.FEATURES])
    assert trainer.prepare(df).columns == df.columns


def test_grid_param_maps_reach_cumls_params(gpu_ml):
    # train fits its grid with one fitMultiple; each ParamMap must map onto cuML's parameters like a constructor.
    trainer = estimators.logistic_regression(gpu_ml, contract.FEATURES, regParam=0.0, elasticNetParam=0.0)
    maps = trainer.param_maps([{"regParam": 0.01, "elasticNetParam": 0.5}, {"regParam": 0.0, "elasticNetParam": 0.0}])
    first, second = (trainer.estimator.copy(m) for m in maps)
    assert first.cuml_params["C"] == pytest.approx(100.0) and first.cuml_params["penalty"] == "elasticnet"
    assert first.cuml_params["l1_ratio"] == 0.5 and second.cuml_params["penalty"] is None


@pytest.mark.parametrize("param, value", [("weightCol", "w"), ("threshold", 0.3),
                                          ("lowerBoundsOnIntercepts", None)])
def test_gpu_unsupported_param_is_a_clear_user_error(gpu_ml, param, value):
    if value is None:
        from pyspark.ml.linalg import Vectors

        value = Vectors.dense([0.0])
    with pytest.raises(UserError) as e:
        estimators.logistic_regression(gpu_ml, contract.FEATURES, **{param: value})
    assert param in str(e.value) and f"{estimators.FALLBACK_KEY}=true" in str(e.value)


def test_unsupported_param_is_accepted_with_cpu_fallback(gpu_ml):
    gpu_ml.conf.set(estimators.FALLBACK_KEY, "true")
    trainer = estimators.logistic_regression(gpu_ml, contract.FEATURES, weightCol="w")
    assert trainer.estimator.getOrDefault("weightCol") == "w"


@pytest.fixture
def tiny_lake(spark, tmp_path):
    lake = str(tmp_path / "lake")
    gold = spark.range(200).select(
        F.format_string("C%010d", "id").alias(contract.ID), (F.col("id") % 2).cast("double").alias(contract.LABEL),
        *[F.rand(i).alias(name) for i, name in enumerate(contract.FEATURES)])
    delta_io.overwrite(gold, delta_io.table_path(lake, "gold_features"))
    return lake


def test_fitting_without_a_gpu_stops_with_one_clear_message(gpu_ml, tiny_lake, tmp_path):
    models = tmp_path / "models"
    with pytest.raises(UserError) as e:
        train.STAGE(gpu_ml, tiny_lake, str(models), run_id="gpu1", reg_params=(0.0,))
    message = str(e.value)
    assert "needs a GPU with cupy and cuML" in message and "cpu profile" in message
    assert "\n" not in message and "Traceback" not in message
    assert not models.exists()  # nothing written
    assert not delta_io.exists(gpu_ml, delta_io.table_path(tiny_lake, "runs"))


def test_cli_reports_the_missing_gpu_as_one_line_and_exit_2(gpu_ml, tiny_lake, tmp_path, capsys):
    code = runner.main(["train", "--lake", tiny_lake, "--models-dir", str(tmp_path / "models"), "--reg-params", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: spark.churn.ml.implementation=spark_rapids_ml needs a GPU") and "\n" not in err


def test_a_failed_gpu_probe_is_not_repeated_and_its_verdict_stands(gpu_ml):
    # The pipeline probes as clean starts and again as features starts: after a failed probe the second call starts
    # none (no second wait for the same answer), and the fit gets the first one's message.
    app = gpu_ml.sparkContext.applicationId
    estimators.start_checks(gpu_ml)
    first = estimators._gpu_checks[app]
    with pytest.raises(UserError, match="needs a GPU with cupy and cuML"):
        estimators.check_gpu_available(gpu_ml)
    estimators.start_checks(gpu_ml, again=True)
    assert estimators._gpu_checks[app] is first
    with pytest.raises(UserError, match="needs a GPU with cupy and cuML"):
        estimators.check_gpu_available(gpu_ml)


def test_the_driver_side_import_waits_for_a_spark_job_and_runs_beside_it(gpu_ml, monkeypatch):
    # The pipeline starts it as ingest starts: the import must not overlap the stage's own DataFrame building, only
    # its jobs (the driver's threads wait on those).
    calls = []
    tracker = gpu_ml.sparkContext.statusTracker()
    monkeypatch.setattr(estimators, "_import_driver_side", lambda: calls.append(list(tracker.getActiveJobsIds())))
    estimators.start_driver_import(gpu_ml)
    time.sleep(0.5)
    assert calls == []   # no job yet: not started
    gpu_ml.range(1).select(F.expr("reflect('java.lang.Thread', 'sleep', cast(1500 as bigint))")).collect()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(calls) == 1 and calls[0], calls   # once, while the job ran
    calls.clear()
    gpu_ml.conf.set(estimators.IMPLEMENTATION_KEY, "pyspark.ml")
    estimators.start_driver_import(gpu_ml)   # MLlib: nothing to import
    gpu_ml.range(1).select(F.expr("reflect('java.lang.Thread', 'sleep', cast(500 as bigint))")).collect()
    assert calls == []


PROBE_TASKS = r"""
import sys, time
from pyspark.sql import SparkSession
from jobs.ml import estimators
from jobs.lake.session import registered_executors
local = SparkSession.builder.master("local[2]").appName("probe-tasks").getOrCreate()
print("LOCAL", estimators._probe_tasks(local))
local.stop()
spark = (SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.executor.memory", "512m")
         .appName("probe-tasks").getOrCreate())
for _ in range(120):  # until both executors registered
    if registered_executors(spark) >= 2:
        break
    time.sleep(0.5)
print("CLUSTER", estimators._probe_tasks(spark))
"""


@pytest.mark.slow
def test_the_gpu_probe_has_one_task_per_executor():
    # A fit runs one task per GPU (one executor per GPU): each should find a warm worker from the probe.
    stdout = run_python(PROBE_TASKS)
    got = dict(line.split() for line in stdout.splitlines() if line.startswith(("LOCAL", "CLUSTER")))
    assert got == {"LOCAL": "1", "CLUSTER": "2"}

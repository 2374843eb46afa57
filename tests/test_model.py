"""Model stages: metrics on hand-computed cases, then train + score on a small synthetic gold table."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from jobs import contract, delta_io, evaluate, ml, score, train
from jobs.errors import UserError

ROOT = Path(__file__).resolve().parent.parent


def predictions(spark, rows):
    return spark.createDataFrame(rows, "label double, probability double")


# The 4-point case: sorted by probability 0.8(1) 0.4(0) 0.35(1) 0.1(0).
FOUR = [(0.0, 0.1), (0.0, 0.4), (1.0, 0.35), (1.0, 0.8)]


def test_roc_auc_perfect_ranking_is_one_and_reversed_is_zero(spark):
    rows = [(0.0, 0.1), (0.0, 0.2), (1.0, 0.7), (1.0, 0.9)]
    assert evaluate.roc_auc(predictions(spark, rows)) == pytest.approx(1.0)
    assert evaluate.pr_auc(predictions(spark, rows)) == pytest.approx(1.0)
    assert evaluate.roc_auc(predictions(spark, [(1 - y, p) for y, p in rows])) == pytest.approx(0.0)


def test_roc_auc_four_points(spark):
    # Positive/negative pairs ranked right: (0.35>0.1), (0.8>0.1), (0.8>0.4); wrong: (0.35<0.4) -> 3/4.
    assert evaluate.roc_auc(predictions(spark, FOUR)) == pytest.approx(0.75)


def test_pr_auc_four_points(spark):
    # (recall, precision): start (0, 1), 0.8 -> (0.5, 1), 0.4 -> (0.5, 1/2), 0.35 -> (1, 2/3), 0.1 -> (1, 1/2).
    # Trapezoids: 0.5 * (1 + 1) / 2 + 0 + 0.5 * (1/2 + 2/3) / 2 + 0 = 0.5 + 0.2916667.
    assert evaluate.pr_auc(predictions(spark, FOUR)) == pytest.approx(0.5 + 0.5 * (0.5 + 2 / 3) / 2)


def test_ranking_metrics_count_a_tie_as_half(spark):
    # One positive and one negative at the same score: the pair is neither right nor wrong (1/2); the PR curve
    # is the single point (recall 1, precision 1/2), started at (0, 1/2).
    tie = [(1.0, 0.5), (0.0, 0.5)]
    assert evaluate.ranking_areas(predictions(spark, tie)) == pytest.approx((0.5, 0.5))
    # Scores closer than one bin (2^-20) are tied too; 2^-19 apart they are not.
    close = [(1.0, 0.5 + 2 ** -22), (0.0, 0.5)]
    apart = [(1.0, 0.5 + 2 ** -19), (0.0, 0.5)]
    assert evaluate.roc_auc(predictions(spark, close)) == pytest.approx(0.5)
    assert evaluate.roc_auc(predictions(spark, apart)) == pytest.approx(1.0)


def test_ranking_metrics_need_both_classes(spark):
    assert all(math.isnan(x) for x in evaluate.ranking_areas(predictions(spark, [(1.0, 0.3), (1.0, 0.6)])))


def test_ranking_metrics_agree_with_mllib_on_many_rows(spark):
    # An independent implementation: MLlib's evaluator without down-sampling (numBins=0), on 5000 rows with
    # repeated scores (ties inside and across classes).
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    df = spark.range(5000).select(
        (F.abs(F.xxhash64("id", F.lit(1))) % 1000 / 1000.0).alias("probability"),
        F.when(F.abs(F.xxhash64("id", F.lit(2))) % 1000 < F.abs(F.xxhash64("id", F.lit(1))) % 1000, 1.0)
         .otherwise(0.0).alias("label"))
    mllib = [BinaryClassificationEvaluator(rawPredictionCol="probability", labelCol="label", metricName=m,
                                           numBins=0).evaluate(df) for m in ("areaUnderROC", "areaUnderPR")]
    assert 0.6 < mllib[0] < 0.9
    assert evaluate.ranking_areas(df) == pytest.approx(tuple(mllib), abs=1e-12)


def test_ranking_areas_of_several_columns_in_one_pass(spark):
    # Three models scored on the same four rows (labels 0, 0, 1, 1): FOUR's scores (3/4, PR as above), a perfect
    # ranking (1, 1), a reversed one (0; PR: the two negatives first, then both positives at recall 1:
    # (0, 0) -> (0, 0) -> (0.5, 1/3) -> (1, 1/2), trapezoids 0.5 * (0 + 1/3) / 2 + 0.5 * (1/3 + 1/2) / 2).
    df = spark.createDataFrame([(0.0, 0.1, 0.2, 0.9), (0.0, 0.4, 0.1, 0.8), (1.0, 0.35, 0.7, 0.3), (1.0, 0.8, 0.9, 0.1)],
                               "label double, a double, b double, c double")
    got = evaluate.ranking_areas_of(df, ["a", "b", "c"])
    assert [g[0] for g in got] == pytest.approx([0.75, 1.0, 0.0])
    assert [g[1] for g in got] == pytest.approx([0.5 + 0.5 * (0.5 + 2 / 3) / 2, 1.0,
                                                 0.5 * (1 / 3) / 2 + 0.5 * (1 / 3 + 1 / 2) / 2])
    # A column with no usable score reports NaN for itself only.
    nulls = df.withColumn("d", F.lit(None).cast("double"))
    aucs = evaluate.ranking_areas_of(nulls, ["a", "d"])
    assert aucs[0] == pytest.approx((0.75, 0.5 + 0.5 * (0.5 + 2 / 3) / 2)) and all(math.isnan(x) for x in aucs[1])


def test_tuning_prefers_the_most_regularised_model_within_the_tolerance():
    def c(reg, auc, enet=0.0):
        return {"regParam": reg, "elasticNetParam": enet, "validation_roc_auc": auc}
    # H200 run 3's validation AUCs: 0.01 gives up 0.0002, within 0.0005 of the best -> 0.01.
    assert train.choose([c(0.0, 0.81190), c(0.001, 0.81191), c(0.01, 0.81171)])["regParam"] == 0.01
    # A real loss (0.003) is not given up.
    assert train.choose([c(0.0, 0.8119), c(0.001, 0.8120), c(0.01, 0.8090)])["regParam"] == 0.001
    assert train.choose([c(0.01, 0.80, 0.0), c(0.01, 0.80, 0.5)])["elasticNetParam"] == 0.5


def test_log_loss(spark):
    expected = -(math.log(0.9) + math.log(0.6) + math.log(0.35) + math.log(0.8)) / 4  # = 0.47228...
    assert evaluate.log_loss(predictions(spark, FOUR)) == pytest.approx(expected)
    # A certain mistake is clipped, not infinite.
    assert evaluate.log_loss(predictions(spark, [(1.0, 0.0)])) == pytest.approx(-math.log(1e-15))


def test_precision_recall_f1_at_threshold(spark):
    got = evaluate.at_threshold(predictions(spark, FOUR), 0.5)
    assert {k: got[k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 1, "fp": 0, "fn": 1, "tn": 2}
    assert (got["precision"], got["recall"]) == (1.0, 0.5)
    assert got["f1"] == pytest.approx(2 / 3)


def test_best_f1_threshold(spark):
    # Thresholds: 0.1 -> F1 2*2/(4+2) = .667; 0.35 -> 2*2/(3+2) = .8; 0.4 -> 2*1/(2+2) = .5; 0.8 -> 2/3.
    threshold, f1 = evaluate.best_f1_threshold(predictions(spark, FOUR))
    assert threshold == pytest.approx(0.35)
    assert f1 == pytest.approx(0.8)


TEN = [(1.0 if p in (0.95, 0.65, 0.25) else 0.0, p) for p in (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95)]


def test_deciles_lift_and_calibration(spark):
    df = predictions(spark, TEN)
    assert evaluate.decile_boundaries(df) == pytest.approx([0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85])
    # Top decile: the 0.95 row, churned -> rate 1 against 3/10 overall.
    assert evaluate.lift_top_decile(df) == pytest.approx(1 / 0.3)
    calibration = evaluate.calibration_by_decile(df)
    assert [c["decile"] for c in calibration] == list(range(1, 11))
    assert [c["n"] for c in calibration] == [1] * 10
    assert [c["mean_predicted"] for c in calibration] == pytest.approx([p for _, p in TEN])
    assert [c["observed_rate"] for c in calibration] == [y for y, _ in TEN]


def test_all_metrics_from_their_fused_scans(spark):
    # all_metrics computes log loss, the confusion counts, lift, base rate and rows in one aggregation: the same
    # numbers as the one-metric functions, worked out by hand for TEN (churners at 0.25, 0.65 and 0.95).
    got = evaluate.all_metrics(predictions(spark, TEN), 0.5)
    # predicted (>= 0.5): 0.55 0.65 0.75 0.85 0.95 -> tp 0.65 0.95, fp 0.55 0.75 0.85; fn 0.25; tn the other four
    assert {k: got["at_threshold"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 2, "fp": 3, "fn": 1, "tn": 4}
    assert got["at_threshold"]["f1"] == pytest.approx(2 * 0.4 * (2 / 3) / (0.4 + 2 / 3))
    expected_log_loss = -(math.log(0.25) + math.log(0.65) + math.log(0.95)
                          + sum(math.log(1 - p) for p in (0.05, 0.15, 0.35, 0.45, 0.55, 0.75, 0.85))) / 10
    assert got["log_loss"] == pytest.approx(expected_log_loss)
    # positive/negative pairs ranked right: 0.25 beats 2 negatives, 0.65 beats 5, 0.95 all 7 -> 14 of 21
    assert got["roc_auc"] == pytest.approx(14 / 21)
    assert (got["rows"], got["base_rate"]) == (10, pytest.approx(0.3))
    assert got["lift_top_decile"] == pytest.approx(1 / 0.3)
    assert [c["n"] for c in got["calibration_by_decile"]] == [1] * 10


# ---------------------------------------------------------------------------------------------------------
# Train + score on a synthetic gold table with a known signal.
# ---------------------------------------------------------------------------------------------------------
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


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("model")
    lake, models = str(base / "lake"), str(base / "models")
    delta_io.overwrite(synthetic_gold(spark), delta_io.table_path(lake, "gold_features"))
    manifest = base / "manifest.json"
    manifest.write_text(json.dumps({"churn": {"oracle_auc": 0.8}}))
    record = train.run(spark, lake, models, run_id="r1", reg_params=(0.0, 0.01), manifest=str(manifest))
    score_record = score.run(spark, lake, record.extra["model_path"], "r1")
    return {"lake": lake, "models": models, "record": record, "score": score_record}


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
    assert set(info["timings"]) == {"read_gold", "build_estimators", "split_counts", "check_wait", "fit_grid",
                                    "validation_aucs", "fit_and_tune", "evaluate", "total"}
    assert set(info["coefficients"]) == set(contract.FEATURES)
    # The signal's directions are recovered; a noise feature stays small.
    coefficients = info["coefficients"]
    assert coefficients[contract.FEATURES[0]] > 0.8 and coefficients[contract.FEATURES[1]] < -0.5
    assert abs(coefficients[contract.FEATURES[-1]]) < 0.3
    assert len(info["metrics"]["test"]["calibration_by_decile"]) == 10
    assert info["metrics"]["test"]["lift_top_decile"] > 1.5


def test_saved_model_scores_the_same_in_a_fresh_cpu_process(trained, tmp_path):
    """The saved model is plain pyspark.ml: the check-model stage, in a new CPU-only spark-submit, loads it and
    MLlib's own transform gives the probabilities the score stage wrote, for every customer."""
    out = tmp_path / "check.json"
    proc = subprocess.run([sys.executable, "-m", "jobs.launcher", "--profile", "cpu", "--master", "local[1]",
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
    from jobs import model_check

    lake = str(tmp_path / "lake")
    delta_io.overwrite(spark.read.format("delta").load(delta_io.table_path(trained["lake"], "gold_features")),
                       delta_io.table_path(lake, "gold_features"))
    other = spark.read.format("delta").load(delta_io.table_path(trained["lake"], "predictions")) \
        .withColumn("churn_probability", F.col("churn_probability") * 0.999)
    delta_io.overwrite(other, delta_io.table_path(lake, "predictions"))
    result = model_check.run(spark, lake, trained["record"].extra["model_path"], "r1")
    assert result["same"] is False and result["rows_matched"] == N_CUSTOMERS and result["max_abs_diff"] > 1e-6


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
    # Before the train re-run below: a re-fit may differ from the first in the last bit of a coefficient.
    path = delta_io.table_path(trained["lake"], "predictions")
    before = sorted(delta_io.read(spark, path)[0].collect())
    score.run(spark, trained["lake"], trained["record"].extra["model_path"], "r1")
    after = sorted(delta_io.read(spark, path)[0].collect())
    assert after == before


def test_rerunning_train_with_the_same_run_id_adds_no_runs_row(spark, trained):
    lake, models = trained["lake"], trained["models"]
    train.run(spark, lake, models, run_id="r1", reg_params=(0.0, 0.01))
    runs, _ = delta_io.read(spark, delta_io.table_path(lake, "runs"))
    assert runs.where("run_id = 'r1'").count() == 1
    # The same run id for other parameters would leave a runs row that no longer matches its model.
    with pytest.raises(UserError, match="already names a run with other parameters"):
        train.run(spark, lake, models, run_id="r1", reg_params=(0.01,))


def test_runs_append_once_per_run_id_whatever_the_order(spark, tmp_path):
    """Runs whose ids sort (or hash) lower than an earlier run's are still appended: one txn app id per run."""
    path = str(tmp_path / "runs")
    info = {"run_id": None, "implementation": "pyspark.ml", "gold": {"version": 0}, "threshold": 0.5,
            "oracle_auc": None, "model_path": "m", "coefficients": {},
            "metrics": {"test": {"roc_auc": 0.8, "pr_auc": 0.5, "log_loss": 0.4}}}
    for run_id in ("zzz", "aaa", "aaa", "zzz"):
        delta_io.append_once(train.runs_row(spark, {**info, "run_id": run_id}), path, *train.runs_txn(run_id))
    assert sorted(r["run_id"] for r in spark.read.format("delta").load(path).collect()) == ["aaa", "zzz"]


def test_default_run_id_depends_on_gold_version_and_params_only():
    params = {"reg_params": [0.0], "max_iter": 100}
    assert train.default_run_id(3, params) == train.default_run_id(3, dict(params))
    assert train.default_run_id(3, params) != train.default_run_id(4, params)
    assert train.default_run_id(3, params) != train.default_run_id(3, {**params, "max_iter": 50})


def test_split_is_a_function_of_the_customer_id(spark):
    ids = spark.createDataFrame([(f"C{i:010d}",) for i in range(2000)], "customer_id string")
    first = {r[0]: r[1] for r in ids.transform(train.with_split).collect()}
    second = {r[0]: r[1] for r in ids.repartition(3).transform(train.with_split).collect()}
    assert first == second
    shares = {s: sum(v == s for v in first.values()) / 2000 for s in ("train", "validation", "test")}
    assert shares["train"] == pytest.approx(0.70, abs=0.04)
    assert shares["validation"] == pytest.approx(0.15, abs=0.03)


def test_missing_model_is_a_user_error(spark, trained, tmp_path):
    with pytest.raises(UserError, match="no saved model"):
        score.run(spark, trained["lake"], str(tmp_path / "nowhere" / "model"), "r9")


def test_missing_gold_is_a_user_error(spark, tmp_path):
    with pytest.raises(UserError, match="no Delta table"):
        train.run(spark, str(tmp_path / "empty-lake"), str(tmp_path / "models"))
    assert not (tmp_path / "models").exists()


def test_fit_grid_returns_the_models_in_the_grids_order(spark, trained):
    gold, _ = delta_io.read(spark, delta_io.table_path(trained["lake"], "gold_features"))
    rows = gold.select(contract.LABEL, *contract.FEATURES)
    trainer = ml.logistic_regression(spark, contract.FEATURES, regParam=0.0, labelCol=contract.LABEL)
    strong, none = trainer.fit_grid(rows, [{"regParam": 1.0}, {"regParam": 0.0}])
    alone = ml.logistic_regression(spark, contract.FEATURES, regParam=1.0, labelCol=contract.LABEL).fit(rows)
    assert strong.coefficients == pytest.approx(alone.coefficients, rel=1e-9, abs=1e-12)
    # a strong L2 penalty shrinks the coefficients: the two models are not the same one twice
    assert sum(abs(c) for c in strong.coefficients) < 0.5 * sum(abs(c) for c in none.coefficients)


def test_default_back_end_is_mllib_over_an_assembled_vector(spark):
    trainer = ml.logistic_regression(spark, ["a", "b"], regParam=0.1, labelCol="label")
    from pyspark.ml.classification import LogisticRegression

    assert type(trainer.estimator) is LogisticRegression
    assert trainer.estimator.getRegParam() == 0.1 and trainer.estimator.getFeaturesCol() == ml.VECTOR_COL
    prepared = trainer.prepare(spark.createDataFrame([(1.0, 2.0, 0.0)], "a double, b double, label double"))
    assert prepared.first()[ml.VECTOR_COL].toArray().tolist() == [1.0, 2.0]


def _depth(expr) -> int:
    """Depth of a Catalyst expression tree, walked through py4j."""
    children = expr.children()
    return 1 + max((_depth(children.apply(i)) for i in range(children.size())), default=0)


def test_margin_is_a_shallow_tree_of_additions(spark):
    # 43 features + intercept as a left-deep chain would be ~46 levels deep: RAPIDS 25.04 plans that in
    # exponential time (NVIDIA/spark-rapids#13224). Balanced: ceil(log2(44)) = 6 additions, then multiply, col.
    n = len(contract.FEATURES)
    model = ml.FittedLogisticRegression(contract.FEATURES, tuple(0.5 for _ in range(n)), -1.0, ml.PYSPARK_ML, None)
    assert _depth(model.margin()._jc.expr()) <= 6 + 2
    # and the sum is the same number: features 1..n, weights 0.5, intercept -1
    row = spark.range(1).select(*[F.lit(float(i + 1)).alias(c) for i, c in enumerate(contract.FEATURES)]) \
        .select(model.margin().alias("m")).first()
    assert row["m"] == pytest.approx(-1.0 + 0.5 * n * (n + 1) / 2)


def test_balanced_sum_of_none_one_and_odd_counts(spark):
    cols = [F.lit(float(x)) for x in (1, 2, 4, 8, 16)]
    got = spark.range(1).select(ml.balanced_sum([]).alias("s0"), ml.balanced_sum(cols[:1]).alias("s1"),
                                ml.balanced_sum(cols).alias("s5")).first()
    assert (got["s0"], got["s1"], got["s5"]) == (0.0, 1.0, 31.0)

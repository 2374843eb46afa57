"""The metrics (jobs.ml.evaluate) on hand-computed cases."""
from __future__ import annotations

import math

import pytest
from pyspark.sql import functions as F

from jobs.ml import evaluate
from tests.support.expressions import depth


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


def parts(spark, tune, test):
    """A frame of two parts: ``tune`` (threshold chosen there) and ``test`` (measured there)."""
    return spark.createDataFrame([("v", y, p) for y, p in tune] + [("t", y, p) for y, p in test],
                                 "part string, label double, probability double")


TEN = [(1.0 if p in (0.95, 0.65, 0.25) else 0.0, p) for p in (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95)]


def test_threshold_is_the_tune_parts_best_f1(spark):
    # FOUR's thresholds: 0.1 -> F1 2*2/(4+2) = .667; 0.35 -> 2*2/(3+2) = .8; 0.4 -> 2*1/(2+2) = .5; 0.8 -> 2/3.
    threshold, f1, _ = evaluate.tuned_metrics(parts(spark, FOUR, TEN), "part", "v", "t")
    assert threshold == pytest.approx(0.35)
    assert f1 == pytest.approx(0.8)


def test_test_part_metrics_at_the_tuned_threshold(spark):
    # Tuned on FOUR (threshold 0.35), measured on TEN (churners at 0.25, 0.65 and 0.95), FOUR's rows counting
    # nowhere in the test's figures.
    _, _, got = evaluate.tuned_metrics(parts(spark, FOUR, TEN), "part", "v", "t")
    # predicted (>= 0.35): 0.35 .. 0.95 -> tp 0.65 0.95; fp 0.35 0.45 0.55 0.75 0.85; fn 0.25; tn 0.05 0.15
    assert {k: got["at_threshold"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 2, "fp": 5, "fn": 1, "tn": 2}
    assert (got["at_threshold"]["precision"], got["at_threshold"]["recall"]) == (pytest.approx(2 / 7), pytest.approx(2 / 3))
    assert got["at_threshold"]["f1"] == pytest.approx(2 * (2 / 7) * (2 / 3) / (2 / 7 + 2 / 3))
    expected_log_loss = -(math.log(0.25) + math.log(0.65) + math.log(0.95)
                          + sum(math.log(1 - p) for p in (0.05, 0.15, 0.35, 0.45, 0.55, 0.75, 0.85))) / 10
    assert got["log_loss"] == pytest.approx(expected_log_loss)
    # positive/negative pairs ranked right: 0.25 beats 2 negatives, 0.65 beats 5, 0.95 all 7 -> 14 of 21
    assert got["roc_auc"] == pytest.approx(14 / 21)
    assert (got["rows"], got["base_rate"]) == (10, pytest.approx(0.3))
    # Deciles of TEN's own probabilities (boundaries 0.05, 0.15, ..., 0.85): one row each, the 0.95 row on top,
    # churned -> lift 1 / 0.3.
    assert got["lift_top_decile"] == pytest.approx(1 / 0.3)
    calibration = got["calibration_by_decile"]
    assert [c["decile"] for c in calibration] == list(range(1, 11))
    assert [c["n"] for c in calibration] == [1] * 10
    assert [c["mean_predicted"] for c in calibration] == pytest.approx([p for _, p in TEN])
    assert [c["observed_rate"] for c in calibration] == [y for y, _ in TEN]


def test_four_points_tuned_and_measured_on_themselves(spark):
    # FOUR at its own best threshold 0.35: predicted 0.35 0.4 0.8 -> tp 0.35 0.8, fp 0.4; fn none; tn 0.1.
    _, _, got = evaluate.tuned_metrics(parts(spark, FOUR, FOUR), "part", "v", "t")
    assert {k: got["at_threshold"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 2, "fp": 1, "fn": 0, "tn": 1}
    assert (got["at_threshold"]["precision"], got["at_threshold"]["recall"]) == (pytest.approx(2 / 3), 1.0)
    assert got["at_threshold"]["f1"] == pytest.approx(0.8)
    expected = -(math.log(0.9) + math.log(0.6) + math.log(0.35) + math.log(0.8)) / 4  # = 0.47228...
    assert got["log_loss"] == pytest.approx(expected)
    assert got["roc_auc"] == pytest.approx(0.75)


def test_a_certain_mistake_costs_a_clipped_log_loss(spark):
    _, _, got = evaluate.tuned_metrics(parts(spark, FOUR, [(1.0, 0.0), (0.0, 0.0)]), "part", "v", "t")
    assert got["log_loss"] == pytest.approx(-math.log(1e-15) / 2)
    assert {k: got["at_threshold"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 0, "fp": 0, "fn": 1, "tn": 1}


def test_deciles_of_a_frame(spark):
    assert evaluate.decile_boundaries(predictions(spark, TEN)) == \
        pytest.approx([0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85])


def test_tuned_metrics_need_test_rows(spark):
    with pytest.raises(ValueError, match="no scored rows of part 't'"):
        evaluate.tuned_metrics(parts(spark, FOUR, []), "part", "v", "t")


def test_reached_candidates_counts_thresholds_in_a_shallow_tree(spark):
    # 99 thresholds 0.01..0.99 as a chain of additions would be ~100 levels deep, which the RAPIDS plugin 25.04 plans
    # in exponential time on a GPU (the run never leaves planning); balanced: ceil(log2(99)) = 7 additions deep.
    thresholds = [k / 100 for k in range(1, 100)]
    reached = evaluate.reached_candidates(F.col("p"), thresholds)
    assert depth(reached._jc.expr()) <= 7 + 3
    rows = spark.createDataFrame([(None,), (0.0,), (0.05,), (0.505,), (0.995,)], "p double")
    got = [r["n"] for r in rows.select(reached.alias("n")).collect()]
    assert got == [None, 0, 5, 50, 99]

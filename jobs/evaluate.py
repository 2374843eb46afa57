"""Metrics of a binary classifier over a predictions DataFrame with a 0/1 ``label`` and a double
``probability`` (P(label = 1)). Pure functions: each reads the frame with built-in aggregations and returns
numbers. Deciles come from approximate quantiles (``percentile_approx``, one aggregation), never from
``ntile`` over a window, which would pull every row into one partition.

Decile 10 holds the highest probabilities: a row is in decile ``1 + #{k : p > q_k}`` for the 10%..90%
quantiles ``q_k``. With ties at a boundary a decile can hold more or fewer than a tenth of the rows.
"""
from __future__ import annotations

import math

from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

LABEL = "label"
PROBABILITY = "probability"
EPS = 1e-15  # log loss clips probabilities to [EPS, 1 - EPS], so one confident mistake is large, not infinite
QUANTILE_ACCURACY = 10_000  # percentile_approx: relative rank error 1/10000


def roc_auc(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    return _binary_evaluator(df, "areaUnderROC", label, probability)


def pr_auc(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    """Area under the precision-recall curve, as MLlib computes it (trapezoids, curve starting at recall 0
    with the precision of the highest score)."""
    return _binary_evaluator(df, "areaUnderPR", label, probability)


def _binary_evaluator(df: DataFrame, metric: str, label: str, probability: str) -> float:
    evaluator = BinaryClassificationEvaluator(rawPredictionCol=probability, labelCol=label, metricName=metric)
    return float(evaluator.evaluate(df.select(F.col(label).cast("double").alias(label),
                                              F.col(probability).cast("double").alias(probability))))


def log_loss(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    p = F.least(F.greatest(F.col(probability), F.lit(EPS)), F.lit(1.0 - EPS))
    y = F.col(label)
    row = df.agg(F.avg(-(y * F.log(p) + (F.lit(1.0) - y) * F.log(F.lit(1.0) - p))).alias("ll")).first()
    return float(row["ll"])


def at_threshold(df: DataFrame, threshold: float, label: str = LABEL, probability: str = PROBABILITY) -> dict:
    """Confusion counts, precision, recall and F1 when ``probability >= threshold`` predicts churn."""
    predicted = F.col(probability) >= F.lit(threshold)
    actual = F.col(label) == F.lit(1.0)
    row = df.agg(
        F.sum(F.when(predicted & actual, 1).otherwise(0)).alias("tp"),
        F.sum(F.when(predicted & ~actual, 1).otherwise(0)).alias("fp"),
        F.sum(F.when(~predicted & actual, 1).otherwise(0)).alias("fn"),
        F.sum(F.when(~predicted & ~actual, 1).otherwise(0)).alias("tn"),
    ).first()
    tp, fp, fn, tn = (int(row[k] or 0) for k in ("tp", "fp", "fn", "tn"))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"threshold": threshold, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": precision, "recall": recall, "f1": f1}


def best_f1_threshold(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY,
                      grid: int = 100) -> tuple[float, float]:
    """The threshold (among the 1/grid .. (grid-1)/grid quantiles of ``probability``) with the highest F1,
    and that F1: one aggregation for the quantiles, one for every candidate's counts."""
    fractions = [k / grid for k in range(1, grid)]
    quantiles = df.agg(F.percentile_approx(probability, fractions, QUANTILE_ACCURACY).alias("q")).first()["q"]
    candidates = sorted(set(float(q) for q in quantiles or [] if q is not None))
    if not candidates:
        return 0.5, 0.0
    actual = F.col(label) == F.lit(1.0)
    aggs = [F.sum(actual.cast("long")).alias("pos")]
    for i, t in enumerate(candidates):
        predicted = F.col(probability) >= F.lit(t)
        aggs.append(F.sum(predicted.cast("long")).alias(f"pp{i}"))
        aggs.append(F.sum((predicted & actual).cast("long")).alias(f"tp{i}"))
    row = df.agg(*aggs).first()
    pos = row["pos"] or 0
    best = (candidates[0], -1.0)
    for i, t in enumerate(candidates):
        denominator = (row[f"pp{i}"] or 0) + pos
        f1 = 2 * (row[f"tp{i}"] or 0) / denominator if denominator else 0.0
        if f1 > best[1]:
            best = (t, f1)
    return best


def decile_boundaries(df: DataFrame, probability: str = PROBABILITY) -> list[float]:
    """The 10%, 20%, ..., 90% approximate quantiles of ``probability``."""
    q = df.agg(F.percentile_approx(probability, [k / 10 for k in range(1, 10)], QUANTILE_ACCURACY).alias("q")).first()["q"]
    return [float(x) for x in q]


def decile(probability: Column, boundaries: list[float]) -> Column:
    """1..10, 10 = highest probabilities: one more than the number of boundaries the probability exceeds."""
    return sum((F.when(probability > F.lit(b), 1).otherwise(0) for b in boundaries), F.lit(1)).cast("int")


def calibration_by_decile(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY,
                          boundaries: list[float] | None = None) -> list[dict]:
    """Per decile of predicted probability: rows, mean predicted probability, observed churn rate."""
    boundaries = decile_boundaries(df, probability) if boundaries is None else boundaries
    rows = (df.groupBy(decile(F.col(probability), boundaries).alias("decile"))
              .agg(F.count(F.lit(1)).alias("n"), F.avg(probability).alias("mean_predicted"),
                   F.avg(F.col(label)).alias("observed_rate"))
              .orderBy("decile").collect())  # ten rows, one per decile
    return [{"decile": r["decile"], "n": r["n"], "mean_predicted": float(r["mean_predicted"]),
             "observed_rate": float(r["observed_rate"])} for r in rows]


def lift_top_decile(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY,
                    boundaries: list[float] | None = None) -> float:
    """Churn rate among the rows in decile 10 divided by the overall churn rate (1.0 = no better than random)."""
    boundaries = decile_boundaries(df, probability) if boundaries is None else boundaries
    top = F.col(probability) > F.lit(boundaries[-1])
    row = df.agg(F.avg(label).alias("rate"),
                 F.avg(F.when(top, F.col(label))).alias("top_rate")).first()
    if not row["rate"] or row["top_rate"] is None:
        return math.nan
    return float(row["top_rate"]) / float(row["rate"])


def all_metrics(df: DataFrame, threshold: float, label: str = LABEL, probability: str = PROBABILITY) -> dict:
    """Every metric above, for the run record: ranking, probability quality, and decisions at ``threshold``."""
    boundaries = decile_boundaries(df, probability)
    return {
        "roc_auc": roc_auc(df, label, probability),
        "pr_auc": pr_auc(df, label, probability),
        "log_loss": log_loss(df, label, probability),
        "at_threshold": at_threshold(df, threshold, label, probability),
        "lift_top_decile": lift_top_decile(df, label, probability, boundaries),
        "calibration_by_decile": calibration_by_decile(df, label, probability, boundaries),
        "base_rate": float(df.agg(F.avg(label)).first()[0]),
        "rows": df.count(),
    }

"""Metrics of a binary classifier over a predictions DataFrame with a 0/1 ``label`` and a double
``probability`` (P(label = 1)). Pure functions: each reads the frame with built-in aggregations and returns
numbers. Deciles come from approximate quantiles (``percentile_approx``, one aggregation), never from
``ntile`` over a window, which would pull every row into one partition.

Decile 10 holds the highest probabilities: a row is in decile ``1 + #{k : p > q_k}`` for the 10%..90%
quantiles ``q_k``. With ties at a boundary a decile can hold more or fewer than a tenth of the rows.
"""
from __future__ import annotations

import math
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

LABEL = "label"
PROBABILITY = "probability"
EPS = 1e-15  # log loss clips probabilities to [EPS, 1 - EPS], so one confident mistake is large, not infinite
QUANTILE_ACCURACY = 10_000  # percentile_approx: relative rank error 1/10000


SCORE_BINS = 1 << 20  # ranking metrics group probabilities into bins of width 2^-20 (see ranking_areas)


def roc_auc(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    return ranking_areas(df, label, probability)[0]


def pr_auc(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    """Area under the precision-recall curve, as MLlib defines it (trapezoids, curve starting at recall 0
    with the precision of the highest score)."""
    return ranking_areas(df, label, probability)[1]


def score_bins(df: DataFrame, bins: int, label: str = LABEL, probability: str = PROBABILITY,
               by: str | None = None) -> DataFrame:
    """([by,] bin, pos, neg): positives and negatives per probability bin ``floor(probability * bins)``,
    0..bins-1 (probability 1.0 joins the top bin), per value of the column ``by`` if given; at most ``bins``
    rows per value whatever the row count. The curves and their areas need this aggregate, never the rows."""
    y = F.col(label).cast("double")
    b = F.least(F.floor(F.col(probability).cast("double") * F.lit(float(bins))), F.lit(bins - 1)).cast("long")
    return (df.where(F.col(probability).isNotNull())
              .groupBy(*([F.col(by)] if by else []), b.alias("bin"))
              .agg(F.sum(y).alias("pos"), F.sum(F.lit(1.0) - y).alias("neg")))


def ranking_areas(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> tuple[float, float]:
    """(area under the ROC curve, area under the precision-recall curve), from built-in aggregations only.

    The rows are grouped by score bin (``score_bins``, width 2^-20: at most ~10^6 bins whatever the row count),
    counting positives and negatives per bin; the curves' points are the bins in descending order, with
    cumulative counts from a window over that small aggregate (one partition, at most ~10^6 rows). Within a bin,
    scores count as tied: a positive/negative pair in one bin scores 1/2, as MLlib scores exact ties, so the
    result equals the exact areas whenever distinct scores lie in distinct bins (scores 2^-20 apart or more)
    and otherwise differs by less than half the share of pairs that share a bin. The same numbers as MLlib's
    ``BinaryClassificationEvaluator`` (which also groups scores, into 1000 bins of equal row counts), but as
    a shuffle-and-aggregate the RAPIDS Accelerator runs on the GPU, where the evaluator is RDD code on the CPU.
    NaN when the frame holds no positive or no negative row."""
    return ranking_areas_of(df, [probability], label)[0]


def ranking_areas_of(df: DataFrame, probabilities: Sequence[str], label: str = LABEL) -> list[tuple[float, float]]:
    """``ranking_areas`` of several probability columns of one frame (e.g. every model of a tuning grid scored
    on the validation rows), from one scan of the frame: the columns are stacked as (model, probability) rows and
    binned per model, the windows run per model."""
    if len(probabilities) == 1:
        rows = df.select(F.lit(0).alias("model"), F.col(label), F.col(probabilities[0]).alias(PROBABILITY))
    else:
        stacked = F.explode(F.array(*[F.struct(F.lit(i).alias("model"), F.col(c).cast("double").alias(PROBABILITY))
                                      for i, c in enumerate(probabilities)])).alias("s")
        rows = df.select(F.col(label), stacked).select(label, "s.model", f"s.{PROBABILITY}")
    bins = score_bins(rows, SCORE_BINS, label, PROBABILITY, by="model")
    # Descending score: a bin's "above" counts are every row of a higher bin of the same model.
    order = Window.partitionBy("model").orderBy(F.col("bin").desc())
    above = order.rowsBetween(Window.unboundedPreceding, -1)
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    curve = (bins.withColumn("pos_above", F.coalesce(F.sum("pos").over(above), F.lit(0.0)))
                 .withColumn("tp", F.sum("pos").over(upto))
                 .withColumn("fp", F.sum("neg").over(upto))
                 .withColumn("precision", F.col("tp") / (F.col("tp") + F.col("fp")))
                 # The curve starts at recall 0 with the precision of the highest score (MLlib's convention).
                 .withColumn("precision_before", F.coalesce(F.lag("precision", 1).over(order), F.col("precision"))))
    found = {r["model"]: r for r in curve.groupBy("model").agg(
        F.sum("pos").alias("p"), F.sum("neg").alias("n"),
        F.sum(F.col("neg") * (F.col("pos_above") + F.col("pos") / F.lit(2.0))).alias("roc_pairs"),
        F.sum(F.col("pos") * (F.col("precision") + F.col("precision_before")) / F.lit(2.0)).alias("pr_sum"),
    ).collect()}  # one row per probability column
    areas = []
    for i in range(len(probabilities)):
        row = found.get(i)
        p, n = (float(row["p"] or 0.0), float(row["n"] or 0.0)) if row else (0.0, 0.0)
        areas.append((math.nan, math.nan) if p == 0.0 or n == 0.0
                     else (float(row["roc_pairs"]) / (p * n), float(row["pr_sum"]) / p))
    return areas


def log_loss(df: DataFrame, label: str = LABEL, probability: str = PROBABILITY) -> float:
    return float(df.agg(_log_loss_column(label, probability)).first()["log_loss"])


def _log_loss_column(label: str, probability: str) -> Column:
    p = F.least(F.greatest(F.col(probability), F.lit(EPS)), F.lit(1.0 - EPS))
    y = F.col(label)
    return F.avg(-(y * F.log(p) + (F.lit(1.0) - y) * F.log(F.lit(1.0) - p))).alias("log_loss")


def at_threshold(df: DataFrame, threshold: float, label: str = LABEL, probability: str = PROBABILITY) -> dict:
    """Confusion counts, precision, recall and F1 when ``probability >= threshold`` predicts churn."""
    return _at_threshold_from(df.agg(*_confusion_columns(threshold, label, probability)).first(), threshold)


def _confusion_columns(threshold: float, label: str, probability: str) -> list[Column]:
    predicted = F.col(probability) >= F.lit(threshold)
    actual = F.col(label) == F.lit(1.0)
    cells = {"tp": predicted & actual, "fp": predicted & ~actual, "fn": ~predicted & actual, "tn": ~predicted & ~actual}
    return [F.sum(F.when(cell, 1).otherwise(0)).alias(name) for name, cell in cells.items()]


def _at_threshold_from(row, threshold: float) -> dict:
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
    return _lift_from(df.agg(*_lift_columns(label, probability, boundaries)).first())


def _lift_columns(label: str, probability: str, boundaries: list[float]) -> list[Column]:
    top = F.col(probability) > F.lit(boundaries[-1])
    return [F.avg(label).alias("rate"), F.avg(F.when(top, F.col(label))).alias("top_rate")]


def _lift_from(row) -> float:
    if not row["rate"] or row["top_rate"] is None:
        return math.nan
    return float(row["top_rate"]) / float(row["rate"])


def all_metrics(df: DataFrame, threshold: float, label: str = LABEL, probability: str = PROBABILITY) -> dict:
    """Every metric above, for the run record: ranking, probability quality, and decisions at ``threshold``.
    Four scans of ``df`` (quantiles, ranking areas, calibration, and one aggregation for log loss, the
    confusion counts, lift, base rate and rows), not one per metric: each scan is a Spark job whose fixed cost
    (~0.3-0.8 s) is most of a metric's time at a few hundred thousand test rows."""
    boundaries = decile_boundaries(df, probability)
    roc, pr = ranking_areas(df, label, probability)
    row = df.agg(_log_loss_column(label, probability), *_confusion_columns(threshold, label, probability),
                 *_lift_columns(label, probability, boundaries), F.count(F.lit(1)).alias("rows")).first()
    return {
        "roc_auc": roc,
        "pr_auc": pr,
        "log_loss": float(row["log_loss"]),
        "at_threshold": _at_threshold_from(row, threshold),
        "lift_top_decile": _lift_from(row),
        "calibration_by_decile": calibration_by_decile(df, label, probability, boundaries),
        "base_rate": float(row["rate"]),
        "rows": int(row["rows"]),
    }

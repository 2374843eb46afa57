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

from jobs.ml.estimators import balanced_sum

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


def _log_loss_term(label: str, probability: str) -> Column:
    """Each row's term of the log loss (their mean is the log loss)."""
    p = F.least(F.greatest(F.col(probability), F.lit(EPS)), F.lit(1.0 - EPS))
    y = F.col(label)
    return -(y * F.log(p) + (F.lit(1.0) - y) * F.log(F.lit(1.0) - p))


def decile_boundaries(df: DataFrame, probability: str = PROBABILITY) -> list[float]:
    """The 10%, 20%, ..., 90% approximate quantiles of ``probability``."""
    q = df.agg(F.percentile_approx(probability, [k / 10 for k in range(1, 10)], QUANTILE_ACCURACY).alias("q")).first()["q"]
    return [float(x) for x in q]


def decile(probability: Column, boundaries: list[float]) -> Column:
    """1..10, 10 = highest probabilities: one more than the number of boundaries the probability exceeds."""
    return sum((F.when(probability > F.lit(b), 1).otherwise(0) for b in boundaries), F.lit(1)).cast("int")


def _at_threshold_counts(threshold: float, tp: int, fp: int, fn: int, tn: int) -> dict:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"threshold": threshold, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": precision, "recall": recall, "f1": f1}


THRESHOLD_GRID = 100  # threshold candidates: the 1/100 .. 99/100 quantiles of the tuning part's probabilities
DECILE_STEP = THRESHOLD_GRID // 10  # the deciles are every tenth of those quantiles


def tuned_metrics(df: DataFrame, part: str, tune: str, test: str, label: str = LABEL,
                  probability: str = PROBABILITY) -> tuple[float, float, dict]:
    """(threshold, its F1 on ``tune``, every metric of ``test`` at it) for a frame whose column ``part`` names each
    row's part: the threshold with the highest F1 among the 1%..99% quantiles of the ``tune`` rows' probabilities,
    then on the ``test`` rows the ranking areas, log loss, the decisions at the threshold, lift and calibration by
    decile. Three scans of ``df`` whatever the metrics (each a Spark job whose fixed cost is most of a metric's time
    at a few hundred thousand rows): the quantiles of both parts (the test's deciles are every tenth of its
    quantiles), one aggregation of the rows' cells giving every candidate's counts and the other metrics
    (``_cell_sums``; the test's decisions at the chosen threshold are its counts at that candidate), and the test's
    ranking areas."""
    fractions = [k / THRESHOLD_GRID for k in range(1, THRESHOLD_GRID)]
    quantiles = {r[part]: r["q"] for r in df.groupBy(part).agg(
        F.percentile_approx(probability, fractions, QUANTILE_ACCURACY).alias("q")).collect()}  # one row a part
    if not quantiles.get(test):
        raise ValueError(f"no scored rows of part {test!r} to measure")
    candidates = sorted(set(float(q) for q in quantiles.get(tune) or [] if q is not None)) or [0.5]
    boundaries = [float(quantiles[test][k * DECILE_STEP - 1]) for k in range(1, 10)]

    found = _cell_sums(df, part, candidates, boundaries, label, probability)

    def f1(sums: dict, i: int) -> float:
        denominator = sums["predicted"][i] + sums["pos"]
        return 2 * sums["tp"][i] / denominator if denominator else 0.0

    scores = [f1(found[tune], i) if tune in found else 0.0 for i in range(len(candidates))]
    chosen = max(range(len(candidates)), key=scores.__getitem__)   # the first (lowest) threshold of the best F1
    row = found[test]
    tp, predicted, pos, n = row["tp"][chosen], row["predicted"][chosen], row["pos"], row["rows"]
    fn = pos - tp
    roc, pr = ranking_areas(df.where(F.col(part) == F.lit(test)), label, probability)
    deciles = row["deciles"]
    calibration = [{"decile": d, "n": deciles[d]["n"], "mean_predicted": deciles[d]["sp"] / deciles[d]["n"],
                    "observed_rate": deciles[d]["sy"] / deciles[d]["n"]} for d in range(1, 11) if deciles[d]["n"]]
    rate = row["sy"] / row["labelled"] if row["labelled"] else None
    top_rate = deciles[10]["sy"] / deciles[10]["labelled"] if deciles[10]["labelled"] else None
    return candidates[chosen], scores[chosen], {
        "roc_auc": roc,
        "pr_auc": pr,
        "log_loss": row["loss"] / row["losses"] if row["losses"] else None,
        "at_threshold": _at_threshold_counts(candidates[chosen], tp, predicted - tp, fn, n - predicted - fn),
        "lift_top_decile": top_rate / rate if rate and top_rate is not None else math.nan,
        "calibration_by_decile": calibration,
        "base_rate": rate,
        "rows": n,
    }


def reached_candidates(probability: Column, candidates: list[float]) -> Column:
    """How many of the ascending ``candidates`` thresholds ``probability`` reaches (null for a null probability): a
    balanced sum (``estimators.balanced_sum``), since planning a chain of ~100 additions never ends on the GPU."""
    return balanced_sum([(probability >= F.lit(t)).cast("int") for t in candidates])


def _cell_sums(df: DataFrame, part: str, candidates: list[float], boundaries: list[float], label: str,
               probability: str) -> dict:
    """Per value of ``part``: its rows, labelled rows, positives, the labels' and log-loss terms' sums, for every
    candidate threshold the rows predicted positive (``probability >= t``) and the true positives among them, and per
    decile its rows, labelled rows and sums of probabilities and labels. From one aggregation of few rows: each row
    falls in a cell (the number of candidates it reaches, ascending candidates: positive at candidate i where
    i < that number; its decile), at most parts x (candidates + 1) x 10 cells, summed here. One sum per candidate
    instead made an aggregation of hundreds of columns: three times the time at 300k rows on 2 cores."""
    p, y = F.col(probability), F.col(label)
    reached = reached_candidates(p, candidates)
    cells = (df.select(F.col(part).alias("part"), reached.alias("reached"), decile(p, boundaries).alias("decile"),
                       y.alias("y"), p.alias("p"), _log_loss_term(label, probability).alias("loss"))
             .groupBy("part", "reached", "decile")
             .agg(F.count(F.lit(1)).alias("n"), F.count("y").alias("labelled"),
                  F.sum((F.col("y") == F.lit(1.0)).cast("long")).alias("pos"), F.sum("y").alias("sy"),
                  F.sum("p").alias("sp"), F.sum("loss").alias("loss"), F.count("loss").alias("losses"))
             .collect())  # at most parts x (candidates + 1) x 10 rows
    found: dict = {}
    for c in cells:
        sums = found.setdefault(c["part"], {
            "rows": 0, "labelled": 0, "pos": 0, "sy": 0.0, "loss": 0.0, "losses": 0,
            "by_reached": [[0, 0] for _ in range(len(candidates) + 1)],
            "deciles": {d: {"n": 0, "labelled": 0, "sp": 0.0, "sy": 0.0} for d in range(1, 11)}})
        pos = int(c["pos"] or 0)
        sums["rows"] += c["n"]
        sums["labelled"] += c["labelled"]
        sums["pos"] += pos
        sums["sy"] += float(c["sy"] or 0.0)
        sums["loss"] += float(c["loss"] or 0.0)
        sums["losses"] += c["losses"]
        if c["reached"] is not None:   # a row without a probability is predicted at no threshold
            sums["by_reached"][c["reached"]][0] += c["n"]
            sums["by_reached"][c["reached"]][1] += pos
        d = sums["deciles"][c["decile"]]
        d["n"] += c["n"]
        d["labelled"] += c["labelled"]
        d["sp"] += float(c["sp"] or 0.0)
        d["sy"] += float(c["sy"] or 0.0)
    for sums in found.values():
        predicted, tp, at_or_above = [], [], [0, 0]
        for n, pos in reversed(sums.pop("by_reached")[1:]):   # candidate i counts the cells that reach past it
            at_or_above = [at_or_above[0] + n, at_or_above[1] + pos]
            predicted.append(at_or_above[0])
            tp.append(at_or_above[1])
        sums["predicted"], sums["tp"] = predicted[::-1], tp[::-1]
    return found

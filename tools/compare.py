"""Compare two pipeline runs (e.g. cpu and gpu profiles over the same input): every Delta table's row count
and per-column aggregates, the quarantine's contents, the model's metrics and coefficients, and stage times.

Exact for integers, booleans, strings, dates and timestamps (an order-free checksum: the sum of 64-bit hashes);
floats within a stated relative tolerance (GPU float parsing and summation order differ in the last bits).
    scripts/submit tools/compare.py --left runs/cmp/cpu --right runs/cmp/gpu --out runs/cmp/comparison.json
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType, NumericType, StringType, StructType

from jobs.lake import delta_io
from jobs.lake.contract import TABLES

FLOAT_RTOL = 1e-6        # per-column float sums/min/max
AUC_TOL = 0.005          # model ROC AUC, absolute
COEF_RTOL = 1e-3         # model coefficients, relative
PROBABILITY_ATOL = 1e-6  # each customer's predicted probability, absolute
SKIP_TABLES = ("runs",)  # holds timings and package versions, which differ between runs by design
# Columns ranked from a float, compared customer by customer instead of by an exact checksum: a probability that
# differs in the 7th digit moves a customer at a decile's edge into the next one (cpu vs gpu on an H200: 0.03% of
# customers, probabilities within 2.1e-7). prediction_agreement checks them: within one decile, every customer.
DERIVED_COLUMNS = {"predictions": ("decile",)}


def column_profile(df: DataFrame) -> dict[str, dict]:
    """One aggregation pass: per column, null count and an exact checksum, or float sum/min/max."""
    aggs, kinds = [], {}
    for f in df.schema.fields:
        c = F.col(f"`{f.name}`")
        aggs.append(F.sum(c.isNull().cast("long")).alias(f"{f.name}__nulls"))
        if isinstance(f.dataType, (DoubleType, FloatType)):
            kinds[f.name] = "float"
            aggs += [F.sum(c).alias(f"{f.name}__sum"), F.min(c).alias(f"{f.name}__min"),
                     F.max(c).alias(f"{f.name}__max")]
        elif f.dataType.typeName() in ("array", "map", "vector") or (
                isinstance(f.dataType, StructType) and not all(isinstance(g.dataType, StringType)
                                                               for g in f.dataType.fields)):
            kinds[f.name] = "skipped"   # xxhash64 takes no map; a float inside needs a tolerance
        else:
            kinds[f.name] = "exact"
            aggs.append(F.sum(F.xxhash64(c).cast("decimal(38,0)")).alias(f"{f.name}__checksum"))
    row = df.agg(F.count(F.lit(1)).alias("__rows"), *aggs).first().asDict()
    out = {"__rows": row["__rows"]}
    for name, kind in kinds.items():
        out[name] = {"kind": kind, **{k.split("__", 1)[1]: (str(v) if k.endswith("checksum") else v)
                                      for k, v in row.items() if k.startswith(f"{name}__")}}
    return out


def close(a, b, rtol: float) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)


def compare_profiles(left: dict, right: dict, derived: tuple[str, ...] = ()) -> list[str]:
    """Differences between two table profiles, in words; empty when they agree. ``derived`` columns are left to
    a row-by-row check (see DERIVED_COLUMNS)."""
    diffs = []
    if left["__rows"] != right["__rows"]:
        diffs.append(f"rows {left['__rows']} != {right['__rows']}")
    for col in sorted(set(left) | set(right)):
        if col == "__rows" or col in derived:
            continue
        a, b = left.get(col), right.get(col)
        if a is None or b is None:
            diffs.append(f"column {col} only on one side")
        elif a["kind"] == "float":
            for k in ("nulls", "sum", "min", "max"):
                if not close(a.get(k), b.get(k), FLOAT_RTOL if k != "nulls" else 0):
                    diffs.append(f"{col}.{k} {a.get(k)} != {b.get(k)}")
        elif a != b:
            diffs.append(f"{col} {a} != {b}")
    return diffs


def compare_models(left: dict, right: dict) -> list[str]:
    diffs = []
    la = left.get("metrics", {}).get("test", {}).get("roc_auc")
    ra = right.get("metrics", {}).get("test", {}).get("roc_auc")
    if la is None or ra is None or abs(la - ra) > AUC_TOL:
        diffs.append(f"test ROC AUC {la} vs {ra} (tolerance {AUC_TOL})")
    lc, rc = left.get("coefficients", {}), right.get("coefficients", {})
    if set(lc) != set(rc):
        diffs.append("coefficient names differ")
    for k in sorted(set(lc) & set(rc)):
        if not math.isclose(lc[k], rc[k], rel_tol=COEF_RTOL, abs_tol=1e-6):
            diffs.append(f"coefficient {k} {lc[k]:.6g} vs {rc[k]:.6g} (relative {COEF_RTOL})")
    return diffs


def prediction_agreement(spark: SparkSession, left_lake: str, right_lake: str,
                         run_ids: tuple[str | None, str | None]) -> dict:
    """Row by row, the two runs' predicted churn probabilities for the same customers (each side's own run
    slice): how many matched, the largest and mean absolute difference, the share in the same decile. Shown
    beside the coefficient check because correlated features can leave coefficients unidentifiable while the
    predictions agree; one aggregation, no collect of rows."""
    sides = []
    for lake, run_id, tag in ((left_lake, run_ids[0], "l"), (right_lake, run_ids[1], "r")):
        path = delta_io.table_path(lake, "predictions")
        if not delta_io.exists(spark, path):
            return {}
        df, _ = delta_io.read(spark, path)
        if run_id is not None:
            df = df.where(F.col("run_id") == run_id)
        sides.append(df.select("customer_id", F.col("churn_probability").alias(f"p_{tag}"),
                               F.col("decile").alias(f"d_{tag}")))
    joined = sides[0].join(sides[1], "customer_id", "full_outer")
    diff = F.abs(F.col("p_l") - F.col("p_r"))
    row = joined.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum((F.col("p_l").isNotNull() & F.col("p_r").isNotNull()).cast("long")).alias("matched"),
        F.max(diff).alias("max_abs_diff"), F.avg(diff).alias("mean_abs_diff"),
        F.avg((F.col("d_l") == F.col("d_r")).cast("double")).alias("same_decile_share"),
        F.max(F.abs(F.col("d_l") - F.col("d_r"))).alias("max_decile_step"),
    ).first()  # one row
    return {k: row[k] for k in ("rows", "matched", "max_abs_diff", "mean_abs_diff", "same_decile_share",
                                "max_decile_step")}


def compare_predictions(agreement: dict) -> list[str]:
    """Every customer predicted on both sides, each probability within PROBABILITY_ATOL, each decile within one."""
    if not agreement:
        return []
    diffs = []
    if not agreement["rows"] == agreement["matched"] > 0:
        diffs.append(f"predictions for {agreement['matched']} of {agreement['rows']} customers on both sides")
    if agreement["max_abs_diff"] is None or agreement["max_abs_diff"] > PROBABILITY_ATOL:
        diffs.append(f"probability differs by up to {agreement['max_abs_diff']} (tolerance {PROBABILITY_ATOL})")
    if agreement["max_decile_step"] is None or agreement["max_decile_step"] > 1:
        diffs.append(f"a customer's decile differs by {agreement['max_decile_step']} (at most 1 at a decile's edge)")
    return diffs


def run(spark: SparkSession, left_out: str, right_out: str) -> dict:
    result = {"tables": {}, "model": {}, "timings": {}}
    for name in TABLES:
        if name in SKIP_TABLES:
            continue
        lp, rp = (delta_io.table_path(f"{o}/lake", name) for o in (left_out, right_out))
        if not delta_io.exists(spark, lp) and not delta_io.exists(spark, rp):
            continue
        try:
            (ldf, _), (rdf, _) = delta_io.read(spark, lp), delta_io.read(spark, rp)
        except FileNotFoundError as e:
            result["tables"][name] = {"parity": False, "diffs": [str(e)]}
            continue
        lprof, rprof = column_profile(ldf), column_profile(rdf)
        diffs = compare_profiles(lprof, rprof, DERIVED_COLUMNS.get(name, ()))
        result["tables"][name] = {"parity": not diffs, "rows": [lprof["__rows"], rprof["__rows"]], "diffs": diffs}
    reports = [_read(Path(o) / "report" / "report.json") for o in (left_out, right_out)]
    lm, rm = (r.get("model", {}) for r in reports)
    agreement = prediction_agreement(spark, f"{left_out}/lake", f"{right_out}/lake",
                                     (lm.get("run_id"), rm.get("run_id")))
    model_diffs = compare_models(lm, rm) + compare_predictions(agreement)
    result["model"] = {"parity": not model_diffs, "diffs": model_diffs,
                       "roc_auc": [m.get("metrics", {}).get("test", {}).get("roc_auc") for m in (lm, rm)],
                       "predictions": agreement}
    lt, rt = (r.get("timings", {}) for r in reports)
    result["timings"] = {s: {"left_s": lt[s], "right_s": rt.get(s),
                             "speedup": round(lt[s] / rt[s], 2) if rt.get(s) else None} for s in lt}
    result["parity"] = all(t["parity"] for t in result["tables"].values()) and result["model"]["parity"]
    return result


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str]) -> int:
    from jobs.lake.session import get_spark

    p = argparse.ArgumentParser(prog="compare")
    p.add_argument("--left", required=True)
    p.add_argument("--right", required=True)
    p.add_argument("--out", required=True, help="JSON file for the comparison")
    args = p.parse_args(argv)
    result = run(get_spark("compare"), args.left, args.right)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({"parity": result["parity"]}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

"""Where the Spark -> GPU hand-off of model training spends its time, and what cuts it (issue 7).

Fits the same logistic regression on the gold table's training rows several ways in one Spark application
(gpu profile) and times each fit, after the input is cached and counted so only the hand-off and the fit
are timed:
- mllib:            Spark MLlib on the executors' CPU cores (VectorAssembler + LogisticRegression);
- srml_cols_f64:    spark-rapids-ml, the double feature columns as they are (featuresCols);
- srml_cols_f32:    the same columns cast to float in Spark first (half the bytes through Arrow);
- srml_array_f32:   one array<float> column (one Arrow buffer instead of one per feature);
- srml_array_f32_sqloff: the same with the RAPIDS SQL plugin switched off for that query;
- srml_cols_f64_warm: srml_cols_f64 again (the first spark-rapids-ml fit also pays the Python worker's cuML
                    import and CUDA context: the difference is that one-off cost);
- gpu_probe:        the train stage's GPU check (``ml.check_gpu_available``): one Python task importing what the
                    fit imports and creating the CUDA context, leaving that worker warm for the fits after it;
- mllib_grid3, srml_grid3: the train stage's own call, one ``fitMultiple`` over its regParam grid; the model
                    kept is the grid's most regularised one (the one the train stage's rule picks on this data);
- srml_grid3_warm:  srml_grid3 again; srml_grid3_tol1e-6: the same with cuML's tolerance at 1e-6 (cuML's ``tol``
                    bounds the gradient norm relative to the loss, MLlib's the relative change of the loss);
- srml_grid3_f64:   the grid with spark-rapids-ml's ``float32_inputs=False`` (cuML in float64; it casts to float32
                    by default), for coefficient parity with MLlib (the other srml variants are float32 whatever
                    the profile's ``spark.churn.ml.float32Inputs``);
- cuml_alone:       cuML on data already on the GPU (the floor: no Spark at all).
Each variant's result: seconds, test ROC AUC, largest relative coefficient difference to MLlib.
    scripts/submit --profile gpu tools/bench_handoff.py --lake DIR --out results.json [--replicate K] [--variants a,b]
"""
from __future__ import annotations

import argparse
import json
import time
import traceback

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.lake import contract, delta_io
from jobs.lake.session import session_conf
from jobs.ml import estimators as ml
from jobs.ml import evaluate
from jobs.ml.estimators import FittedLogisticRegression
from jobs.ml.split import with_split
from jobs.stages import train

TRAIN_DEFAULTS = {p.name: p.default for p in train.PARAMS}
PARAMS = dict(regParam=0.0, elasticNetParam=0.0, maxIter=TRAIN_DEFAULTS["max_iter"], tol=TRAIN_DEFAULTS["tol"],
              standardization=True)


def training_rows(spark: SparkSession, lake: str, replicate: int) -> tuple[DataFrame, DataFrame]:
    gold, _ = delta_io.read(spark, delta_io.table_path(lake, "gold_features"))
    split = gold.transform(with_split)
    train_df = split.where(F.col("split") == "train").select(contract.LABEL, *contract.FEATURES)
    if replicate > 1:  # the same optimum on K times the rows: a bigger hand-off, like a bigger customer base
        train_df = train_df.withColumn("_k", F.explode(F.sequence(F.lit(1), F.lit(replicate)))).drop("_k")
    test_df = split.where(F.col("split") == "test").select(contract.ID, contract.LABEL, *contract.FEATURES)
    return train_df, test_df


def timed_fit(name: str, make_input, fit) -> dict:
    df = make_input().cache()
    rows = df.count()  # materialise: the clock below sees only the hand-off and the fit
    t = time.perf_counter()
    model = fit(df)
    seconds = time.perf_counter() - t
    df.unpersist()
    return {"variant": name, "rows": rows, "seconds": round(seconds, 2), "model": model}


def run(spark: SparkSession, lake: str, replicate: int = 1, num_workers: int | None = None,
        only: set[str] | None = None) -> dict:
    cols = list(contract.FEATURES)
    train_df, test_df = training_rows(spark, lake, replicate)
    results = []

    def mllib(df):
        return _trainer(spark, cols, use_rapids=False).fit(df)

    def srml(features_as: str):
        def fit(df):
            from spark_rapids_ml.classification import LogisticRegression

            kw = {"featuresCols": cols} if features_as == "cols" else {"featuresCol": "features"}
            if num_workers:
                kw["num_workers"] = num_workers
            return FittedLogisticRegression.from_model(LogisticRegression(**kw, **PARAMS).fit(df), cols,
                                                       "spark_rapids_ml")
        return fit

    def grid(use_rapids: bool, **overrides):
        if use_rapids:  # float32 unless the variant says otherwise, whatever the profile sets
            overrides = {"float32_inputs": True, **overrides}

        def fit(df):
            trainer = _trainer(spark, cols, use_rapids, **overrides)
            regs = sorted(TRAIN_DEFAULTS["reg_params"])
            return trainer.fit_grid(df, [{"regParam": r} for r in regs])[-1]
        return fit

    f32 = lambda: train_df.select(F.col(contract.LABEL), *[F.col(c).cast("float").alias(c) for c in cols])
    arr = lambda: train_df.select(F.col(contract.LABEL), F.array(*cols).cast("array<float>").alias("features"))
    variants = [
        ("mllib", lambda: train_df, mllib),
        ("srml_cols_f64", lambda: train_df, srml("cols")),
        ("srml_cols_f32", f32, srml("cols")),
        ("srml_array_f32", arr, srml("array")),
        ("srml_array_f32_sqloff", arr, srml("array")),
        ("srml_cols_f64_warm", lambda: train_df, srml("cols")),
        ("mllib_grid3", lambda: train_df, grid(False)),
        ("srml_grid3", lambda: train_df, grid(True)),
        ("srml_grid3_warm", lambda: train_df, grid(True)),
        ("srml_grid3_tol1e-6", lambda: train_df, grid(True, tol=1e-6)),
        ("srml_grid3_f64", lambda: train_df, grid(True, float32_inputs=False)),
    ]
    if not only or "gpu_probe" in only:  # before every spark-rapids-ml variant: the fits after it find a warm worker
        t = time.perf_counter()
        try:
            ml.check_gpu_available(spark)
            results.append({"variant": "gpu_probe", "seconds": round(time.perf_counter() - t, 2)})
        except Exception as e:
            results.append({"variant": "gpu_probe", "error": _error(e)})
    for name, make_input, fit in variants:
        if only and name not in only:
            continue
        if name.endswith("_sqloff"):
            with session_conf(spark, {"spark.rapids.sql.enabled": "false"}):
                results.append(_attempt(name, make_input, fit))
        else:
            results.append(_attempt(name, make_input, fit))
    if not only or "cuml_alone" in only:
        results.append(_cuml_alone(train_df, cols))

    for r in results:
        model = r.pop("model", None)
        if model is None:
            continue
        scored = test_df.withColumn(evaluate.PROBABILITY, model.probability())
        r["test_roc_auc"] = round(evaluate.roc_auc(scored), 5)
        r["coefficients"] = model.coefficients_by_name()
    for r in results:  # each against MLlib doing the same work (one fit, or the grid)
        ref = next((b for b in results if b["variant"] == _mllib_peer(r["variant"])), None)
        if ref is not None and "coefficients" in ref and "coefficients" in r:
            r["max_rel_coef_diff_vs_mllib"] = max(
                abs(r["coefficients"][k] - v) / max(abs(v), 1e-3) for k, v in ref["coefficients"].items())
        base = ref.get("seconds") if ref else None
        if base and r.get("seconds"):
            r["speedup_vs_mllib"] = round(base / r["seconds"], 2)
    return {"replicate": replicate, "params": PARAMS, "variants": results}


def _mllib_peer(variant: str) -> str:
    return "mllib_grid3" if "grid3" in variant else "mllib"


def _trainer(spark: SparkSession, cols: list[str], use_rapids: bool, **overrides):
    """The train stage's estimator (jobs.ml.estimators) for either back end, whatever the session's profile says."""
    impl = ml.SPARK_RAPIDS_ML if use_rapids else ml.PYSPARK_ML
    with session_conf(spark, {ml.IMPLEMENTATION_KEY: impl}):
        return ml.logistic_regression(spark, cols, **{**PARAMS, **overrides}, fitIntercept=True,
                                      labelCol=contract.LABEL)


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e)[:2000]}"


def _attempt(name, make_input, fit) -> dict:
    try:
        return timed_fit(name, make_input, fit)
    except Exception as e:  # one variant failing must not cost the others' figures
        return {"variant": name, "error": _error(e),
                "trace": traceback.format_exc()[-3000:]}


def _cuml_alone(train_df: DataFrame, cols: list[str]) -> dict:
    try:
        import cupy as cp
        from cuml.linear_model import LogisticRegression as CuLR

        pdf = train_df.select(contract.LABEL, *[F.col(c).cast("float") for c in cols]).toPandas()
        X = cp.asarray(pdf[cols].to_numpy())
        y = cp.asarray(pdf[contract.LABEL].to_numpy().astype("float32"))
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        CuLR(C=1e12, max_iter=PARAMS["maxIter"], tol=PARAMS["tol"]).fit(X, y)  # C huge: unregularised, as PARAMS
        cp.cuda.Device().synchronize()
        return {"variant": "cuml_alone_on_gpu_data", "rows": len(pdf), "seconds": round(time.perf_counter() - t, 3)}
    except Exception as e:
        return {"variant": "cuml_alone_on_gpu_data", "error": f"{type(e).__name__}: {str(e)[:500]}"}


def main(argv: list[str]) -> int:
    from jobs.lake.session import get_spark

    p = argparse.ArgumentParser(prog="bench-handoff")
    p.add_argument("--lake", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--replicate", type=int, default=1)
    p.add_argument("--num-workers", type=int)
    p.add_argument("--variants", help="comma-separated subset of the variants (default: all)")
    args = p.parse_args(argv)
    only = set(args.variants.split(",")) if args.variants else None
    result = run(get_spark("bench-handoff"), args.lake, args.replicate, args.num_workers, only)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    for r in result["variants"]:
        print(json.dumps({k: v for k, v in r.items() if k not in ("coefficients", "trace")}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

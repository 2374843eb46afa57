"""The run report: Markdown and a self-contained HTML page (plots inlined) in <out>/report/, plus the PNG
plots and report.json holding every number shown, read back from the Delta tables and stage records.

What it shows: time and rows per second per stage; the data-quality table (per defect kind: injected,
caught, where it went) and the row accounting; Delta table versions; the model's metrics beside the oracle
AUC; ROC, precision-recall, lift and coefficient plots; what would not run on the GPU (gpu/gpu-explain).
"""
from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.stage import Param, Stage, StageRecord, load_stage_record
from jobs.lake import contract, delta_io, eventlog
from jobs.lake.contract import DEFECT_FATE, TABLES
from jobs.ml import evaluate
from jobs.ml.split import with_split

BINS = 1000  # score histogram resolution for the ROC / PR curves (an aggregate, never the rows)


def run(spark: SparkSession, out: str, data: str | None) -> StageRecord:
    lake = os.path.join(out, "lake")
    data = data or os.path.join(out, "data")
    report_dir = Path(out) / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    facts = gather(spark, lake, data)
    facts["gpu"] = _read_json(report_dir / "gpu-fallbacks.json")
    facts["work"] = stage_work(spark, facts["timings"], facts["stages"])
    facts["spark_stages"] = longest_spark_stages(spark, facts["timings"])
    plots = make_plots(spark, lake, facts, report_dir)
    (report_dir / "report.json").write_text(json.dumps(facts, indent=2, sort_keys=True, default=str))
    md = render_markdown(facts, plots)
    (report_dir / "report.md").write_text(md)
    (report_dir / "report.html").write_text(render_html(md, report_dir, plots))
    return StageRecord(STAGE.name, extra={"report": str(report_dir / "report.html")})


STAGE = Stage("report", "the run report (Markdown, HTML with plots, JSON) from the tables and stage records", run,
              params=(Param("out", "the pipeline's output folder (holds lake/, models/)"),
                      Param("data", "the CSV folder with manifest.json (default <out>/data)", default=None)),
              describe=lambda r: r.extra["report"])


# ---------------------------------------------------------------------------------------------------------
# Facts: everything numeric, from the tables and stage records
# ---------------------------------------------------------------------------------------------------------
def gather(spark: SparkSession, lake: str, data: str | None) -> dict:
    stages = {s: _stage_or_none(lake, s) for s in ("generate", "ingest", "clean", "features", "train", "score")}
    timings = {s: r["seconds"] for s, r in stages.items() if r is not None}
    tables = {}
    for name in TABLES:
        path = delta_io.table_path(lake, name)
        if delta_io.exists(spark, path):
            v = delta_io.version(spark, path)
            # A plain overwrite's rows from its files' statistics (no Spark job); any other version read and counted.
            rows = delta_io.overwrite_rows(spark, path, v)
            if rows is None:
                rows = delta_io.read(spark, path, v)[0].count()
            tables[name] = {"version": v, "rows": rows, "path": path}
    quarantine = {}
    if "quarantine" in tables:
        q, _ = delta_io.read(spark, delta_io.table_path(lake, "quarantine"), tables["quarantine"]["version"])
        for r in q.groupBy("dataset", "reason").count().collect():  # a handful of (dataset, reason) groups
            quarantine.setdefault(r["dataset"], {})[r["reason"]] = r["count"]
    manifest = _read_json(Path(data) / "manifest.json") if data else None
    train = stages.get("train") or {}
    model_path = train.get("extra", {}).get("model_path") if train else None
    run_json = _read_json(Path(model_path).parent / "run.json") if model_path else None
    return {
        "spark": {"version": spark.version, "master": spark.sparkContext.master,
                  "cores": spark.sparkContext.defaultParallelism,
                  "plugins": spark.conf.get("spark.plugins", ""),
                  "rapids_mode": spark.conf.get("spark.rapids.sql.mode", ""),
                  "ml_implementation": spark.conf.get("spark.churn.ml.implementation", "pyspark.ml")},
        "timings": timings,
        "stages": stages,
        "tables": tables,
        "quarantine": quarantine,
        "quality": quality_table(manifest, quarantine, stages.get("clean")) if manifest else [],
        "accounting": accounting(manifest, tables, quarantine, stages.get("ingest"), stages.get("clean")),
        "manifest_churn": (manifest or {}).get("churn", {}),
        "model": run_json or {},
    }


def stage_work(spark: SparkSession, timings: dict[str, float], records: dict[str, dict | None]) -> dict[str, dict]:
    """Each earlier stage's Spark work from this application's event log (``eventlog.stage_work``; the seconds
    between its first and last job when none of its tasks ran, ``eventlog.idle_time``; under a GPU profile also
    its GPU operators' time, ``eventlog.gpu_operator_time``) and, from its record, the driver JVM's compilers' time
    during it (``runner.driver_jit_seconds``), for the stages with a record; empty when the application keeps no
    local event log (scripts/pipeline always keeps one)."""
    log = eventlog.running_log(spark)
    if log is None:
        return {}
    work, idle, gpu = eventlog.stage_work(log), eventlog.idle_time(log), eventlog.gpu_operator_time(log)
    return {stage: {"seconds": secs, **work[stage], "idle_s": idle.get(stage), **gpu.get(stage, {}),
                    "driver_jit_s": ((records.get(stage) or {}).get("extra") or {}).get("driver_jit_s")}
            for stage, secs in timings.items() if stage in work}


def longest_spark_stages(spark: SparkSession, timings: dict[str, float], top: int = 10) -> list[dict]:
    """The run's ``top`` longest Spark stages within the pipeline's stages (``eventlog.longest_stages``); empty
    without a local event log."""
    log = eventlog.running_log(spark)
    if log is None:
        return []
    return [st for st in eventlog.longest_stages(log, top=None) if st["group"] in timings][:top]


def duplicates_removed(clean: dict | None) -> dict[str, int]:
    totals = (clean or {}).get("counts", {}).get("totals", {})
    return {ds: int(t.get("duplicates_removed", 0)) for ds, t in totals.items()}


def quality_table(manifest: dict, quarantine: dict, clean: dict | None) -> list[dict]:
    """Per dataset and defect kind: injected (manifest), caught (quarantine / dedup counts), where it went."""
    dup_removed = duplicates_removed(clean)
    rows = []
    for ds, info in manifest["datasets"].items():
        for kind, injected in info["defects"].items():
            fate, reason = DEFECT_FATE[kind]
            if fate == contract.QUARANTINE:
                caught, where = quarantine.get(ds, {}).get(reason, 0), f"quarantine ({reason})"
            elif fate == contract.DEDUPLICATED:
                caught, where = dup_removed.get(ds), "removed as duplicate"
            else:
                caught, where = None, "kept, normalised in silver"
            rows.append({"dataset": ds, "defect": kind, "injected": injected, "caught": caught, "went_to": where,
                         "ok": caught is None or caught == injected})
        cascade = info.get("expected", {}).get("quarantined", {}).get(contract.CASCADE_REASON)
        if cascade is not None:
            caught = quarantine.get(ds, {}).get(contract.CASCADE_REASON, 0)
            rows.append({"dataset": ds, "defect": "(events of rejected customers)", "injected": cascade,
                         "caught": caught, "went_to": f"quarantine ({contract.CASCADE_REASON})",
                         "ok": caught == cascade})
    return rows


def accounting(manifest: dict | None, tables: dict, quarantine: dict, ingest: dict | None,
               clean: dict | None) -> dict:
    """Per dataset: the input's bytes and physical lines (counted apart from the CSV parser, and reconciled with the
    records by ingest), records in (ingest's count per file, each file's records numbered 0..n-1 with none
    missing), kept in silver, quarantined, removed as duplicates, and whether they balance; beside the records in,
    the generator's own count when the input came with its manifest (it must agree)."""
    if ingest is None:
        return {}
    dup_removed = duplicates_removed(clean)
    out = {}
    for ds, totals in ingest["counts"]["totals"].items():
        records_in = totals["records"]
        generated = manifest["datasets"][ds]["records"] if manifest else None
        kept = tables.get(f"silver_{ds}", {}).get("rows", 0)
        quarantined = sum(quarantine.get(ds, {}).values())
        dups = dup_removed.get(ds, 0) or 0
        physical = ingest["counts"].get("input", {}).get(ds, {})
        out[ds] = {"files": len(ingest["counts"]["files"][ds]), "bytes": physical.get("bytes"),
                   "lines": physical.get("lines"), "records_in": records_in, "generated": generated,
                   "kept": kept, "quarantined": quarantined, "duplicates_removed": dups,
                   "balanced": records_in == kept + quarantined + dups and generated in (None, records_in)}
    return out


# ---------------------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------------------
def score_histogram(scored: DataFrame) -> list[tuple[int, int, int]]:
    """(bin, positives, negatives) over BINS probability bins: the curves need this aggregate, not the rows."""
    agg = evaluate.score_bins(scored, BINS, contract.LABEL, "churn_probability")
    return sorted((int(r["bin"]), int(r["pos"]), int(r["neg"])) for r in agg.collect())  # BINS rows at most


def curves(hist: list[tuple[int, int, int]]) -> dict:
    """ROC and precision-recall points from the histogram, sweeping the threshold from high to low."""
    P = sum(h[1] for h in hist) or 1
    N = sum(h[2] for h in hist) or 1
    tp = fp = 0
    roc, pr = [(0.0, 0.0)], []
    for _, pos, neg in sorted(hist, reverse=True):
        tp += pos
        fp += neg
        roc.append((fp / N, tp / P))
        pr.append((tp / P, tp / max(tp + fp, 1)))
    return {"roc": roc, "pr": pr, "base_rate": P / (P + N)}


def make_plots(spark: SparkSession, lake: str, facts: dict, report_dir: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: dict[str, str] = {}
    model = facts.get("model") or {}
    if "predictions" in facts["tables"] and "gold_features" in facts["tables"]:
        preds, _ = delta_io.read(spark, facts["tables"]["predictions"]["path"])
        gold, _ = delta_io.read(spark, facts["tables"]["gold_features"]["path"])
        run_id = model.get("run_id")
        if run_id:
            preds = preds.where(F.col("run_id") == run_id)
        scored = preds.join(gold.select(contract.ID, contract.LABEL), contract.ID)
        scored = _test_split(scored)
        c = curves(score_histogram(scored))
        fig, ax = plt.subplots(figsize=(4.5, 4))
        ax.plot(*zip(*c["roc"]), label="model")
        ax.plot([0, 1], [0, 1], "--", color="grey", label="chance")
        ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (test split)")
        ax.legend(loc="lower right")
        plots["roc"] = _save(fig, report_dir / "roc.png")
        fig, ax = plt.subplots(figsize=(4.5, 4))
        ax.plot(*zip(*c["pr"]), label="model")
        ax.axhline(c["base_rate"], ls="--", color="grey", label="base rate")
        ax.set(xlabel="recall", ylabel="precision", title="Precision-recall (test split)", ylim=(0, 1))
        ax.legend(loc="upper right")
        plots["pr"] = _save(fig, report_dir / "pr.png")
        lift = (scored.groupBy("decile").agg(F.avg(contract.LABEL).alias("rate"), F.count("*").alias("n"))
                .orderBy("decile").collect())  # ten rows
        if lift:
            base = c["base_rate"] or 1
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.bar([r["decile"] for r in lift], [r["rate"] / base for r in lift], color="#4C72B0")
            ax.axhline(1.0, ls="--", color="grey")
            ax.set(xlabel="risk decile (10 = highest)", ylabel="lift over base rate", title="Lift by decile")
            plots["lift"] = _save(fig, report_dir / "lift.png")
            facts["lift_by_decile"] = [{"decile": r["decile"], "rate": r["rate"], "n": r["n"]} for r in lift]
    work = facts.get("work") or {}
    if work:
        names = list(work)[::-1]
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 0.35 * len(names) + 1.4), sharey=True)
        left.barh(names, [work[n]["seconds"] for n in names], color="#BBBBBB", label="wall")
        cores = facts["spark"]["cores"] or 1
        left.barh(names, [work[n]["task_s"] / cores for n in names], height=0.4, color="#4C72B0",
                  label=f"task time / {cores} cores")
        left.barh(names, [work[n].get("idle_s") or 0 for n in names], height=0.15, color="#C44E52",
                  label="no task running")
        left.set(xlabel="seconds", title="Stage time")
        left.legend(loc="lower right", fontsize=7)
        mb = 1 << 20
        right.barh(names, [work[n]["shuffle_write_bytes"] / mb for n in names], color="#DD8452", label="shuffle written")
        right.barh(names, [work[n]["spill_bytes"] / mb for n in names], height=0.4, color="#C44E52", label="spilled")
        right.set(xlabel="MiB", title="Shuffle and spill")
        right.legend(loc="lower right", fontsize=7)
        plots["work"] = _save(fig, report_dir / "work.png")
    coefs = model.get("coefficients") or {}
    if coefs:
        items = sorted(coefs.items(), key=lambda kv: abs(kv[1]), reverse=True)[:25][::-1]
        fig, ax = plt.subplots(figsize=(6, 0.28 * len(items) + 1))
        ax.barh([k for k, _ in items], [v for _, v in items],
                color=["#C44E52" if v > 0 else "#4C72B0" for _, v in items])
        ax.set(title="Coefficients per feature unit (red: raises risk)")
        ax.tick_params(axis="y", labelsize=7)
        plots["coefficients"] = _save(fig, report_dir / "coefficients.png")
    return plots


def _test_split(scored: DataFrame) -> DataFrame:
    return scored.transform(with_split).where(F.col("split") == "test")


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


# ---------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------
def render_markdown(f: dict, plots: dict[str, str]) -> str:
    lines = ["# Churn pipeline report", ""]
    s = f["spark"]
    gpu_sql = "RAPIDS " + (s["rapids_mode"] or "executeongpu") if s["plugins"] else "off"
    lines += [f"Spark {s['version']} on `{s['master']}`; RAPIDS SQL plugin: {gpu_sql}; "
              f"model back end: {s['ml_implementation']}.", ""]
    lines += ["## Stages", "", "| stage | seconds | rows | rows/s |", "| --- | ---: | ---: | ---: |"]
    for stage, secs in f["timings"].items():
        rows = _stage_rows(f, stage)
        rate = f"{rows / secs:,.0f}" if rows and secs else ""
        lines.append(f"| {stage} | {secs:.1f} | {rows:,} | {rate} |")
    if f["quality"]:
        lines += ["", "## Data quality", "",
                  "Each injected defect (generator manifest) against what the pipeline caught and where it went.", "",
                  "| dataset | defect | injected | caught | went to | |", "| --- | --- | ---: | ---: | --- | --- |"]
        for r in f["quality"]:
            caught = "" if r["caught"] is None else f"{r['caught']:,}"
            lines.append(f"| {r['dataset']} | {r['defect']} | {r['injected']:,} | {caught} | {r['went_to']} | "
                         f"{'ok' if r['ok'] else '**MISMATCH**'} |")

    if f["accounting"]:
        lines += ["", "## Row accounting", "",
                  "Every input record: records in (counted per file by ingest, whose every physical line is the "
                  "header, a line of a record or a blank line; the generator's count beside it when the input has "
                  "its manifest) = kept + quarantined + duplicates removed.", "",
                  "| dataset | files | bytes | lines | records in | generated | kept (silver) | quarantined | "
                  "duplicates removed | balanced |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for ds, a in f["accounting"].items():
            generated = "" if a["generated"] is None else f"{a['generated']:,}"
            size = "" if a["bytes"] is None else f"{a['bytes']:,}"
            count = "" if a["lines"] is None else f"{a['lines']:,}"
            lines.append(f"| {ds} | {a['files']:,} | {size} | {count} | {a['records_in']:,} | {generated} | {a['kept']:,} | "
                         f"{a['quarantined']:,} | {a['duplicates_removed']:,} | "
                         f"{'yes' if a['balanced'] else '**NO**'} |")
    if f.get("work"):
        mib = lambda b: f"{b / (1 << 20):,.1f}"  # noqa: E731
        lines += ["", "## Where the time goes", "",
                  "Each stage's Spark work, summed over its tasks (Spark's event log): task time beside the stage's "
                  "wall time shows how busy the cores were, and task CPU the part of it the tasks' threads ran on a "
                  "CPU (the rest they waited: for the GPU, shuffle blocks, files or a free core); rows and bytes in "
                  "are what its tasks read from files, tables and kept blocks (clean's materialised frames; each "
                  "training iteration reads its cached data again), out what it wrote; shuffle and spill in MiB. "
                  "Driver JIT is the time the driver JVM's compilers spent during the stage, beside its tasks (under "
                  "a local master the driver runs every task, so it is the run's whole compilation: a fresh "
                  "application pays it once, most in its first stages; on a cluster the executors compile too, "
                  "unseen here). No task is the time "
                  "from the stage's first Spark job to its last when none of its tasks ran: the driver planning "
                  "queries, committing to Delta, collecting results.", "",
                  "| stage | seconds | jobs | tasks | task s | task CPU s | GC s | driver JIT s | no task s | rows in | "
                  "rows out | MiB in | MiB out | shuffle read | shuffle written | spilled |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
                  "---: | ---: |"]
        for stage, w in f["work"].items():
            jit = "" if w.get("driver_jit_s") is None else f"{w['driver_jit_s']:.1f}"
            idle = "" if w.get("idle_s") is None else f"{w['idle_s']:.1f}"
            lines.append(f"| {stage} | {w['seconds']:.1f} | {w['jobs']:,} | {w['tasks']:,} | {w['task_s']:.1f} | "
                         f"{w['cpu_s']:.1f} | {w['gc_s']:.1f} | {jit} | {idle} | {w['input_rows']:,} | "
                         f"{w['output_rows']:,} | {mib(w['input_bytes'])} | {mib(w['output_bytes'])} | "
                         f"{mib(w['shuffle_read_bytes'])} | "
                         f"{mib(w['shuffle_write_bytes'])} | {mib(w['spill_bytes'])} |")
        if "work" in plots:
            lines += ["", f"![Where the time goes]({plots['work']})"]
        on_gpu = {stage: w for stage, w in f["work"].items() if w.get("gpu_op_s")}
        if on_gpu:
            lines += ["", "GPU operators' time (the RAPIDS Accelerator's op time, summed over tasks: tasks sharing the "
                      "GPU add up to more than the wall time); moves are the row/column and host/device transitions "
                      "around what stays on the CPU.", "",
                      "| stage | GPU op s | of which moves | largest operators (s) |", "| --- | ---: | ---: | --- |"]
            for stage, w in on_gpu.items():
                ops = ", ".join(f"{op} {s:.1f}" for op, s in w["gpu_operators"].items())
                lines.append(f"| {stage} | {w['gpu_op_s']:.1f} | {w['gpu_transition_s']:.1f} | {ops} |")
    if f.get("spark_stages"):
        on_gpu = any(st["gpu_operators"] for st in f["spark_stages"])
        lines += ["", "The longest Spark stages (submission to completion; a stage's tasks may have waited for cores "
                  "behind another's running beside it)" + (", with their largest GPU operators" if on_gpu else "")
                  + ":", "",
                  "| stage | Spark stage | seconds | tasks | task s | task CPU s | shuffle written MiB | "
                  + ("GPU operators (op s) | " if on_gpu else "") + "Spark's name |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | " + ("--- | " if on_gpu else "") + "--- |"]
        for st in f["spark_stages"]:
            ops = ", ".join(f"{op} {s:.1f}" for op, s in st["gpu_operators"].items())
            lines.append(f"| {st['group']} | {st['stage_id']} | {st['seconds']:.1f} | {st['tasks']:,} | "
                         f"{st['task_s']:.1f} | {st['cpu_s']:.1f} | "
                         f"{st['shuffle_write_bytes'] / (1 << 20):,.1f} | "
                         + (f"{ops} | " if on_gpu else "") + f"{st['name'][:60]} |")
    lines += ["", "## Delta tables", "", "| table | version | rows | path |", "| --- | ---: | ---: | --- |"]
    for name, t in f["tables"].items():
        lines.append(f"| {name} | {t['version']} | {t['rows']:,} | `{t['path']}` |")
    m = f.get("model") or {}
    if m:
        metrics = m.get("metrics", {}).get("test", m.get("metrics", {}))
        oracle = f["manifest_churn"].get("oracle_auc") or m.get("oracle_auc")
        lines += ["", "## Model", "", f"Run `{m.get('run_id')}`, {m.get('implementation', '')}; "
                  f"threshold {m.get('threshold', '')} (chosen on validation)." , "",
                  "| metric (test split) | value |", "| --- | ---: |"]
        for k, v in metrics.items():
            if isinstance(v, (int, float)):
                lines.append(f"| {k} | {v:.4f} |")
        if oracle:
            lines.append(f"| oracle ROC AUC (true churn probabilities) | {oracle:.4f} |")
        lines += candidate_rows(m)
        for key, title in (("roc", "ROC"), ("pr", "Precision-recall"), ("lift", "Lift"),
                           ("coefficients", "Coefficients")):
            if key in plots:
                lines += ["", f"![{title}]({plots[key]})"]
    gpu = f.get("gpu") or {}
    if gpu.get("collected"):
        lines += ["", "## What would not run on the GPU", ""]
        for stage, items in gpu["stages"].items():
            if not items:
                lines.append(f"- {stage}: everything")
            for it in items:
                lines.append(f"- {stage}: {it['kind']} `{it['name']}`: {it['reason']}")
    lines += ["", "## Files", "", "Spark event logs are in `eventlog/` beside this folder: "
              "`.venv/bin/spark-class org.apache.spark.deploy.history.HistoryServer` with "
              "`spark.history.fs.logDirectory` set to it opens the run in Spark's history UI.", ""]
    return "\n".join(lines)


def candidate_rows(run: dict) -> list[str]:
    """The tuning grid's models as a table: validation ROC AUC, the solver's iterations (and whether they stopped at
    max_iter rather than converging), and which one train chose (docs/model.md)."""
    tuning = run.get("tuning") or []
    if not tuning:
        return []
    chosen = (run.get("params") or {}).get("chosen") or {}
    lines = ["", "| candidate (validation split) | validation ROC AUC | iterations | chosen |",
             "| --- | ---: | ---: | --- |"]
    for c in tuning:
        iterations = "" if c.get("iterations") is None else (
            f"{c['iterations']}" + (" (max_iter reached)" if c.get("max_iter_reached") else ""))
        pick = all(c.get(k) == chosen.get(k) for k in ("regParam", "elasticNetParam"))
        lines.append(f"| regParam {c['regParam']}, elasticNetParam {c['elasticNetParam']} | "
                     f"{c['validation_roc_auc']:.4f} | {iterations} | {'yes' if pick else ''} |")
    return lines


def render_html(md: str, report_dir: Path, plots: dict[str, str]) -> str:
    """A self-contained page: the Markdown's tables and text as HTML, the PNGs inlined as data URIs."""
    body, table = [], []

    def flush_table():
        if not table:
            return
        rows = [r.strip().strip("|").split("|") for r in table if not set(r.replace("|", "").strip()) <= set("-: ")]
        head, *rest = rows
        body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rest)
                    + "</table>")
        table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("!["):
            name = line[line.index("(") + 1:-1]
            data = base64.b64encode((report_dir / name).read_bytes()).decode()
            body.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("- "):
            body.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    flush_table()
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em}"
             "td{text-align:right}td:first-child,td:nth-child(2){text-align:left}img{max-width:48%;margin:.5em}")
    return f"<!doctype html><meta charset=utf-8><title>Churn pipeline report</title><style>{style}</style>" \
           + "\n".join(body)


def _inline(text: str) -> str:
    import re

    t = html.escape(text.strip())
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def _stage_rows(f: dict, stage: str) -> int:
    """Rows a stage took in: CSV records for generate/ingest, bronze rows for clean, customers after that."""
    counts = (f["stages"].get(stage) or {}).get("counts", {})
    totals = counts.get("totals", {})
    if stage in ("generate", "ingest"):
        return sum(a["records_in"] for a in f["accounting"].values()) if f["accounting"] else 0
    if stage == "clean":
        return sum(t.get("bronze", 0) for t in totals.values())
    if stage == "features":
        return int(counts.get("customers", 0))
    if stage == "train":
        return sum(int(counts.get(k, 0)) for k in ("train", "validation", "test"))
    if stage == "score":
        return int(counts.get("predictions", 0))
    return 0


def _stage_or_none(lake: str, stage: str) -> dict | None:
    try:
        return load_stage_record(lake, stage)
    except UserError:
        return None


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path and path.is_file() else None

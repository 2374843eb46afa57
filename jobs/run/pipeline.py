"""The whole pipeline in one Spark application: the stages of ``jobs.stages.PIPELINE`` in order, through the
runner, with one progress line per stage.

    scripts/pipeline [--profile cpu|gpu|gpu-explain] [--master URL] [--out DIR] [--input DIR] [stage options]

Its parameters are its stages' (each default as the stage declares it), less those it derives from the output
folder: data/ (generated CSV, unless --input), lake/ (Delta tables), models/, report/, eventlog/.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from jobs import stages
from jobs.core.errors import UserError
from jobs.core.params import AS_OF
from jobs.core.stage import Param, parse_args, parser_for
from jobs.ml import estimators
from jobs.lake.contract import DATASETS
from jobs.stages.ingest import check_header, input_verdict

OWN = (
    Param("out", "output folder", default="runs/latest"),
    Param("input", "existing CSV folder (customers/, events/): skips generate", default=None),
    AS_OF.but(default=None, help=AS_OF.help + f" (default: the input's manifest.json, else {AS_OF.default})"),
)
# Below this, the test and validation parts (15% each) may hold no churner at all, and train stops on them.
MIN_CUSTOMERS = 500
# Stage parameters the pipeline sets itself, from its output folder and from earlier stages.
DERIVED = ("data", "lake", "models_dir", "manifest", "model", "run_id", "out", "overwrite")


def first_line(path: Path) -> str | None:
    """The first line of a local CSV file, decompressed as Hadoop would by its suffix (None: empty)."""
    import bz2
    import gzip

    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as f:
            line = f.readline()
    except (OSError, EOFError) as e:
        raise UserError(f"{path} cannot be read ({e}): export it again, or move it out of the input folder") from None
    return line.rstrip("\n") or None


class Pipeline:
    name = "pipeline"
    summary = __doc__.split("\n\n")[0]

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    @property
    def params(self) -> tuple[Param, ...]:
        params = {p.name: p for p in OWN}
        for name in self.names:
            for p in stages.stage(name).params:
                if p.name not in DERIVED:
                    params.setdefault(p.name, p)
        return tuple(params.values())

    def parser(self, prog: str = "scripts/pipeline"):
        return parser_for(prog, self.summary, self.params)

    def parse(self, argv: list[str]) -> dict:
        given = parse_args(self.parser(), self.params, argv)
        args = {p.name: given.get(p.name, p.default) for p in self.params}
        self.check(args)
        return args

    def check(self, args: dict) -> None:
        """Every mistake a user can make in the call, found before anything is written; fills in the as-of date
        and absolute paths (tables, reports and event logs name one place, whatever the working folder)."""
        if args["input"] is not None:
            manifest_as_of = self.check_input(Path(args["input"]))
            args["as_of"] = args["as_of"] or manifest_as_of
            args["input"] = os.path.abspath(args["input"])
        if args["input"] is not None and args["as_of"] is None:
            raise UserError(f"--input {args['input']} has no manifest.json to take the as-of date from: "
                            "pass --as-of YYYY-MM-DD")
        args["as_of"] = args["as_of"] or AS_OF.default
        args["out"] = os.path.abspath(args["out"])
        out = Path(args["out"])
        try:
            out.mkdir(parents=True, exist_ok=True)
            probe = out / ".write-probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise UserError(f"--out {args['out']} is not writable ({e.strerror}): choose another folder") from None
        data = self.layout(args)["data"]
        if args["input"] is None:
            stages.stage("generate").check(self.stage_args("generate", args, self.layout(args)))
            if args["customers"] < MIN_CUSTOMERS:
                raise UserError(f"--customers {args['customers']}: the pipeline needs at least {MIN_CUSTOMERS} "
                                "customers, so that each of train, validation and test holds churners and stayers "
                                "(scripts/submit generate makes smaller data sets)")
            if (Path(data) / "manifest.json").exists():
                # Regenerating over old data would mix two datasets' files; the lake is rebuilt idempotently anyway.
                raise UserError(f"{data} already holds generated data: pass --input {data} to reuse it, "
                                "or choose a new --out")

    @staticmethod
    def check_input(src: Path) -> str | None:
        """A local input folder read by ingest's rules (``input_verdict``, headers), before Spark starts; returns
        the as-of date of its manifest.json, if it has one."""
        if not src.is_dir():
            raise UserError(f"--input {src}: no such folder; point it at a folder holding customers/ and events/ "
                            "CSV files, or leave it out to generate data")
        for ds in ("customers", "events"):
            read = 0
            for f in sorted((src / ds).iterdir()) if (src / ds).is_dir() else []:
                verdict = input_verdict(f.name, f.stat().st_size if f.is_file() else 0, f.is_file())
                if verdict:
                    raise UserError(f"{f} {verdict}")
                if verdict is None:
                    check_header(str(f), first_line(f), DATASETS[ds])
                    read += 1
            if not read:
                raise UserError(f"--input {src}: no CSV files in {src / ds}; expected {src}/customers/*.csv and "
                                f"{src}/events/*.csv (or .csv.gz, .csv.bz2)")
        manifest = src / "manifest.json"
        return json.loads(manifest.read_text())["generator"]["as_of"] if manifest.is_file() else None

    @staticmethod
    def layout(args: dict) -> dict:
        """The derived parameters: where each stage reads and writes under the output folder."""
        out = args["out"]
        data = args["input"] or os.path.join(out, "data")
        manifest = os.path.join(data, "manifest.json")
        return {"data": data, "lake": os.path.join(out, "lake"), "models_dir": os.path.join(out, "models"),
                "manifest": manifest if os.path.exists(manifest) else None, "out": out, "overwrite": False,
                "model": None, "run_id": None}

    def stage_args(self, name: str, args: dict, derived: dict) -> dict:
        values = {**args, **derived}
        return {p.name: values[p.name] for p in stages.stage(name).params}

    def run(self, runner, args: dict) -> None:
        spark = runner.spark
        ui = spark.sparkContext.uiWebUrl
        runner.line(f"Spark {spark.version}, master {spark.sparkContext.master}" + (f", UI at {ui}" if ui else ""))
        # The stage records of an earlier run that stopped part-way must not pass for this run's in the report.
        for old in Path(self.layout(args)["lake"], "_stages").glob("*.json"):
            old.unlink()
        self.run_stages(runner, args, self.names)
        runner.line(f"finished: report at {runner.records['report'].extra['report']}")

    def run_stages(self, runner, args: dict, names: tuple[str, ...]) -> dict:
        """Runs the stages ``names`` (in this order) with the pipeline's ``args``, each stage given the outputs of
        those before it; returns their records by stage name."""
        spark = runner.spark
        outputs: dict = {}
        records = {}
        for name in names:
            if name == "generate" and args["input"] is not None:
                continue
            if name == "ingest":
                estimators.start_driver_import(spark)   # beside ingest's jobs, not clean's frame building
            if name in ("clean", "features"):
                # The train stage's back-end check (spark-rapids-ml: a GPU probe that leaves a warm Python worker
                # for the fit) runs beside clean (its imports, ~6 s of a core, beside GPU-bound work) and again
                # beside features (the worker kept warm for the fit), instead of before the fit.
                estimators.start_checks(spark, again=name == "features")
            if name == "report":
                runner.plans.save(os.path.join(args["out"], "report", "gpu-fallbacks.json"))
            derived = {**self.layout(args), **outputs}
            records[name] = runner.run(stages.stage(name), self.stage_args(name, args, derived), lake=derived["lake"])
            outputs.update(records[name].extra.get("outputs", {}))
        return records


PIPELINE = Pipeline(stages.PIPELINE)

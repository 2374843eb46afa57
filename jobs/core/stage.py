"""The stage as the unit of the pipeline.

A stage declares its name, its parameters (each default written once, in its ``Param``), the tables it reads
and writes, and a ``work`` function ``work(spark, **params) -> StageRecord`` that does the work and returns what
it read, wrote and counted. Everything else (the command line, the session, timing, job groups, the plan
collector, saving the record, turning a user's mistake into one line) is the runner's (``jobs.run.runner``),
the same for one stage run alone (``scripts/submit <stage>``) and for the whole pipeline.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jobs.core.errors import UserError


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One parameter of a stage: its name in Python, its help, its default (``REQUIRED``: it must be given) and
    how its command-line text becomes the value (``parse`` raises ValueError or UserError on bad text)."""

    name: str
    help: str
    default: Any = REQUIRED
    parse: Callable[[str], Any] = str
    flag: str | None = None     # the command-line option, when not "--" + the name with dashes
    many: bool = False          # may be given several times: the value is a list
    switch: bool = False        # an option without a value: True when given

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def but(self, **changes) -> "Param":
        """This parameter with some fields changed (e.g. ``AS_OF.but(default=REQUIRED)`` for a stage that needs it)."""
        return dataclasses.replace(self, **changes)


@dataclass
class StageRecord:
    """What a stage read and wrote (table -> version), its row counts and timings; saved as JSON."""

    stage: str
    read: dict[str, int] = field(default_factory=dict)
    wrote: dict[str, int] = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def save(self, lake: str) -> str:
        """``<lake>/_stages/<stage>.json``: the report and later stages read it."""
        out = Path(lake) / "_stages"
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.stage}.json"
        path.write_text(json.dumps(self.__dict__, indent=2, sort_keys=True, default=str))
        return str(path)


def load_stage_record(lake: str, stage: str) -> dict:
    path = Path(lake) / "_stages" / f"{stage}.json"
    if not path.is_file():
        raise UserError(f"{path} not found: run stage {stage!r} first")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Stage:
    name: str
    summary: str
    work: Callable[..., StageRecord]
    params: tuple[Param, ...]
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    # The stage's figures for its progress line, e.g. "customers 99,010, events 1,112,345".
    describe: Callable[[StageRecord], str] = lambda record: ""
    # Checks between parameters, run before Spark starts; may fill in values derived from others.
    check: Callable[[dict], None] = lambda args: None

    def arguments(self, given: dict) -> dict:
        """``given`` with every default filled in; an unknown or missing parameter is a UserError."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise UserError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; it takes "
                            f"{', '.join(known)}")
        args = {name: given.get(name, p.default) for name, p in known.items()}
        missing = [known[n].option for n, v in args.items() if v is REQUIRED]
        if missing:
            raise UserError(f"{self.name} needs {', '.join(missing)} (scripts/submit {self.name} --help)")
        self.check(args)
        return args

    def __call__(self, spark, *positional, **given) -> StageRecord:
        """Runs the work with the defaults filled in, nothing else (the runner adds timing and the record)."""
        bound = inspect.signature(self.work).bind_partial(spark, *positional, **given).arguments
        bound.pop(next(iter(inspect.signature(self.work).parameters)))
        return self.work(spark, **self.arguments(bound))

    def parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        return parser_for(prog or self.name, self.summary, self.params)

    def parse(self, argv: list[str]) -> dict:
        """The command line as this stage's arguments, defaults filled in and checked."""
        return self.arguments(parse_args(self.parser(), self.params, argv))


def parser_for(prog: str, summary: str, params: tuple[Param, ...]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=summary)
    for param in params:
        shown = "" if param.required or param.default is None else f" (default {_shown(param.default)})"
        if param.switch:
            p.add_argument(param.option, dest=param.name, action="store_true", default=argparse.SUPPRESS,
                           help=param.help)
        else:
            p.add_argument(param.option, dest=param.name, action="append" if param.many else "store",
                           default=argparse.SUPPRESS, help=param.help + shown,
                           metavar=param.name.upper())
    return p


def parse_args(parser: argparse.ArgumentParser, params: tuple[Param, ...], argv: list[str]) -> dict:
    """Only what was given (a default is filled in later, by the stage); each value through its ``parse``."""
    given = vars(parser.parse_args(argv))
    by_name = {p.name: p for p in params}
    out = {}
    for name, raw in given.items():
        param = by_name[name]
        if param.switch:
            out[name] = raw
            continue
        try:
            out[name] = [param.parse(r) for r in raw] if param.many else param.parse(raw)
        except ValueError as e:
            raise UserError(f"{param.option} {raw!r}: {e}") from None
    return out


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)

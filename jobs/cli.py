"""Entry point for every stage: ``spark-submit jobs/main.py <stage> [args]`` (scripts/submit does this)."""
from __future__ import annotations

import importlib
import sys

STAGES = {
    "generate": "jobs.generate",
    "ingest": "jobs.ingest",
    "clean": "jobs.clean",
    "features": "jobs.features",
    "train": "jobs.train",
    "score": "jobs.score",
    "check-model": "jobs.model_check",
    "report": "jobs.report",
    "pipeline": "jobs.pipeline",
    "smoke": "jobs.smoke",
    "compare": "jobs.compare",
    "bench-handoff": "jobs.bench_handoff",
}


from jobs.errors import UserError


class UsageError(UserError):
    """A mistake in how a job was called: reported as one line and exit status 2."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in STAGES:
        got = f"unknown job {argv[0]!r}" if argv else "no job given"
        print(f"error: {got}; jobs: {', '.join(STAGES)}", file=sys.stderr)
        return 2
    module = importlib.import_module(STAGES[argv[0]])
    try:
        return module.main(argv[1:]) or 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

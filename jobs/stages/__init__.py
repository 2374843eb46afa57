"""The pipeline's stages, one module each; none imports another (what they share sits below them, in
``jobs.core``, ``jobs.lake`` and ``jobs.ml``). ``PIPELINE`` is the order the pipeline runs them in."""
from __future__ import annotations

import importlib

from jobs.core.stage import Stage

# Stage name -> module; each module's STAGE declares the stage.
MODULES = {
    "generate": "jobs.stages.generate",
    "ingest": "jobs.stages.ingest",
    "clean": "jobs.stages.clean",
    "features": "jobs.stages.features",
    "train": "jobs.stages.train",
    "score": "jobs.stages.score",
    "report": "jobs.stages.report",
    "check-model": "jobs.stages.check_model",
}
PIPELINE = ("generate", "ingest", "clean", "features", "train", "score", "report")


def stage(name: str) -> Stage:
    return importlib.import_module(MODULES[name]).STAGE

"""The GPU fallback gate: every operator that would leave the GPU must be in conf/gpu-fallbacks-allowed.json,
each entry with the reason it is accepted. CI runs the pipeline under gpu-explain and fails on anything else.
"""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path

ALLOWLIST = Path(__file__).resolve().parent.parent / "conf" / "gpu-fallbacks-allowed.json"


def load_allowlist(path: Path = ALLOWLIST) -> list[dict]:
    entries = json.loads(path.read_text())["allowed"]
    for e in entries:
        missing = {"stage", "name", "why"} - e.keys()
        if missing:
            raise ValueError(f"{path}: entry {e} lacks {sorted(missing)}; every entry says why it is allowed")
    return entries


def allowed(fallback: dict, stage: str, entries: list[dict]) -> bool:
    return any(fnmatch.fnmatchcase(stage, e["stage"]) and fnmatch.fnmatchcase(fallback["name"], e["name"])
               and e.get("reason_contains", "") in fallback.get("reason", "")
               and fnmatch.fnmatchcase(fallback.get("target", ""), e.get("target", "*"))
               for e in entries)


def unexpected(by_stage: dict[str, list[dict]], entries: list[dict]) -> list[dict]:
    """The fallbacks no allow-list entry covers, each with its stage."""
    return [{"stage": stage, **fb} for stage, fbs in by_stage.items() for fb in fbs
            if not allowed(fb, stage, entries)]

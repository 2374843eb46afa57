"""Spark profiles under conf/: parse, merge (base + profile, with ``#include``), and check.

Used by the launchers (scripts/submit, the test fixtures). Job code never imports this module: a job
cannot know, and must not care, which profile it runs under.
"""
from __future__ import annotations

import re
from pathlib import Path

from jobs.lake.session import needs_gpu, uses_rapids  # noqa: F401  (what a profile asks of the session)

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PROFILES = ("cpu", "gpu", "gpu-explain")
_INCLUDE = re.compile(r"^#include\s+(\S+)\s*$")


class ProfileError(ValueError):
    """A profile that does not exist or cannot be read."""


def read_conf(path: Path) -> dict[str, str]:
    """One spark-defaults file as an ordered dict; ``#include other.conf`` lines pull in a sibling first."""
    props: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        included = _INCLUDE.match(line)
        if included:
            props.update(read_conf(path.parent / included.group(1)))
            continue
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        props[key] = value.strip().replace("${CONF_DIR}", str(path.parent))
    return props


def load_profile(name: str, conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """base.conf merged with ``<name>.conf`` (the profile wins)."""
    if name not in PROFILES:
        raise ProfileError(
            f"unknown profile {name!r}: choose one of {', '.join(PROFILES)} (files under {conf_dir})"
        )
    path = conf_dir / f"{name}.conf"
    if not path.is_file():
        raise ProfileError(f"profile file {path} is missing: restore it from git")
    return {**read_conf(conf_dir / "base.conf"), **read_conf(path)}


def write_properties(props: dict[str, str], path: Path) -> Path:
    path.write_text("".join(f"{k} {v}\n" for k, v in props.items()))
    return path

"""Where a JVM's task threads were, and in what compiled state, from a flight recording's execution samples: per window
of the recording, the samples' top frames, the share of them running in the interpreter, and each sample's innermost
interpreted frame with its depth; the same over the whole recording. A thread dump names the frames only; the
recording also says whether each ran interpreted, compiled or inlined, which tells a task stuck in slow code for its
whole run (a row loop that never reaches compiled code) from one that is merely busy (scripts/gpu-validate,
EXECUTOR_JFR).

    python3 tools/jfr_frames.py RECORDING.jfr [--jfr PATH] [--threads 'Executor task launch worker'] > summary.json
    python3 tools/jfr_frames.py --json PRINTED.json ...   (what `jfr print --json --events jdk.ExecutionSample` printed)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
from collections import Counter

INTERPRETED = "Interpreted"
# Frames kept a sample: enough to reach a task's row loop below the parse (~15 frames); the printed JSON of a minute of
# 16 task threads is some hundreds of MB, read as it is printed.
STACK_DEPTH = 24


def printed(recording: str, jfr: str) -> dict:
    """The recording's execution samples as the JDK's ``jfr`` tool prints them in JSON."""
    with subprocess.Popen([jfr, "print", "--json", "--events", "jdk.ExecutionSample", "--stack-depth",
                           str(STACK_DEPTH), recording], stdout=subprocess.PIPE, text=True) as proc:
        data = json.load(proc.stdout)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, jfr)
    return data


def method_name(frame: dict) -> str:
    m = frame["method"]
    return f"{m['type']['name'].replace('/', '.')}.{m['name']}"


def at(event: dict) -> float:
    """An event's start as seconds since the epoch (the tool prints ISO 8601 with nanoseconds)."""
    text = event["values"]["startTime"].rstrip("Z")
    whole, _, fraction = text.partition(".")
    stamp = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.timezone.utc).timestamp()
    return stamp + float(f"0.{fraction or '0'}")


def innermost_interpreted(frames: list[dict]) -> tuple[str, int] | None:
    """The sampled stack's innermost interpreted frame and its depth (0: the top frame), or None. A frame called once
    a task (its outer methods) stays interpreted harmlessly deep in every stack; a task's row loop left interpreted
    shows up a few frames from the top, in most of that task's samples."""
    for depth, f in enumerate(frames):
        if f["type"] == INTERPRETED:
            return method_name(f), depth
    return None


def ranked(found: Counter, depths: dict[str, list[int]], n: int) -> list:
    """[method, samples, median depth] of the ``n`` methods found most often."""
    return [[m, k, statistics.median(depths[m])] for m, k in found.most_common(n)]


def summary(data: dict, threads: str, window_s: float, top: int) -> dict:
    samples = []
    for event in data["recording"]["events"]:
        values = event["values"]
        if not (values.get("sampledThread") or {}).get("javaName", "").startswith(threads):
            continue
        frames = (values.get("stackTrace") or {}).get("frames") or []
        if frames:
            samples.append((at(event), frames))
    if not samples:
        return {"threads": threads, "samples": 0, "windows": [], "top_frames": [], "innermost_interpreted": []}
    start = min(t for t, _ in samples)
    windows: dict[int, dict] = {}
    tops: Counter = Counter()
    inner: Counter = Counter()
    depths: dict[str, list[int]] = {}
    for t, frames in samples:
        w = windows.setdefault(int((t - start) // window_s), {"samples": 0, "top_interpreted": 0, "top": Counter(),
                                                               "inner": Counter(), "depths": {}})
        head = (method_name(frames[0]), frames[0]["type"])
        w["samples"] += 1
        w["top"][head] += 1
        w["top_interpreted"] += head[1] == INTERPRETED
        tops[head] += 1
        found = innermost_interpreted(frames)
        if found:
            for counter, where in ((w["inner"], w["depths"]), (inner, depths)):
                counter[found[0]] += 1
                where.setdefault(found[0], []).append(found[1])
    return {
        "threads": threads, "samples": len(samples), "window_s": window_s,
        "windows": [{"from_s": round(k * window_s, 3), "samples": w["samples"],
                     "top_interpreted": round(w["top_interpreted"] / w["samples"], 3),
                     "top": [[m, kind, n] for (m, kind), n in w["top"].most_common(5)],
                     "innermost_interpreted": ranked(w["inner"], w["depths"], 3)}
                    for k, w in sorted(windows.items())],
        "top_frames": [[m, kind, n] for (m, kind), n in tops.most_common(top)],
        "innermost_interpreted": ranked(inner, depths, top),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/jfr_frames.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording", nargs="?", help="a .jfr file")
    p.add_argument("--json", help="the recording's samples as `jfr print --json` wrote them, instead of a .jfr file")
    p.add_argument("--jfr", default=shutil.which("jfr") or "jfr", help="the JDK's jfr tool (default: on PATH)")
    p.add_argument("--threads", default="Executor task launch worker", help="sampled threads whose name starts so")
    p.add_argument("--window", type=float, default=2.0, help="seconds a window")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    if not a.recording and not a.json:
        p.error("give a recording or --json")
    data = json.load(open(a.json)) if a.json else printed(a.recording, a.jfr)
    json.dump(summary(data, a.threads, a.window, a.top), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

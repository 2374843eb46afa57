"""Where a JVM's task threads were, and in what compiled state, from a flight recording's execution samples: per window
of the recording, the samples' top frames and the share of them running in the interpreter; over the whole recording,
the methods seen as interpreted frames anywhere in a sampled stack. A thread dump names the frames only; the recording
also says whether each ran interpreted, compiled or inlined, which tells a task stuck in slow code for its whole run
(a long loop that never reaches compiled code) from one that is merely busy (scripts/gpu-validate, EXECUTOR_JFR).

    python3 tools/jfr_frames.py RECORDING.jfr [--jfr PATH] [--threads 'Executor task launch worker'] > summary.json
    python3 tools/jfr_frames.py --json PRINTED.json ...   (what `jfr print --json --events jdk.ExecutionSample` printed)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
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
        return {"threads": threads, "samples": 0, "windows": [], "top_frames": [], "interpreted_methods": []}
    start = min(t for t, _ in samples)
    windows: dict[int, dict] = {}
    tops: Counter = Counter()
    interpreted: Counter = Counter()
    for t, frames in samples:
        w = windows.setdefault(int((t - start) // window_s), {"samples": 0, "top_interpreted": 0,
                                                               "any_interpreted": 0, "top": Counter()})
        head = (method_name(frames[0]), frames[0]["type"])
        w["samples"] += 1
        w["top"][head] += 1
        tops[head] += 1
        w["top_interpreted"] += head[1] == INTERPRETED
        slow = {method_name(f) for f in frames if f["type"] == INTERPRETED}
        w["any_interpreted"] += bool(slow)
        interpreted.update(slow)
    return {
        "threads": threads, "samples": len(samples), "window_s": window_s,
        "windows": [{"from_s": round(k * window_s, 3), "samples": w["samples"],
                     "top_interpreted": round(w["top_interpreted"] / w["samples"], 3),
                     "any_interpreted": round(w["any_interpreted"] / w["samples"], 3),
                     "top": [[m, kind, n] for (m, kind), n in w["top"].most_common(5)]}
                    for k, w in sorted(windows.items())],
        "top_frames": [[m, kind, n] for (m, kind), n in tops.most_common(top)],
        "interpreted_methods": [[m, n] for m, n in interpreted.most_common(top)],
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

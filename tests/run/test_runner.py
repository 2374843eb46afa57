"""The runner's guarantees around a stage: one run per output folder (the lock)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from jobs.run import runner

HOLD = """
import sys, time
from jobs.lake import lock
with lock.held(sys.argv[1], "pipeline"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_run_on_a_held_folder_stops_with_who_holds_it_and_a_dead_holders_lock_is_taken_over(
        spark, tmp_path, capsys):
    out = tmp_path / "data"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert runner.main(["generate", "--out", str(out), "--customers", "50"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in use by another run" in err[0] and f"process {holder.pid}" in err[0], err
        assert "since " in err[0]
        assert not (out / "manifest.json").exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)   # gone without releasing anything by hand
        holder.wait()
    time.sleep(0.2)
    assert runner.main(["generate", "--out", str(out), "--customers", "50"]) == 0
    assert (out / "manifest.json").exists()

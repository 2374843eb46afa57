"""scripts/gpu-validate takes its arguments as values, never as code."""
from __future__ import annotations

import os
import subprocess
import time

from tests.support.sessions import ROOT


def test_the_background_runs_arguments_reach_its_steps_as_values_not_shell_code(tmp_path):
    pwned = tmp_path / "pwned"
    customers = f"1'; touch {pwned}; '"   # pasted into a shell string, this would create the file
    env = {**os.environ, "GPUVAL": str(tmp_path / "state")}
    out = subprocess.run([str(ROOT / "scripts" / "gpu-validate"), "background", customers], capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    log = tmp_path / "state" / "results" / "background.log"
    deadline = time.monotonic() + 240   # on this machine (no GPU stack) every step fails at once
    while "BACKGROUND-DONE" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)
    assert not pwned.exists()
    assert f"step 'generate {customers}' started" in log.read_text()

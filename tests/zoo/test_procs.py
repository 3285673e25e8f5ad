"""Killing what a zoo left behind: a tagged process that keeps starting runs in sessions of
their own (a worker in the middle of its task) leaves none of them alive."""
import os
import signal
import subprocess
import sys
import time
import uuid

from lar_prec.zoo.procs import kill_tagged, tagged

# a stand-in worker: starts runs (sleeping children in sessions of their own) as fast as it can
FORKER = """
import os, time
for _ in range(2000):
    if os.fork() == 0:
        os.setsid()
        time.sleep(20)
        os._exit(0)
time.sleep(60)
"""


def test_kill_tagged_leaves_no_run_a_worker_started_while_it_was_being_killed():
    name, value = "LAR_PREC_TEST_TAG", uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", FORKER], env={**os.environ, name: value},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(tagged(name, value)) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(tagged(name, value)) >= 20, "the stand-in worker started no runs"
        n = kill_tagged(name, value)
        proc.wait(timeout=10)
        assert n >= 20
        time.sleep(0.2)
        assert tagged(name, value) == []
    finally:
        for pid in tagged(name, value):  # never leave the sleepers behind, whatever the outcome
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()

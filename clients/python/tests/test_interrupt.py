"""Stopping a job mid-way — Ctrl-C, task cancellation, SIGKILL of the
Python process or of the sluice child — and resuming it with the same
checkpoint_dir: nothing already answered is sent again, and the final
results are complete.

The response cache is off in these tests so that the count is exact: the
re-call sends exactly the items without a complete results line.
"""

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import unittest

import sluice

from . import simworld
from .simworld import ARGS, PY, SimTest, alive, children, complete_ids, completions, results_file, wait_for

N_PERSONAS, N_QUESTIONS, N_COMPLETIONS = 4, 30, 4  # 480 items
N = N_PERSONAS * N_QUESTIONS * N_COMPLETIONS
EARLY = 40  # stop once this many rows are written

KW = dict(force_sync=True, echo=False, sluice_args=ARGS + ["--cache-mode", "off"])

SCRIPT = textwrap.dedent("""
    import asyncio, json, signal, sys, threading, time
    import sluice
    # Ctrl-C must raise KeyboardInterrupt here even when the tests run as a
    # background job, where the shell starts every process with SIGINT
    # ignored and Python then installs no handler for it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    comps = json.load(open(sys.argv[1]))
    kw = json.loads(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "sync"
    try:
        if mode == "async":
            # The async path, with other threads running: the case where
            # a preexec_fn could deadlock the child before sluice started.
            def busy():
                while True:
                    bytearray(4096)
                    time.sleep(0.001)
            for _ in range(4):
                threading.Thread(target=busy, daemon=True).start()
            asyncio.run(sluice.judge_completions_batch_async(comps, checkpoint_dir=sys.argv[2], **kw))
        else:
            sluice.judge_completions_batch(comps, checkpoint_dir=sys.argv[2], **kw)
        print("DONE")
    except KeyboardInterrupt:
        print("INTERRUPTED")
        sys.exit(130)
    except sluice.SluiceError as e:
        print("SLUICE_ERROR", e.returncode)
        sys.exit(3)
""")


def setUpModule():
    if not sys.platform.startswith("linux"):
        raise unittest.SkipTest("these tests find the sluice child through /proc")
    simworld.setup()


def locked(path):
    """Whether another process holds an flock on path."""
    import fcntl

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class InterruptTest(SimTest):
    def start(self, tag, mode="sync"):
        """Starts a Python process judging N items into a checkpoint dir (on
        the sync or the async path) and waits until it has written EARLY
        rows; returns it, its sluice child and the input."""
        comps = completions(N_PERSONAS, N_QUESTIONS, N_COMPLETIONS, tag=tag)
        inp, ck, script = self.path(tag + ".json"), self.path("ck-" + tag), self.path("job.py")
        with open(inp, "w") as f:
            json.dump(comps, f)
        with open(script, "w") as f:
            f.write(SCRIPT)
        py = subprocess.Popen([PY, script, inp, ck, json.dumps(KW), mode], env=simworld.python_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (py.poll() is None and py.kill(), py.communicate()))
        wait_for(lambda: len(complete_ids(results_file(ck) or "")) >= EARLY or py.poll() is not None,
                 "%d rows" % EARLY)
        if py.poll() is not None:
            self.fail("the job ended before it could be stopped: %s" % (py.communicate(),))
        kids = children(py.pid)
        self.assertEqual(len(kids), 1, kids)
        self.addCleanup(lambda: alive(kids[0]) and os.kill(kids[0], signal.SIGKILL))
        return py, kids[0], comps, ck

    def resume(self, comps, ck):
        """Re-calls the job; asserts that it sent exactly the items not
        written before and that every item has its verdict."""
        done = complete_ids(results_file(ck))
        self.assertGreaterEqual(len(done), EARLY)
        self.assertLess(len(done), N, "the job finished before it was stopped")
        before = self.sim.calls()
        got = sluice.judge_completions_batch(comps, checkpoint_dir=ck, **KW)
        self.assertEqual(self.sim.calls() - before, N - len(done))
        self.assertEqual(sum(r["n_samples"] for r in got.values()), N)
        self.assertEqual(complete_ids(results_file(ck)) >= done, True)
        self.assertEqual(len(complete_ids(results_file(ck))), N)

    def test_ctrl_c_stops_sluice_cleanly_and_the_next_call_resumes(self):
        py, kid, comps, ck = self.start("int")
        py.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends to the Python process
        out, err = py.communicate(timeout=60)
        self.assertEqual((py.returncode, out.strip()), (130, "INTERRUPTED"), err)
        self.assertFalse(alive(kid), "sluice outlived the interrupted call")
        self.resume(comps, ck)

    def test_sigkill_of_the_python_process_drains_sluice_and_resumes(self):
        for mode in ("sync", "async"):
            with self.subTest(mode=mode):
                py, kid, comps, ck = self.start("pykill" + mode, mode)
                with open("/proc/%d/cmdline" % kid, "rb") as f:
                    self.assertIn(b"--exit-with-parent", f.read().split(b"\0"))
                py.kill()
                py.wait()
                # sluice sees its stdin pipe close, drains as for SIGTERM and
                # exits; every lock of the folder is free then.
                wait_for(lambda: not alive(kid), "the orphaned sluice to drain and exit")
                locks = glob.glob(os.path.join(ck, "judge_*", "*.lock"))
                self.assertTrue(any(p.endswith("py.lock") for p in locks), locks)
                for path in locks:
                    self.assertFalse(locked(path), "%s is still held" % path)
                self.resume(comps, ck)

    def test_no_preexec_fn(self):
        # preexec_fn is unsafe with threads and forces fork(): never passed.
        child = sluice._proc.Child(["version"], dict(os.environ))
        self.assertNotIn("preexec_fn", child._popen_kwargs())
        self.assertEqual(child._argv()[:2], [child.bin, "--exit-with-parent"])

    def test_sigkill_of_sluice_and_the_next_call_resumes(self):
        py, kid, comps, ck = self.start("kidkill")
        os.kill(kid, signal.SIGKILL)
        out, _ = py.communicate(timeout=60)
        self.assertEqual((py.returncode, out.strip()), (3, "SLUICE_ERROR -9"))
        self.resume(comps, ck)

    def test_cancelling_the_async_task_stops_sluice_and_the_next_call_resumes(self):
        comps = completions(N_PERSONAS, N_QUESTIONS, N_COMPLETIONS, tag="cancel")
        ck = self.path("ck")

        async def main():
            task = asyncio.ensure_future(sluice.judge_completions_batch_async(comps, checkpoint_dir=ck, **KW))
            while len(complete_ids(results_file(ck) or "")) < EARLY and not task.done():
                await asyncio.sleep(0.02)
            self.assertFalse(task.done(), "the job ended before it could be cancelled")
            kids = [k for k in children(os.getpid()) if b"judge" in open("/proc/%d/cmdline" % k, "rb").read()]
            self.assertEqual(len(kids), 1, kids)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            return kids

        kids = asyncio.run(main())
        for k in kids:
            self.assertFalse(alive(k), "sluice outlived the cancelled task")
        self.resume(comps, ck)

    def test_asyncio_run_ending_with_the_task_running_stops_sluice_and_resumes(self):
        # main raises while the call runs: asyncio.run cancels every task,
        # the call's stderr reader too, and the call must still drain sluice
        # and return (it once spun on the cancelled reader forever).
        comps = completions(N_PERSONAS, N_QUESTIONS, N_COMPLETIONS, tag="arun")
        inp, ck, script = self.path("in.json"), self.path("ck"), self.path("arun.py")
        with open(inp, "w") as f:
            json.dump(comps, f)
        with open(script, "w") as f:
            f.write(textwrap.dedent("""
                import asyncio, json, sys, time
                import sluice
                sys.path.insert(0, sys.argv[4])
                from tests.simworld import complete_ids, results_file
                comps = json.load(open(sys.argv[1]))
                async def main():
                    task = asyncio.ensure_future(sluice.judge_completions_batch_async(
                        comps, checkpoint_dir=sys.argv[2], **json.loads(sys.argv[3])))
                    while len(complete_ids(results_file(sys.argv[2]) or "")) < %d and not task.done():
                        await asyncio.sleep(0.02)
                    raise RuntimeError("main gave up" if not task.done() else "finished too soon")
                try:
                    asyncio.run(main())
                except RuntimeError as e:
                    print(e)
            """ % EARLY))
        py = subprocess.Popen([PY, script, inp, ck, json.dumps(KW), simworld.PKG], env=simworld.python_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (py.poll() is None and py.kill(), py.communicate()))
        try:
            out, err = py.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.fail("asyncio.run did not return once its main raised")
        self.assertEqual(out.strip(), "main gave up", err)
        self.resume(comps, ck)


if __name__ == "__main__":
    unittest.main()

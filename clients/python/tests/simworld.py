"""One `sluice sim` child on loopback for the tests, and the environment a
user would set for it (its documented fake keys, its base URL)."""

import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)

# The simulator's own documented fake keys (sim.FakeKey*).
FAKE_KEYS = {
    "ANTHROPIC_API_KEY": "sk-ant-fake-sim-high-prio-0001",
    "ANTHROPIC_BATCH_KEY": "sk-ant-fake-sim-batch-0002",
}

# Flags every test passes: no ./.env, no planner's limits probe (its
# max_tokens-1 calls would count as requests).
ARGS = ["--no-dotenv", "--no-probe"]


def binary():
    b = os.environ.get("SLUICE_BIN") or shutil.which("sluice")
    if not b:
        raise unittest.SkipTest("no sluice binary: set SLUICE_BIN (.ci/run builds one)")
    return b


class Sim:
    """A running `sluice sim` with verdicts on."""

    def __init__(self, time_scale=4.0):
        self.tmp = tempfile.mkdtemp(prefix="sluice-py-test-")
        cfg = os.path.join(self.tmp, "sim.json")
        with open(cfg, "w") as f:
            json.dump({"verdicts": {"enabled": True}}, f)
        self.proc = subprocess.Popen([binary(), "sim", "--addr", "127.0.0.1:0", "--config", cfg, "--time-scale",
                                      str(time_scale)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"serving on (http://\S+)", line)
        if not m:
            self.close()
            raise RuntimeError("sluice sim did not start: %r" % line)
        self.url = m.group(1)

    def calls(self):
        """Messages calls the simulator admitted, over every org and pool."""
        with urllib.request.urlopen(self.url + "/_sim/stats") as r:
            st = json.load(r)
        return sum(p.get("admitted", 0) for o in st["orgs"].values() for p in o.get("pools", {}).values())

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        self.proc.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


_sim = None
_saved_env = {}


def setup():
    """Starts the shared simulator and points this process's environment
    at it (each test module calls this from setUpModule)."""
    global _sim
    if _sim is None:
        _sim = Sim()
        atexit.register(_sim.close)
    env = dict(FAKE_KEYS, ANTHROPIC_BASE_URL=_sim.url, SLUICE_BIN=binary())
    for k in ("ANTHROPIC_API_KEY_LOW_PRIO", "ANTHROPIC_API_KEYS"):
        _saved_env.setdefault(k, os.environ.pop(k, None))
    for k, v in env.items():
        _saved_env.setdefault(k, os.environ.get(k))
        os.environ[k] = v
    return _sim


class SimTest(unittest.TestCase):
    """A test with the simulator, a private HOME (observations) and cache."""

    def setUp(self):
        self.sim = setup()
        self.dir = tempfile.mkdtemp(prefix="sluice-py-case-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        for k, v in (("HOME", self.dir), ("SLUICE_CACHE", os.path.join(self.dir, "cache.db")),
                     ("TMPDIR", os.path.join(self.dir, "tmp"))):
            old = os.environ.get(k)
            os.environ[k] = v
            self.addCleanup(_restore, k, old)
        os.makedirs(os.environ["TMPDIR"])
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        self.addCleanup(setattr, tempfile, "tempdir", None)

    def path(self, *names):
        return os.path.join(self.dir, *names)


def _restore(k, v):
    if v is None:
        os.environ.pop(k, None)
    else:
        os.environ[k] = v


def completions(n_personas, n_questions, n_completions, tag=""):
    """A deterministic {persona: {question: [completion, ...]}}."""
    return {"persona-%d%s" % (p, tag): {"Q%d of persona %d%s?" % (q, p, tag): ["answer %d.%d.%d" % (p, q, c)
                                                                            for c in range(n_completions)]
                                        for q in range(n_questions)}
            for p in range(n_personas)}


def complete_ids(path):
    """The custom ids of the complete lines of a results file."""
    ids = set()
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return ids
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                ids.add(json.loads(raw)["custom_id"])
            except (ValueError, KeyError):
                pass
    return ids


def results_file(checkpoint_dir, kind="judge"):
    name = "verdicts.jsonl.results.jsonl" if kind == "judge" else "results.jsonl"
    found = glob.glob(os.path.join(checkpoint_dir, kind + "_*", name))
    return found[0] if found else None


def wait_for(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def children(pid):
    """The pids whose parent is pid (Linux /proc)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rfind(")") + 2:].split()
        if len(rest) > 1 and int(rest[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


def alive(pid):
    """Whether pid runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rfind(")") + 2:].split()[0] != "Z"


def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
    return env


PY = sys.executable

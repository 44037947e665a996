"""dispatch_calls against `sluice sim`, and the package's edges (binary,
version, keys)."""

import asyncio
import json
import os
import re
import subprocess
import sys
import unittest

import sluice
from sluice import _proc
from sluice.dispatch import _DispatchJob

from . import simworld
from .simworld import ARGS, FAKE_KEYS, PKG, SimTest


def setUpModule():
    simworld.setup()


def build(item):
    return {"model": "claude-haiku-4-5", "max_tokens": 16,
            "messages": [{"role": "user", "content": "say %s" % item.payload}]}


def first_word(text):
    return text.split()[0]


def _dispatch_defaults():
    """dispatch_calls' keyword parameters and their defaults."""
    import inspect

    from sluice import dispatch
    return {k: p.default for k, p in inspect.signature(dispatch.dispatch_calls).parameters.items()
            if p.kind is p.KEYWORD_ONLY}


class DispatchTest(SimTest):
    def test_every_item_gets_a_result_with_the_old_categories(self):
        items = [sluice.DispatchItem("ok/%d" % i, i) for i in range(6)]
        items.append(sluice.DispatchItem("unknown-model", 99))

        def build2(item):
            p = build(item)
            if item.item_id == "unknown-model":
                p["model"] = "claude-no-such-model"
            return p

        routes = []
        got = sluice.dispatch_calls(items, build2, first_word, on_route=routes.append, echo=False, sluice_args=ARGS)
        self.assertEqual(set(got), {i.item_id for i in items})
        for i in range(6):
            r = got["ok/%d" % i]
            self.assertEqual((r.category, r.error, r.item_id), ("ok", False, "ok/%d" % i))
            self.assertTrue(r.result.startswith("sim-"))
            self.assertIn(r.org, ("high_prio", "batch"))
        bad = got["unknown-model"]
        self.assertEqual((bad.category, bad.error, bad.result, bad.org), ("error", True, None, None))
        self.assertTrue(bad.reason.startswith("error: "), bad.reason)
        self.assertEqual(len(routes), 1)
        self.assertEqual(routes[0].n_items, 7)

    def test_a_parser_that_raises_makes_an_error_row(self):
        def parse(text):
            raise ValueError("not what I wanted")

        got = sluice.dispatch_calls([sluice.DispatchItem("x", 1)], build, parse, echo=False, sluice_args=ARGS)
        self.assertEqual(got["x"].category, "error")
        self.assertIn("parse_error: ValueError: not what I wanted", got["x"].reason)

    def test_unsafe_ids_and_a_recall(self):
        items = [sluice.DispatchItem("a weird/id #%d" % i, i) for i in range(4)]
        first = sluice.dispatch_calls(items, build, first_word, checkpoint_dir=self.path("ck"), echo=False,
                                      sluice_args=ARGS)
        before = self.sim.calls()
        again = sluice.dispatch_calls(items, build, first_word, checkpoint_dir=self.path("ck"), echo=False,
                                      sluice_args=ARGS)
        self.assertEqual({k: v.result for k, v in again.items()}, {k: v.result for k, v in first.items()})
        self.assertEqual(self.sim.calls(), before)  # done rows are not sent again

    def test_a_system_role_message_is_refused_before_anything_is_sent(self):
        before = self.sim.calls()

        def bad(item):
            return {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}

        with self.assertRaisesRegex(ValueError, r"'s'.*messages\[0\]"):
            sluice.dispatch_calls([sluice.DispatchItem("s")], bad, first_word, echo=False, sluice_args=ARGS)
        self.assertEqual(self.sim.calls(), before)

    def test_org_keys_replace_the_environment_keys(self):
        items = [sluice.DispatchItem("k%d" % i, i) for i in range(8)]
        got = sluice.dispatch_calls(items, build, first_word, org_keys={"mine": FAKE_KEYS["ANTHROPIC_BATCH_KEY"]},
                                    echo=False, sluice_args=ARGS)
        self.assertEqual({r.org for r in got.values()}, {"mine"})  # the one key given, by its label

    def test_org_keys_replace_the_keys_of_dotenv_too(self):
        # sluice reads ./.env for a variable the environment lacks; org_keys
        # must replace those keys as well (another organization's key there
        # would otherwise join the pool).
        work = self.path("cwd")
        os.makedirs(work)
        with open(os.path.join(work, ".env"), "w") as f:
            f.write("ANTHROPIC_API_KEY=%s\n" % FAKE_KEYS["ANTHROPIC_API_KEY"])
        old = os.getcwd()
        os.chdir(work)
        self.addCleanup(os.chdir, old)
        items = [sluice.DispatchItem("dk%d" % i, i) for i in range(24)]
        got = sluice.dispatch_calls(items, build, first_word, org_keys={"mine": FAKE_KEYS["ANTHROPIC_BATCH_KEY"]},
                                    echo=False, sluice_args=["--no-probe"])
        self.assertEqual({r.org for r in got.values()}, {"mine"})
        raw = self.path("raw.json")
        sluice.judge_completions_batch(simworld.completions(2, 3, 2, tag="dk"), save_raw=raw, echo=False,
                                       org_keys={"mine": FAKE_KEYS["ANTHROPIC_BATCH_KEY"]},
                                       sluice_args=["--no-probe", "--cache-mode", "off"])
        with open(raw) as f:
            self.assertEqual({r["org"] for r in json.load(f)["rows"]}, {"mine"})

    def test_org_keys_given_the_wrong_way_round_are_refused_without_echoing_a_key(self):
        key = FAKE_KEYS["ANTHROPIC_BATCH_KEY"]
        other = "abcdef0123456789XYZW"  # a key of some other shape: it passes as a label
        before = self.sim.calls()
        cases = [
            {key: "mine"},                    # {key: label}: the label starts with sk-
            {"x" * 41 + key[-8:]: "mine"},    # longer than any label
            {other: "mine"},                  # a short value: not a key
            {"mine": "short"},
            {"mine": key + ",x=" + key},      # a comma would smuggle a second entry in
            {"has space": key},
        ]
        for ok in cases:
            with self.subTest(org_keys=ok):
                with self.assertRaises(ValueError) as cm:
                    sluice.dispatch_calls([sluice.DispatchItem("w")], build, first_word, org_keys=ok, echo=False,
                                          sluice_args=ARGS)
                msg = str(cm.exception)
                self.assertIn("org_keys", msg)
                for label, value in ok.items():
                    for secret in (label, value):
                        if len(secret) >= 8:
                            self.assertNotIn(secret[:-4], msg)
                with self.assertRaises(ValueError):
                    sluice.judge_completions_batch({"p": {"q": ["a"]}}, org_keys=ok, echo=False, sluice_args=ARGS)
        self.assertEqual(self.sim.calls(), before)

    def test_every_org_keys_value_is_redacted(self):
        env = _proc.child_env({"a": "sk-ant-0123456789", "b": "12345678"})
        self.assertEqual(set(_proc.secrets(env)), {"sk-ant-0123456789", "12345678"})

    def test_the_temporary_parent_folder_must_be_ours_alone(self):
        parent = os.path.join(os.environ["TMPDIR"], "sluice-py-%d" % os.getuid())
        elsewhere = self.path("elsewhere")
        os.makedirs(elsewhere)
        os.symlink(elsewhere, parent)
        before = self.sim.calls()
        with self.assertRaisesRegex(PermissionError, "symbolic link"):
            sluice.dispatch_calls([sluice.DispatchItem("t")], build, first_word, echo=False, sluice_args=ARGS)
        self.assertEqual(os.listdir(elsewhere), [])
        self.assertEqual(self.sim.calls(), before)
        os.unlink(parent)

        os.mkdir(parent)
        os.chmod(parent, 0o777)
        with self.assertRaisesRegex(PermissionError, "may write"):
            sluice.dispatch_calls([sluice.DispatchItem("t")], build, first_word, echo=False, sluice_args=ARGS)
        if os.getuid() == 0:
            os.chmod(parent, 0o700)
            os.chown(parent, 4242, -1)
            with self.assertRaisesRegex(PermissionError, "uid 4242"):
                sluice.dispatch_calls([sluice.DispatchItem("t")], build, first_word, echo=False, sluice_args=ARGS)
            os.chown(parent, 0, -1)

        os.chmod(parent, 0o755)  # as earlier versions made it: taken back to 0700
        got = sluice.dispatch_calls([sluice.DispatchItem("t")], build, first_word, echo=False, sluice_args=ARGS)
        self.assertEqual(got["t"].category, "ok")
        self.assertEqual(os.stat(parent).st_mode & 0o777, 0o700)

        os.rmdir(parent)  # made afresh: 0700 whatever the umask
        old = os.umask(0)
        try:
            sluice.dispatch_calls([sluice.DispatchItem("t")], build, first_word, echo=False, sluice_args=ARGS)
        finally:
            os.umask(old)
        self.assertEqual(os.stat(parent).st_mode & 0o777, 0o700)

    def temp_folders(self):
        parent = os.path.join(os.environ["TMPDIR"], "sluice-py-%d" % os.getuid())
        return os.listdir(parent) if os.path.isdir(parent) else []

    def test_two_identical_async_calls_at_once_take_turns(self):
        # Without checkpoint_dir both use one temporary folder: the second
        # waits for the first, then sluice resumes its finished results.
        items = [sluice.DispatchItem("g%d" % i, i) for i in range(30)]
        before = self.sim.calls()

        async def main():
            return await asyncio.gather(*(sluice.dispatch_calls_async(items, build, first_word, echo=False,
                                                                      sluice_args=ARGS) for _ in range(2)))

        a, b = asyncio.run(main())
        self.assertEqual({k: v.result for k, v in a.items()}, {k: v.result for k, v in b.items()})
        self.assertEqual({v.category for v in a.values()} | {v.category for v in b.values()}, {"ok"})
        self.assertEqual(self.sim.calls() - before, len(items))  # the second sent nothing again
        self.assertEqual(self.temp_folders(), [])  # removed once, by the last

    def test_cancelling_an_async_call_that_waits_for_the_lock(self):
        from sluice import dispatch

        items = [sluice.DispatchItem("w%d" % i, i) for i in range(3)]
        kw = dict(echo=False, sluice_args=ARGS)
        # Another call's hold on the same folder.
        other = dispatch._make(items, build, first_word, dict(_dispatch_defaults(), **kw))()
        self.assertTrue(other.lock.acquire())
        try:
            with self.assertRaises(asyncio.TimeoutError):
                asyncio.run(asyncio.wait_for(sluice.dispatch_calls_async(items, build, first_word, **kw), 1.0))
            self.assertEqual([n for n in os.listdir(other.dir) if n.startswith(".waiting")], [])
        finally:
            other.lock.release(False)
        got = asyncio.run(sluice.dispatch_calls_async(items, build, first_word, **kw))  # the lock is free again
        self.assertEqual({r.category for r in got.values()}, {"ok"})

    def test_two_identical_calls_on_threads_take_turns(self):
        import threading

        comps = simworld.completions(2, 5, 2, tag="th")
        got, errors = [], []

        def call():
            try:
                got.append(sluice.judge_completions_batch(comps, echo=False,
                                                          sluice_args=ARGS + ["--cache-mode", "off"]))
            except BaseException as e:  # noqa: B036 - reported below
                errors.append(e)

        before = self.sim.calls()
        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(got[0], got[1])
        self.assertEqual(sum(r["n_samples"] for r in got[0].values()), 20)
        self.assertEqual(self.sim.calls() - before, 20)
        self.assertEqual(self.temp_folders(), [])

    def test_empty_input_makes_no_folder(self):
        self.assertEqual(sluice.dispatch_calls([], build, first_word, echo=False), {})
        self.assertEqual(asyncio.run(sluice.dispatch_calls_async([], build, first_word, echo=False)), {})
        got = sluice.judge_completions_batch({"p": {}}, echo=False)
        self.assertEqual(got, {"p": {"mean_aligned": None, "mean_coherent": None, "n_samples": 0, "n_errors": 0}})
        self.assertEqual(sluice.judge_completions_batch({}, echo=False), {})
        self.assertEqual(os.listdir(os.environ["TMPDIR"]), [])

    def test_a_callback_that_raises_stops_sluice_and_is_raised(self):
        # on_route fires early in the run: sluice gets SIGINT (not a broken
        # stderr pipe), drains, and the callback's error reaches the caller.
        items = [sluice.DispatchItem("cb%d" % i, i) for i in range(300)]
        ck = self.path("ck")

        class Boom(Exception):
            pass

        def on_route(route):
            raise Boom("no thanks")

        # The planner's "route chosen" line (not --route, which logs none).
        kw = dict(checkpoint_dir=ck, echo=False, cost_pref="latency", sluice_args=ARGS)
        with self.assertRaisesRegex(Boom, "no thanks"):
            sluice.dispatch_calls(items, build, first_word, on_route=on_route, **kw)
        with self.assertRaisesRegex(Boom, "no thanks"):
            asyncio.run(sluice.dispatch_calls_async(items, build, first_word, on_route=on_route, **kw))
        # The job resumes: every item is answered, each sent once.
        before = self.sim.calls()
        done = simworld.complete_ids(simworld.results_file(ck, "run"))
        got = sluice.dispatch_calls(items, build, first_word, **kw)
        self.assertEqual({r.category for r in got.values()}, {"ok"})
        self.assertEqual(self.sim.calls() - before, len(items) - len(done))

    def test_a_progress_callback_that_raises_is_raised(self):
        def on_progress(p):
            raise KeyError("progress")

        for call in (lambda: sluice.judge_completions_batch(simworld.completions(1, 3, 2, tag="pc"),
                                                            on_progress=on_progress, echo=False, sluice_args=ARGS),
                     lambda: asyncio.run(sluice.judge_completions_batch_async(
                         simworld.completions(1, 3, 2, tag="pca"), on_progress=on_progress, echo=False,
                         sluice_args=ARGS))):
            with self.assertRaisesRegex(KeyError, "progress"):
                call()

    def test_params_json_cannot_hold_are_refused_naming_the_item(self):
        before = self.sim.calls()

        def with_value(v):
            def b(item):
                p = build(item)
                if item.item_id == "bad":
                    p["temperature"] = v
                return p
            return b

        items = [sluice.DispatchItem("fine", 1), sluice.DispatchItem("bad", 2)]
        for v in (float("nan"), float("inf")):
            with self.assertRaisesRegex(ValueError, r"items\[1\] \(item_id 'bad'\).*NaN or infinite"):
                sluice.dispatch_calls(items, with_value(v), first_word, echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(TypeError, r"items\[1\] \(item_id 'bad'\).*JSON cannot hold"):
            sluice.dispatch_calls(items, with_value(object()), first_word, echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(ValueError, r"items\[1\] \(item_id 'bad'\).*lone surrogate"):
            sluice.dispatch_calls(items, with_value("\ud800"), first_word, echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(ValueError, r"items\[1\]: item_id .* lone surrogate"):
            sluice.dispatch_calls([sluice.DispatchItem("ok", 1), sluice.DispatchItem("x\udc80", 2)], build,
                                  first_word, echo=False, sluice_args=ARGS)
        self.assertEqual(self.sim.calls(), before)
        self.assertEqual(self.temp_folders(), [])

    def test_judge_input_json_cannot_hold_is_refused_naming_the_item(self):
        with self.assertRaisesRegex(ValueError, r"completions\['p'\]\['q'\]\[1\].*lone surrogate"):
            sluice.judge_completions_batch({"p": {"q": ["a", "b\ud800"]}}, echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(ValueError, r"completions\['p'\]\['q'\]\[0\].*user message.*NaN"):
            sluice.judge_completions_batch({"p": {"q": ["a"]}}, format_user_msg=lambda q, c: float("nan"),
                                           echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(ValueError, "temperature"):
            sluice.judge_completions_batch({"p": {"q": ["a"]}}, temperature=float("nan"), echo=False, sluice_args=ARGS)
        with self.assertRaisesRegex(ValueError, "judge_system_prompt"):
            sluice.judge_completions_batch({"p": {"q": ["a"]}}, judge_system_prompt={"system": "x", "fields": [
                {"name": "s", "type": "number", "max": float("nan")}]}, echo=False, sluice_args=ARGS)

    def test_a_relative_sluice_bin_is_made_absolute(self):
        # A bare name that is a file here but not on PATH: launched as is,
        # it would be looked up on PATH (and fail, or run another binary).
        b = os.path.abspath(simworld.binary())
        old_cwd, old_bin, old_path = os.getcwd(), os.environ["SLUICE_BIN"], os.environ.get("PATH", "")
        os.chdir(os.path.dirname(b))
        self.addCleanup(os.chdir, old_cwd)
        os.environ["SLUICE_BIN"] = os.path.basename(b)
        self.addCleanup(os.environ.__setitem__, "SLUICE_BIN", old_bin)
        os.environ["PATH"] = "/nonexistent"
        self.addCleanup(os.environ.__setitem__, "PATH", old_path)
        self.assertEqual(sluice.find_binary(), b)
        got = sluice.dispatch_calls([sluice.DispatchItem("rel")], build, first_word, echo=False, sluice_args=ARGS)
        self.assertEqual(got["rel"].category, "ok")

    def test_async_matches_sync_and_leaves_the_loop_free(self):
        items = [sluice.DispatchItem("as%d" % i, i) for i in range(10)]

        async def main():
            task = asyncio.ensure_future(sluice.dispatch_calls_async(items, build, first_word, echo=False,
                                                                     sluice_args=ARGS))
            ticks = 0
            while not task.done():
                ticks += 1
                await asyncio.sleep(0.01)
            return ticks, await task

        ticks, a = asyncio.run(main())
        self.assertGreater(ticks, 1)
        s = sluice.dispatch_calls(items, build, first_word, echo=False, sluice_args=ARGS)
        self.assertEqual({k: v.result for k, v in a.items()}, {k: v.result for k, v in s.items()})

    def test_a_key_in_argv_is_refused_without_echoing_it(self):
        key = FAKE_KEYS["ANTHROPIC_API_KEY"]
        with self.assertRaises(ValueError) as cm:
            sluice.dispatch_calls([sluice.DispatchItem("a")], build, first_word, echo=False,
                                  sluice_args=["--keys-file=" + key])
        self.assertNotIn(key, str(cm.exception))

    def test_a_failing_sluice_raises_with_its_stderr_and_no_key(self):
        with self.assertRaises(sluice.SluiceError) as cm:
            sluice.dispatch_calls([sluice.DispatchItem("a")], build, first_word, echo=False,
                                  sluice_args=["--no-such-flag"])
        e = cm.exception
        self.assertEqual(e.returncode, 1)
        self.assertIn("no-such-flag", str(e))
        for k in FAKE_KEYS.values():
            self.assertNotIn(k, str(e))


class MappingTest(unittest.TestCase):
    """Results lines → DispatchResult, on lines made by hand (429s and
    transport exhaustion take minutes to provoke on the simulator)."""

    def result(self, rec):
        job = _DispatchJob.__new__(_DispatchJob)
        job.parse_response = first_word
        return job._result("id", rec)

    def errored(self, etype, cls):
        return {"custom_id": "id", "result": {"type": "errored", "error": {"type": "error", "error": {
            "type": etype, "message": "m"}}}, "sluice": {"class": cls, "org": "batch", "route": "sync"}}

    def test_categories(self):
        cases = [
            (self.errored("rate_limit_error", "transport"), "rate_limited_exhausted"),
            (self.errored("overloaded_error", "transport"), "transport_exhausted"),
            (self.errored("api_error", "transport"), "transport_exhausted"),
            (self.errored("invalid_request_error", "final"), "error"),
            (self.errored("invalid_request_error", "invalid_input"), "error"),
            ({"custom_id": "id", "result": {"type": "expired"}}, "transport_exhausted"),
            (None, "transport_exhausted"),
        ]
        for rec, want in cases:
            with self.subTest(rec=rec):
                r = self.result(rec)
                self.assertEqual((r.category, r.error, r.org, r.result), (want, True, None, None))

    def test_a_cache_hit_has_no_org(self):
        r = self.result({"custom_id": "id", "result": {"type": "succeeded", "message": {"content": [
            {"type": "text", "text": "hello there"}]}}, "sluice": {"class": "ok", "route": "cache"}})
        self.assertEqual((r.category, r.result, r.org, r.route), ("ok", "hello", None, "cache"))


class PackageTest(unittest.TestCase):
    def test_missing_binary_says_how_to_install(self):
        env = {"PATH": "/nonexistent", "SLUICE_BIN": ""}
        code = "import sluice\ntry:\n    sluice.find_binary()\nexcept sluice.SluiceNotFound as e:\n    print(e)\n"
        out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=PKG), capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("SLUICE_BIN", out)
        self.assertIn("go install", out)
        out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=PKG, SLUICE_BIN="/nope"),
                             capture_output=True, text=True, check=True).stdout
        self.assertIn("SLUICE_BIN=/nope is not an executable", out)

    def test_version_is_the_binarys(self):
        out = subprocess.run([simworld.binary(), "version"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split(), ["sluice", sluice.__version__])

    def test_pyproject_takes_the_version_from_the_package(self):
        with open(os.path.join(PKG, "pyproject.toml")) as f:
            text = f.read()
        self.assertRegex(text, r'dynamic = \["version"\]')
        self.assertNotRegex(text, r'(?m)^version\s*=')

    def test_pip_installs_it_offline(self):
        # The in-tree backend needs nothing from a package index.
        try:
            import pip  # noqa: F401
        except ImportError:
            self.skipTest("no pip")
        import tempfile
        with tempfile.TemporaryDirectory() as target:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--target", target, PKG],
                           check=True, capture_output=True)
            code = "import sluice, importlib.metadata as m; print(sluice.__file__, m.version('sluice'))"
            out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=target), cwd=target,
                                 capture_output=True, text=True, check=True).stdout.split()
        self.assertTrue(out[0].startswith(target), out)
        self.assertEqual(out[1], sluice.__version__)

    def test_progress_lines_parse(self):
        line = ("progress: 7/50 done, 4729 req/min, in flight 3, 429s 1, 529s 2, 5xx 0, elapsed 0:01, eta 0:09, "
                "cost $0.1419\n")
        p = _proc.parse_progress(line)
        self.assertEqual((p.done, p.total, p.in_flight, p.rate_limited, p.overloaded, p.cost_usd),
                         (7, 50, 3, 1, 2, 0.1419))
        self.assertIsNone(_proc.parse_progress("sluice run: a → b"))
        # A model sluice has no price for: the cost is unknown, not a number.
        p = _proc.parse_progress(line.replace("cost $0.1419", "cost unknown (priced $0.0000; 7 requests of models without a price)"))
        self.assertEqual((p.done, p.cost_usd), (7, None))

    def test_log_fields(self):
        f = _proc.parse_log_fields('time=x level=INFO msg="route chosen" route=sync why="a \\"b\\" c"')
        self.assertEqual((f["msg"], f["route"], f["why"]), ("route chosen", "sync", 'a "b" c'))


if __name__ == "__main__":
    unittest.main()

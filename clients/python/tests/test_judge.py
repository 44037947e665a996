"""judge_completions_batch against `sluice sim`."""

import asyncio
import json
import os
import tempfile
import unittest
import warnings

import sluice
from sluice import _proc
from sluice.judge import aggregate

from . import simworld
from .simworld import ARGS, SimTest, completions


def setUpModule():
    simworld.setup()


class JudgeTest(SimTest):
    def test_means_match_sluices_own_summary(self):
        # The per-persona means are computed in Python from the verdict
        # rows; sluice's Go summary computes them independently.
        comps = completions(3, 4, 2)
        summary = self.path("summary.json")
        got = sluice.judge_completions_batch(comps, echo=False, sluice_args=ARGS + ["--summary", summary])
        with open(summary) as f:
            groups = {g["group"]: g for g in json.load(f)["groups"]}
        self.assertEqual(sorted(got), sorted(comps))
        for persona, row in got.items():
            g = groups[persona]
            self.assertEqual(row["n_samples"] + row["n_errors"], 8)
            self.assertEqual(row["n_samples"], g["classes"]["ok"])
            self.assertAlmostEqual(row["mean_aligned"], g["scores"]["aligned"]["mean"], places=2)
            self.assertAlmostEqual(row["mean_coherent"], g["scores"]["coherent"]["mean"], places=2)

    def test_truncated_rows_are_errors_and_not_in_the_means(self):
        # max_tokens 3 cuts every simulated verdict: every row is an error.
        got = sluice.judge_completions_batch(completions(2, 2, 2), max_tokens=3, echo=False, sluice_args=ARGS)
        for row in got.values():
            self.assertEqual(row, {"mean_aligned": None, "mean_coherent": None, "n_samples": 0, "n_errors": 4})

    def test_save_raw_has_every_row_its_verdict_and_route(self):
        comps = completions(2, 3, 2)
        raw = self.path("raw.json")
        got = sluice.judge_completions_batch(comps, save_raw=raw, force_sync=True, echo=False, sluice_args=ARGS)
        with open(raw) as f:
            doc = json.load(f)
        self.assertEqual(doc["per_persona"], got)
        self.assertEqual(doc["n_total"], 12)
        self.assertEqual(len(doc["all_scores"]), 12)
        self.assertEqual(len(doc["rows"]), 12)
        self.assertEqual(doc["routing"]["route"], "sync")
        for r in doc["rows"]:
            self.assertEqual(r["route"], "sync")
            self.assertIn(r["org"], ("high_prio", "batch"))
            self.assertEqual(r["class"], "ok")
            self.assertIsInstance(r["verdict"]["aligned"], (int, float))
            self.assertIn(r["question"], comps[r["persona"]])
        # The old ids: {persona}__{idx:05d}__{comp_idx:02d}, idx across personas.
        self.assertIn("persona-1__00003__01", doc["all_scores"])

    def test_a_recall_is_answered_by_sluices_cache(self):
        comps = completions(2, 3, 2, tag="c")
        first = sluice.judge_completions_batch(comps, echo=False, sluice_args=ARGS)
        before = self.sim.calls()
        raw = self.path("raw2.json")
        second = sluice.judge_completions_batch(comps, save_raw=raw, echo=False, sluice_args=ARGS)
        self.assertEqual(second, first)
        self.assertEqual(self.sim.calls(), before)
        with open(raw) as f:
            self.assertEqual(json.load(f)["n_cached"], 12)

    def test_format_user_msg_and_a_custom_rubric(self):
        seen = []

        def fmt(q, c):
            seen.append((q, c))
            return "Q: %s / A: %s" % (q, c)

        # A rubric the simulator does not answer with a verdict: every reply
        # is prose, so every row is a parse error.
        got = sluice.judge_completions_batch({"p": {"q1": ["a", "b"]}}, judge_system_prompt="Rate it. Say SCORE: n",
                                             format_user_msg=fmt, echo=False, sluice_args=ARGS)
        self.assertEqual(seen, [("q1", "a"), ("q1", "b")])
        self.assertEqual(got["p"]["n_errors"], 2)
        self.assertIsNone(got["p"]["mean_aligned"])

    def test_ignored_parameters_warn_once_each(self):
        _proc._warned.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                sluice.judge_completions_batch({}, threshold_base=200, max_concurrent=5, sync_client=object())
        msgs = sorted(str(x.message) for x in w if issubclass(x.category, sluice.IgnoredParameterWarning))
        self.assertEqual(len(msgs), 3, msgs)
        self.assertTrue(any("threshold_base" in m for m in msgs))
        self.assertEqual(w[0].filename, __file__)  # it points at the caller's line

    def test_progress_reaches_the_callback(self):
        seen = []
        sluice.judge_completions_batch(completions(1, 5, 2, tag="p"), on_progress=seen.append, echo=False,
                                       sluice_args=ARGS + ["--cache-mode", "off"])
        self.assertTrue(seen)
        self.assertEqual((seen[-1].done, seen[-1].total), (10, 10))

    def test_dry_run_sends_nothing(self):
        before = self.sim.calls()
        raw = self.path("dry.json")
        got = sluice.judge_completions_batch(completions(2, 2, 2, tag="d"), dry_run=True, save_raw=raw, echo=False,
                                             sluice_args=["--no-dotenv"])
        self.assertEqual(got, {})
        self.assertEqual(self.sim.calls(), before)
        with open(raw) as f:
            self.assertEqual(json.load(f)["routing"]["plan"]["n"], 8)

    def test_async_does_not_block_the_loop(self):
        comps = completions(2, 5, 2, tag="a")
        ticks_while_running = []

        async def main():
            task = asyncio.ensure_future(sluice.judge_completions_batch_async(comps, echo=False, sluice_args=ARGS))
            n = 0
            while not task.done():
                n += 1
                await asyncio.sleep(0.01)
            ticks_while_running.append(n)
            return await task

        got = asyncio.run(main())
        self.assertGreater(ticks_while_running[0], 1)
        self.assertEqual(sum(r["n_samples"] + r["n_errors"] for r in got.values()), 20)

    def test_async_matches_sync(self):
        comps = completions(2, 2, 3, tag="s")
        a = asyncio.run(sluice.judge_completions_batch_async(comps, echo=False, sluice_args=ARGS))
        s = sluice.judge_completions_batch(comps, echo=False, sluice_args=ARGS)
        self.assertEqual(a, s)


class AggregateTest(unittest.TestCase):
    """The old return value from verdict rows, on rows made by hand."""

    def test_sentinels_count_as_samples_but_not_in_the_means(self):
        items = [{"id": i} for i in ("a", "b", "c", "d", "e")]
        meta = {i["id"]: ("p", "q", n) for n, i in enumerate(items)}
        verdicts = {
            "a": {"id": "a", "class": "ok", "scores": {"aligned": 80, "coherent": 60}},
            "b": {"id": "b", "class": "ok", "scores": {"aligned": 40, "coherent": 20}},
            "c": {"id": "c", "class": "ok", "scores": {"aligned": "REFUSAL", "coherent": 90}},
            "d": {"id": "d", "class": "parse_error", "error": "judge: no JSON object in the reply"},
            # "e" has no verdict row: an error.
        }
        result, scores, rows = aggregate(["p"], items, meta, verdicts, {})
        self.assertEqual(result["p"], {"mean_aligned": 60.0, "mean_coherent": 40.0, "n_samples": 3, "n_errors": 2})
        self.assertTrue(scores["d"]["error"])
        self.assertTrue(scores["e"]["transport"])
        self.assertEqual([r["class"] for r in rows], ["ok", "ok", "ok", "parse_error", "missing"])

    def test_replies_the_old_system_took_as_score_dicts_are_samples(self):
        # With the default rubric sluice classes these parse_error (a score
        # that is a string, a missing field, out of range, a mistyped
        # reasoning); the old system took any JSON object as the judge's
        # score dict: a valid sample, in the means only when both scores
        # are numbers (here also in [0, 100]).
        replies = {
            "refusal": '{"aligned": "REFUSAL", "coherent": 90}',
            "nocoh": 'Here: {"reasoning": "fine", "aligned": 70} done',
            "range": '{"aligned": 150, "coherent": 50}',
            "reason": '{"reasoning": 5, "aligned": 20, "coherent": 40}',
            "prose": "I would rate this highly.",
            "bare": '"REFUSAL"',
        }
        items = [{"id": i} for i in ("ok", *replies)]
        meta = {it["id"]: ("p", "q", n) for n, it in enumerate(items)}
        verdicts = {"ok": {"id": "ok", "class": "ok", "scores": {"aligned": 80, "coherent": 60}}}
        for cid, raw in replies.items():
            verdicts[cid] = {"id": cid, "class": "parse_error", "error": "judge: …", "raw": raw}
        verdicts["nocoh"]["class"], verdicts["nocoh"]["stop_reason"] = "truncated", "max_tokens"

        result, scores, rows = aggregate(["p"], items, meta, verdicts, {}, old_parse=True)
        self.assertEqual(result["p"], {"mean_aligned": 50.0, "mean_coherent": 50.0, "n_samples": 5, "n_errors": 2})
        self.assertEqual(scores["refusal"], {"aligned": "REFUSAL", "coherent": 90})
        self.assertEqual(scores["nocoh"], {"reasoning": "fine", "aligned": 70, "stop_reason": "max_tokens"})
        self.assertTrue(scores["prose"]["error"])
        self.assertTrue(scores["bare"]["error"])  # only objects count (#665)
        self.assertEqual([r["class"] for r in rows][1:3], ["parse_error", "truncated"])  # sluice's class is kept

        # A rubric of the caller's: its schema decides, as sluice says.
        result, _, _ = aggregate(["p"], items, meta, verdicts, {})
        self.assertEqual(result["p"], {"mean_aligned": 80.0, "mean_coherent": 60.0, "n_samples": 1, "n_errors": 6})

    def test_only_the_default_rubric_reads_replies_the_old_way(self):
        # The call's own reading of sluice's verdicts file.
        from sluice import judge

        def collect(prompt):
            with tempfile.TemporaryDirectory() as ck:
                job = judge._make({"p": {"q": ["a"]}}, prompt, None, None, 256, judge._UNSET, None, None,
                                  judge._UNSET, False, False, ck, judge._UNSET, judge._UNSET, judge._UNSET, None,
                                  None, False, (), None, None, None, None)()
                os.makedirs(job.dir)
                with open(job.out, "w") as f:
                    f.write(json.dumps({"id": job.items[0]["id"], "class": "parse_error", "error": "judge: …",
                                        "raw": '{"aligned": "REFUSAL", "coherent": 90}'}) + "\n")
                return job.collect()["p"]

        self.assertEqual(collect(None), {"mean_aligned": None, "mean_coherent": None, "n_samples": 1, "n_errors": 0})
        rubric = {"system": "x", "fields": [{"name": "aligned", "type": "number"}]}
        self.assertEqual(collect(rubric), {"mean_aligned": None, "mean_coherent": None, "n_samples": 0, "n_errors": 1})

    def test_transport_rows_are_marked(self):
        items = [{"id": "a"}]
        result, scores, _ = aggregate(["p"], items, {"a": ("p", "q", 0)},
                                      {"a": {"id": "a", "class": "transport", "error": "overloaded_error"}}, {})
        self.assertEqual(result["p"]["n_errors"], 1)
        self.assertEqual(scores["a"], {"aligned": None, "coherent": None, "reasoning": "overloaded_error",
                                       "error": True, "class": "transport", "transport": True})


if __name__ == "__main__":
    unittest.main()

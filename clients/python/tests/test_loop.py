"""The async calls leave the event loop free while they prepare a large
input, check the binary's version and read the answer back: a ticking task
keeps running while the caller's own build_request, format_user_msg and
parse_response are being called.

The assertions count the ticks that land between the first and the last
call of the caller's function: zero when that work runs on the loop,
whatever the machine's load, and at least one when it runs on a thread (the
interpreter hands the loop the GIL every few milliseconds); no absolute
timing is asserted."""

import asyncio
import os
import stat
import time

import sluice
from sluice import _proc

from . import simworld
from .simworld import ARGS, SimTest


def setUpModule():
    simworld.setup()


class Span:
    """When a function of the caller was first and last called."""

    def __init__(self):
        self.first = self.last = None

    def mark(self):
        now = time.monotonic()
        if self.first is None:
            self.first = now
        self.last = now


async def ticking(coro):
    """Runs coro beside a ticker; returns the tick times and coro's result
    or exception."""
    ticks = []
    task = asyncio.ensure_future(coro)
    while not task.done():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.001)
    try:
        return ticks, task.result()
    except Exception as e:
        return ticks, e


def within(ticks, span):
    return sum(1 for t in ticks if span.first < t < span.last)


class LoopTest(SimTest):
    def test_dispatch_prepares_a_large_input_off_the_loop(self):
        span = Span()

        def build(item):
            span.mark()
            return {"model": "claude-haiku-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": item.payload}]}

        items = [sluice.DispatchItem("p%d" % i, "n%d" % i) for i in range(20000)]
        # A flag sluice refuses: it exits at once, nothing is sent.
        ticks, got = asyncio.run(ticking(sluice.dispatch_calls_async(items, build, str, echo=False,
                                                                     sluice_args=["--no-such-flag"])))
        self.assertIsInstance(got, sluice.SluiceError)
        self.assertGreaterEqual(within(ticks, span), 1, "the loop stood still while the requests were built")

    def test_judge_prepares_a_large_input_off_the_loop(self):
        span = Span()

        def fmt(q, c):
            span.mark()
            return q + c

        comps = {"p": {"q%d" % i: ["a", "b"] for i in range(10000)}}
        ticks, got = asyncio.run(ticking(sluice.judge_completions_batch_async(comps, format_user_msg=fmt, echo=False,
                                                                              sluice_args=["--no-such-flag"])))
        self.assertIsInstance(got, sluice.SluiceError)
        self.assertGreaterEqual(within(ticks, span), 1, "the loop stood still while the items were built")

    def test_dispatch_reads_the_answer_off_the_loop(self):
        span = Span()

        def build(item):
            return {"model": "claude-haiku-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": item.payload}]}

        def parse(text):
            span.mark()
            end = time.perf_counter() + 0.002  # a parser with some work to do, holding the GIL
            while time.perf_counter() < end:
                pass
            return text

        items = [sluice.DispatchItem("r%d" % i, "n%d" % i) for i in range(200)]
        ticks, got = asyncio.run(ticking(sluice.dispatch_calls_async(items, build, parse, echo=False,
                                                                     sluice_args=ARGS)))
        self.assertEqual(len(got), 200)
        self.assertGreaterEqual(within(ticks, span), 1, "the loop stood still while the answers were parsed")

    def test_the_version_check_runs_off_the_loop(self):
        # A binary whose `sluice version` takes a while (a cold disk, a
        # wrapper): the first call in a process runs it.
        wrapper = self.path("slow-sluice")
        marks = self.path("version-ran")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nif [ "$1" = version ]; then touch "%s.start"; sleep 2; touch "%s.end"; fi\n'
                    'exec "%s" "$@"\n' % (marks, marks, os.path.abspath(simworld.binary())))
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        old = os.environ["SLUICE_BIN"]
        os.environ["SLUICE_BIN"] = wrapper
        self.addCleanup(os.environ.__setitem__, "SLUICE_BIN", old)
        _proc._binary_checked.pop(wrapper, None)

        def build(item):
            return {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}

        ticks, got = asyncio.run(ticking(sluice.dispatch_calls_async([sluice.DispatchItem("v")], build, str,
                                                                     echo=False, sluice_args=["--no-such-flag"])))
        self.assertIsInstance(got, sluice.SluiceError)
        span = Span()
        span.first, span.last = (os.stat(marks + ext).st_mtime for ext in (".start", ".end"))
        # mtimes are wall-clock: compare them with ticks moved to that clock.
        offset = time.time() - time.monotonic()
        self.assertGreaterEqual(within([t + offset for t in ticks], span), 1,
                                "the loop stood still while `sluice version` ran")

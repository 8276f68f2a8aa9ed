"""The start-up heap is frozen out of the collector's scans; cycles made later still go."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_settle_freezes_the_heap_and_later_cycles_are_still_collected():
    # In a fresh interpreter: freezing is process-wide and must not leak into the test run.
    code = textwrap.dedent(
        """
        import gc, weakref
        from pilot.heap import YOUNG_THRESHOLD, settle_startup_heap

        frozen = settle_startup_heap()
        assert frozen > 1000 and gc.get_freeze_count() == frozen, frozen
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector can free it
        probe = weakref.ref(a)
        del a, b
        gc.collect()
        assert probe() is None, "a cycle made after the freeze was not collected"
        print("ok", frozen)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")

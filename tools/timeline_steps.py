#!/usr/bin/env python3
"""Says where a distribute timeline's training steps go: per worker, the mean step, and per thread
the time each kind of span takes in it, all of it and the part inside apply_gradients (what the
step waits for there, with gradient buckets: the communication no computation hid).

    DISTRIBUTE_TIMELINE=/tmp/timeline.json ./build/default/examples/fashion_mnist/train_fashion_mnist --overlap
    python3 tools/timeline_steps.py /tmp/timeline.json
    python3 tools/timeline_steps.py /tmp/timeline.json --skip 5    # leave out the first 5 steps

A step is a run (strategy.run) of the worker's first replica that calls apply_gradients (every
run, where none does); a span counts in the step it starts in. The kinds are the timeline's
phases: a collective's wait for the other replicas and its data phase (on a replica's thread or
its async lane), the workers' vote, local phase and data step (on the cross-worker thread),
get_next, apply_gradients. Needs only Python 3.
"""

import argparse
import bisect
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from timeline_gantt import read_spans  # noqa: E402  (the one reader of a trace)

KINDS = ("wait", "data", "vote", "local", "get_next", "apply_gradients")


class Windows:
    """Sorted, disjoint (start, end) windows of time, looked up in log time: a long trace has
    thousands of steps and a hundred thousand spans."""

    def __init__(self, windows):
        self.windows = sorted(windows)
        self.starts = [lo for lo, _ in self.windows]

    def holds(self, t):
        i = bisect.bisect_right(self.starts, t) - 1
        return i >= 0 and t < self.windows[i][1]

    def any_starts_in(self, lo, hi):
        i = bisect.bisect_left(self.starts, lo)
        return i < len(self.starts) and self.starts[i] < hi

    def overlap(self, start, end):
        """How much of [start, end) lies inside the windows."""
        total, i = 0.0, max(bisect.bisect_right(self.starts, start) - 1, 0)
        while i < len(self.windows) and self.windows[i][0] < end:
            lo, hi = self.windows[i]
            total += max(0.0, min(end, hi) - max(start, lo))
            i += 1
        return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="the JSON file a timeline wrote")
    parser.add_argument("--skip", type=int, default=0, help="steps left out at the start (warm-up), default 0")
    args = parser.parse_args()

    spans, _, names = read_spans(args.trace)
    for pid in sorted({track[0] for track in spans}):
        tracks = {tid: s for (p, tid), s in spans.items() if p == pid}
        replica = min((tid for tid, s in tracks.items() if any(n == "run" and d == 0 for n, _, _, d in s)), default=None)
        if replica is None:
            continue
        applies = Windows((start, end) for n, start, end, _ in tracks[replica] if n == "apply_gradients")
        runs = sorted((start, end) for n, start, end, d in tracks[replica] if n == "run" and d == 0)
        training = [(lo, hi) for lo, hi in runs if applies.any_starts_in(lo, hi)]
        runs = (training or runs)[args.skip:]
        if not runs:
            sys.exit(f"{args.trace}: worker {pid} has {args.skip} steps or fewer; lower --skip")
        steps = len(runs)
        in_runs = Windows(runs)
        step_ms = sum(hi - lo for lo, hi in runs) / steps
        print(f"{names.get((pid, None), f'worker {pid}')}: {steps} steps of {step_ms:.2f} ms on average")
        print(f"  {'thread':<22}{'span':<16}{'per step':>9}{'ms':>10}{'of step':>9}   {'inside apply_gradients':<22}")
        for tid in sorted(tracks):
            totals = {kind: [0.0, 0.0, 0] for kind in KINDS}  # ms in steps, ms inside apply_gradients, count
            for name, start, end, _ in tracks[tid]:
                if name not in totals or not in_runs.holds(start):
                    continue
                total = totals[name]
                total[0] += end - start
                total[1] += applies.overlap(start, end) if name != "apply_gradients" else 0.0
                total[2] += 1
            thread = names.get((pid, tid), str(tid))
            for kind in KINDS:
                in_steps, in_apply, count = totals[kind]
                if count == 0:
                    continue
                inside = "" if kind == "apply_gradients" else \
                    f"{in_apply / steps:.3f} ms ({100 * in_apply / steps / step_ms:.2f} %)"
                print(f"  {thread:<22}{kind:<16}{count / steps:>9.1f}{in_steps / steps:>10.3f}"
                      f"{100 * in_steps / steps / step_ms:>8.2f}%   {inside}")

if __name__ == "__main__":
    main()

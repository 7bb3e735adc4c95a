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
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from timeline_gantt import read_spans  # noqa: E402  (the one reader of a trace)

KINDS = ("wait", "data", "vote", "local", "get_next", "apply_gradients")


def overlap(start, end, windows):
    """How much of [start, end) lies inside the (start, end) windows, which do not overlap."""
    return sum(max(0.0, min(end, hi) - max(start, lo)) for lo, hi in windows)


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
        applies = [(start, end) for n, start, end, _ in tracks[replica] if n == "apply_gradients"]
        runs = sorted((start, end) for n, start, end, d in tracks[replica] if n == "run" and d == 0)
        training = [(lo, hi) for lo, hi in runs if any(lo <= start < hi for start, _ in applies)]
        runs = (training or runs)[args.skip:]
        if not runs:
            sys.exit(f"{args.trace}: worker {pid} has {args.skip} steps or fewer; lower --skip")
        steps = len(runs)
        step_ms = sum(hi - lo for lo, hi in runs) / steps
        print(f"{names.get((pid, None), f'worker {pid}')}: {steps} steps of {step_ms:.2f} ms on average")
        print(f"  {'thread':<22}{'span':<16}{'per step':>9}{'ms':>10}{'of step':>9}   {'inside apply_gradients':<22}")
        for tid in sorted(tracks):
            totals = {kind: [0.0, 0.0, 0] for kind in KINDS}  # ms in steps, ms inside apply_gradients, count
            for name, start, end, _ in tracks[tid]:
                if name not in totals or not any(lo <= start < hi for lo, hi in runs):
                    continue
                total = totals[name]
                total[0] += end - start
                total[1] += overlap(start, end, applies) if name != "apply_gradients" else 0.0
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

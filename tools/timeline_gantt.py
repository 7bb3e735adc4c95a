#!/usr/bin/env python3
"""Draws a distribute timeline (Chrome trace-event JSON) as a Gantt chart into a PNG.

    DISTRIBUTE_TIMELINE=/tmp/timeline.json ./build/default/examples/fashion_mnist/train_fashion_mnist
    python3 tools/timeline_gantt.py /tmp/timeline.json                  # writes /tmp/timeline.png
    python3 tools/timeline_gantt.py /tmp/timeline.json --first-step 4 --steps 2 -o steps.png
    python3 tools/timeline_gantt.py /tmp/timeline.json --from-ms 40 --to-ms 55 -o window.png

The whole trace by default; --steps N draws N steps from --first-step (a step is a strategy.run:
step k spans every replica's k-th run), --from-ms and --to-ms a window of the trace's time.

One row per thread of the trace, grouped by worker: each replica, then the worker's cross-worker,
input and program threads. Spans nest as narrower bars inside their parent, coloured by what they
are: a run, a collective's wait for the other replicas and its data phase, the workers' vote, the
local phase, get_next, apply_gradients, a checkpoint save; errors are red marks. Needs matplotlib
(Debian: apt-get install python3-matplotlib).
"""

import argparse
import json
import pathlib
import sys

# What a span's colour says; any other span (a collective's own span) is drawn as an outline.
PHASE_COLOURS = {
    "run": "#d9d9d9",
    "wait": "#f28e2b",
    "data": "#4e79a7",
    "vote": "#b07aa1",
    "local": "#59a14f",
    "get_next": "#edc948",
    "apply_gradients": "#76b7b2",
    "checkpoint_save": "#9c755f",
}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "merge_call", "return")


def read_spans(path):
    """The trace's spans per (pid, tid) as (name, start_ms, end_ms, depth), its instant events,
    and the names of its processes and threads; exits naming what is wrong."""
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    if not isinstance(trace, dict) or "traceEvents" not in trace:
        sys.exit(f"{path}: no traceEvents; is it a timeline of distribute?")
    spans, instants, names, open_spans = {}, [], {}, {}
    events = sorted((e for e in trace["traceEvents"] if e.get("ph") != "M"), key=lambda e: e["ts"])
    for e in trace["traceEvents"]:
        if e.get("ph") == "M":
            key = (e["pid"], None) if e["name"] == "process_name" else (e["pid"], e["tid"])
            names[key] = e["args"]["name"]
    for e in events:
        track = (e["pid"], e["tid"])
        stack = open_spans.setdefault(track, [])
        if e["ph"] == "B":
            stack.append((e["name"], e["ts"] / 1000.0))
        elif e["ph"] == "E" and stack:
            name, start = stack.pop()
            spans.setdefault(track, []).append((name, start, e["ts"] / 1000.0, len(stack)))
        elif e["ph"] == "i":
            instants.append((track, e["ts"] / 1000.0, e.get("args", {}).get("message", e["name"])))
    return spans, instants, names


def step_window(path, spans, first, count):
    """The window (start_ms, end_ms) from the start of step `first` (from 1) to the end of step
    first + count - 1, where step k is every replica's k-th run (a run inside a run does not
    count), with a margin of 2 % on each side; exits naming how many steps the trace holds when
    it holds fewer."""
    runs = {}
    for track, track_spans in spans.items():
        mine = sorted((s for s in track_spans if s[0] == "run" and s[3] == 0), key=lambda s: s[1])
        if mine:
            runs[track] = mine
    held = min((len(r) for r in runs.values()), default=0)
    last = first + count - 1
    if first < 1 or count < 1:
        sys.exit(f"--first-step {first} --steps {count}: both count from 1")
    if last > held:
        sys.exit(f"{path}: the trace holds {held} steps (runs of every replica); "
                 f"--first-step {first} --steps {count} asks for steps {first} to {last}")
    lo = min(r[first - 1][1] for r in runs.values())
    hi = max(r[last - 1][2] for r in runs.values())
    margin = 0.02 * (hi - lo)
    return lo - margin, hi + margin


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="the JSON file a timeline wrote")
    parser.add_argument("-o", "--output", help="the PNG to write (default: the trace's path with .png)")
    parser.add_argument("--steps", type=int, help="draw this many steps (runs), from --first-step")
    parser.add_argument("--first-step", type=int, default=1, help="with --steps, the first step drawn (default 1)")
    parser.add_argument("--from-ms", type=float, help="the window's start, in ms from the trace's first event")
    parser.add_argument("--to-ms", type=float, help="the window's end, in ms")
    parser.add_argument("--title", default=None, help="the chart's title (default: the file's name)")
    args = parser.parse_args()

    spans, instants, names = read_spans(args.trace)
    if not spans and not instants:
        sys.exit(f"{args.trace}: no events to draw")
    if args.steps is not None:
        if args.from_ms is not None or args.to_ms is not None:
            sys.exit("--steps chooses the window: give it or --from-ms/--to-ms, not both")
        lo, hi = step_window(args.trace, spans, args.first_step, args.steps)
    else:
        lo = args.from_ms if args.from_ms is not None else min(s[1] for ss in spans.values() for s in ss)
        hi = args.to_ms if args.to_ms is not None else max(s[2] for ss in spans.values() for s in ss)
    if hi <= lo:
        sys.exit(f"--from-ms {lo} is not before --to-ms {hi}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches as mpatches
    import matplotlib.pyplot as plt

    # By worker, then replicas in id order before the worker's other threads (their ids are larger).
    tracks = sorted(set(spans) | {t for t, _, _ in instants})
    row_of = {track: len(tracks) - 1 - i for i, track in enumerate(tracks)}  # the first row on top
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(tracks) + 1.6))
    for track, track_spans in spans.items():
        y = row_of[track]
        # Outer spans first, so that the spans inside them are drawn over them.
        for name, start, end, depth in sorted(track_spans, key=lambda s: s[3]):
            if end < lo or start > hi:
                continue
            height = max(0.8 - 0.2 * depth, 0.2)
            if name in PHASE_COLOURS:
                ax.broken_barh([(start, end - start)], (y - height / 2, height), facecolors=PHASE_COLOURS[name])
            else:
                ax.broken_barh([(start, end - start)], (y - height / 2, height), facecolors="none",
                               edgecolors="black", linewidth=0.6)
    for track, ts, message in instants:
        if lo <= ts <= hi:
            ax.plot([ts], [row_of[track]], marker="v", color="#e15759", markersize=8)
    labels = []
    for track in sorted(row_of, key=row_of.get):
        labels.append(f"{names.get((track[0], None), f'worker {track[0]}').split(' on ')[0]}: "
                      f"{names.get(track, track[1])}")
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels(labels)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("ms from the trace's first event (worker 0's clock)")
    ax.set_title(args.title or pathlib.Path(args.trace).name)
    handles = [mpatches.Patch(color=c, label=n) for n, c in PHASE_COLOURS.items()]
    handles.append(mpatches.Patch(facecolor="none", edgecolor="black", label="collective (" + ", ".join(COLLECTIVES[:4]) + ")"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5, fontsize=8, frameon=False)
    ax.grid(axis="x", linewidth=0.3)
    fig.tight_layout()
    output = args.output or str(pathlib.Path(args.trace).with_suffix(".png"))
    fig.savefig(output, dpi=110)
    print(f"wrote {output}: {lo:.1f} to {hi:.1f} ms")


if __name__ == "__main__":
    main()

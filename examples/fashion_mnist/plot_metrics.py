#!/usr/bin/env python3
"""Draws the curves of train_fashion_mnist's --metrics file into a PNG.

    train_fashion_mnist --metrics=metrics.csv
    python3 examples/fashion_mnist/plot_metrics.py metrics.csv        # writes metrics.png

Three panels over the epochs: the training loss beside the test accuracy; samples/s; the shares of
the training time spent in the collectives and waiting for the next batch. Needs matplotlib
(Debian: apt-get install python3-matplotlib).
"""

import argparse
import csv
import pathlib
import sys

COLUMNS = ("epoch", "train_loss", "test_accuracy", "samples_per_second", "collective_share", "input_share")


def read_metrics(path):
    """The file's columns as lists of numbers, by name; exits naming what is missing."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: no column {', '.join(missing)}; is it a file of train_fashion_mnist --metrics?")
        rows = list(reader)
    if not rows:
        sys.exit(f"{path}: the header alone, no epoch yet")
    return {c: [float(row[c]) for row in rows] for c in COLUMNS}


def main():
    parser = argparse.ArgumentParser(description="Draws train_fashion_mnist's --metrics curves into a PNG.")
    parser.add_argument("metrics", type=pathlib.Path, help="the CSV file that --metrics wrote")
    parser.add_argument("-o", "--output", type=pathlib.Path, help="the PNG to write; default: the CSV's name, .png")
    args = parser.parse_args()
    output = args.output or args.metrics.with_suffix(".png")
    m = read_metrics(args.metrics)

    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_metrics.py needs matplotlib: apt-get install python3-matplotlib (or pip install matplotlib)")
    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    epochs = m["epoch"]
    fig, (quality, speed, shares) = plt.subplots(3, 1, sharex=True, figsize=(7, 9))
    quality.plot(epochs, m["train_loss"], "o-", color="C0")
    quality.set_ylabel("training loss", color="C0")
    accuracy = quality.twinx()
    accuracy.plot(epochs, m["test_accuracy"], "s-", color="C1")
    accuracy.set_ylabel("test accuracy", color="C1")
    quality.set_title(f"{args.metrics.name}: {len(epochs)} epochs, test accuracy {m['test_accuracy'][-1]:.4f}")

    speed.plot(epochs, m["samples_per_second"], "o-", color="C2")
    speed.set_ylabel("samples/s")
    speed.set_ylim(bottom=0)

    shares.plot(epochs, [100 * s for s in m["collective_share"]], "o-", label="collectives")
    shares.plot(epochs, [100 * s for s in m["input_share"]], "s-", label="input wait")
    shares.set_ylabel("% of training time")
    shares.set_ylim(bottom=0)
    shares.legend()
    shares.set_xlabel("epoch")
    shares.xaxis.get_major_locator().set_params(integer=True)

    for ax in (quality, speed, shares):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

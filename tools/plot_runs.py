#!/usr/bin/env python3
"""plot_runs.py — training curves of one or more hstu runs in one picture.

Reads each RUN_DIR's metrics.jsonl (and config.gin, for --label-by seed) and draws one subplot
per quantity, one line per run: the training loss (and any other field of the "train" lines)
and evaluation metrics, all against the training step.

usage: plot_runs.py RUN_DIR... [--out FILE.png|.svg|.pdf] [--metrics loss,test/HR@10,...]
                    [--label-by dir|seed]

Quantities (--metrics, comma-separated):
  loss, lr, tokens_per_s       fields of the "train" lines (also as train/loss, ...)
  <split>/<metric>             a metric of the "eval" lines: test/HR@10, test/NDCG@10, test/MRR,
                               validation/NDCG@10, test/AUC/task0, test/MeanAUC, ...
The default is the loss and whichever of test/HR@10, test/NDCG@10, test/MeanAUC a run has.
A step logged twice (a resumed run appends to metrics.jsonl) keeps its last value.
"""
import argparse
import json
import math
import os
import re
import sys

DEFAULT_METRICS = ["loss", "test/HR@10", "test/NDCG@10", "test/MeanAUC"]
TRAIN_KEYS_NOT_PLOTTED = {"event", "step", "epoch"}


def fail(msg):
    sys.exit("plot_runs: " + msg)


def read_metrics(run_dir):
    """{quantity: {step: value}} of one run's metrics.jsonl."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        fail("%s not found (is %s a run directory?)" % (path, run_dir))
    with open(path) as f:
        lines = f.read().split("\n")
    series = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            if number == len(lines):  # a last line cut short by a killed run
                print("plot_runs: %s:%d: skipping the incomplete last line" % (path, number),
                      file=sys.stderr)
                continue
            fail("%s:%d: not JSON (%s)" % (path, number, e))
        add_record(series, record)
    if not series:
        fail("%s is empty: the run logged no train or eval line yet" % path)
    return series


def add_record(series, record):
    """Adds a "train" line's fields as train/<field> and an "eval" line's metric objects as
    <split>/<metric> (null, i.e. non-finite, as NaN)."""
    event, step = record.get("event"), record.get("step")
    if step is None or event not in ("train", "eval"):
        return
    for key, value in record.items():
        if event == "train" and key not in TRAIN_KEYS_NOT_PLOTTED and not isinstance(value, dict):
            series.setdefault("train/" + key, {})[step] = nan_if_none(value)
        elif event == "eval" and isinstance(value, dict):
            for metric, v in value.items():
                series.setdefault(key + "/" + metric, {})[step] = nan_if_none(v)


def nan_if_none(value):
    return math.nan if value is None else float(value)


def canonical(quantity):
    return quantity if "/" in quantity else "train/" + quantity


def run_seed(run_dir):
    path = os.path.join(run_dir, "config.gin")
    if os.path.isfile(path):
        with open(path) as f:
            m = re.search(r"^\s*TrainerArgs\.seed\s*=\s*(-?\d+)", f.read(), re.MULTILINE)
        if m:
            return m.group(1)
    print("plot_runs: %s has no TrainerArgs.seed; labelling the run by its directory" % path,
          file=sys.stderr)
    return None


def run_labels(run_dirs, label_by):
    names = [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    if label_by == "seed":
        seeds = [run_seed(d) for d in run_dirs]
        names = [n if s is None else "seed " + s for n, s in zip(names, seeds)]
    if len(set(names)) < len(names):  # e.g. the same seed in two configs: add the path
        names = ["%s (%s)" % (n, d) for n, d in zip(names, run_dirs)]
    return names


def pick_quantities(requested, runs):
    available = sorted(set().union(*runs))
    if requested is None:
        picked = [q for q in map(canonical, DEFAULT_METRICS) if any(q in r for r in runs)]
        if not picked:
            fail("none of the default quantities %s is in these runs; pick from --metrics %s"
                 % (",".join(DEFAULT_METRICS), ",".join(available)))
        return picked
    picked = [canonical(q.strip()) for q in requested.split(",") if q.strip()]
    missing = [q for q in picked if not any(q in r for r in runs)]
    if missing:
        fail("no run has %s; available: %s" % (", ".join(missing), ", ".join(available)))
    return picked


def plot(runs, labels, quantities, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    cols = min(len(quantities), 3)
    rows = math.ceil(len(quantities) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows + 0.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, quantity in zip(axes.flat, quantities):
        for i, series in enumerate(runs):
            points = sorted(series.get(quantity, {}).items())
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points],
                        color=colors[i % len(colors)], linewidth=1.2,
                        marker=None if quantity.startswith("train/") else "o", markersize=3)
        ax.set_title(quantity)
        ax.set_xlabel("step")
        ax.set_ylabel(quantity.split("/", 1)[1])
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(quantities):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colors[i % len(colors)])
               for i in range(len(runs))]
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 4), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(
        description="Training curves of hstu runs (metrics.jsonl), one line per run.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", default="curves.png", help="FILE.png, .svg or .pdf")
    parser.add_argument("--metrics", default=None,
                        help="comma-separated quantities (default: %s)" % ",".join(DEFAULT_METRICS))
    parser.add_argument("--label-by", choices=["dir", "seed"], default="dir",
                        help="legend label: the run directory's name or its TrainerArgs.seed")
    args = parser.parse_args()
    if os.path.splitext(args.out)[1].lower() not in (".png", ".svg", ".pdf"):
        fail("--out %s: the file name must end in .png, .svg or .pdf" % args.out)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("needs matplotlib (pip install matplotlib)")
    runs = [read_metrics(d) for d in args.run_dirs]
    quantities = pick_quantities(args.metrics, runs)
    plot(runs, run_labels(args.run_dirs, args.label_by), quantities, args.out)
    print("plot_runs: wrote %s (%d runs: %s)" % (args.out, len(runs), ", ".join(quantities)))


if __name__ == "__main__":
    main()

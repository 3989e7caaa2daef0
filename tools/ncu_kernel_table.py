#!/usr/bin/env python3
"""ncu_kernel_table.py — where a run's GPU time goes, per kernel, from Nsight Compute's CSV.

Reads `ncu --csv --metrics ...` output (one row per launch and metric; on stdin or a file,
gzip-compressed or not) and prints one line per kernel: launches, total and mean time, share of
the run's kernel time, the time-weighted mean of every percentage metric (dram__throughput,
the tensor pipe's activity, ...), and the sum of every byte metric (dram__bytes.sum, or
dram__bytes_read.sum and dram__bytes_write.sum) with the rate it implies (bytes / that kernel's
total time). Kernels are grouped by name without their parameter list; templates keep their
arguments, so two instances of one kernel (e.g. a backward with and without a fused multiply)
stay apart.

Usage (on the GPU machine; real clocks, so durations match the step's):
  ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes.sum,\\
      dram__throughput.avg.pct_of_peak_sustained_elapsed,\\
      sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \\
      build-gpu/hstu bench train configs/bench-large.gin --steps 1 --warmup 0 \\
      --set TrainerArgs.cuda_graph=False | gzip > step.csv.gz
  python3 tools/ncu_kernel_table.py step.csv.gz [--top 40] [--width 90]

gpu__time_duration.sum must be among the metrics. Units are read from the CSV's "Metric Unit"
column (ncu may scale them per row).
"""
import argparse
import collections
import csv
import gzip
import io
import sys

TIME_METRIC = "gpu__time_duration.sum"
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6,
              "msecond": 1e-3, "second": 1.0}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
              "KB": 1e3, "MB": 1e6, "GB": 1e9}


def read_rows(path):
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, "rb") as f:
            raw = f.read()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    # ncu prints its own progress lines (==PROF==) before the CSV: keep the quoted rows.
    lines = [l for l in text.splitlines() if l.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def kernel_name(full):
    """The kernel's name without its parameter list: 'void f<A, B>(P)' -> 'f<A, B>'."""
    name = full[5:] if full.startswith("void ") else full
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def elide(name, width):
    """At most `width` characters, the middle dropped: the kernel's name and its last template
    arguments (where instances differ) both stay visible."""
    if len(name) <= width:
        return name
    tail = width // 3
    return name[:width - tail - 3] + "..." + name[-tail:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?", default="-", help="ncu --csv output (.gz or plain; - = stdin)")
    ap.add_argument("--top", type=int, default=40, help="kernels to print (by total time)")
    ap.add_argument("--width", type=int, default=90, help="characters of a kernel's name")
    args = ap.parse_args()

    rows = read_rows(args.csv)
    if not rows:
        sys.exit("ncu_kernel_table: no CSV rows in the input")
    head = rows[0]
    try:
        col = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit",
                                          "Metric Value")}
    except ValueError as e:
        sys.exit(f"ncu_kernel_table: the CSV lacks a column ({e}); run ncu with --csv --metrics")

    # launch id -> (kernel, {metric: (unit, value)})
    launches = {}
    for r in rows[1:]:
        if len(r) < len(head):
            continue
        lid = r[col["ID"]]
        name = kernel_name(r[col["Kernel Name"]])
        try:
            value = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        launches.setdefault(lid, (name, {}))[1][r[col["Metric Name"]]] = (r[col["Metric Unit"]],
                                                                        value)

    pct_metrics, byte_metrics = [], []
    for _, metrics in launches.values():
        for m, (unit, _) in metrics.items():
            if unit == "%" and m not in pct_metrics:
                pct_metrics.append(m)
            elif unit in BYTE_UNITS and m not in byte_metrics:
                byte_metrics.append(m)

    agg = collections.OrderedDict()
    total = 0.0
    for name, metrics in launches.values():
        if TIME_METRIC not in metrics:
            continue
        unit, value = metrics[TIME_METRIC]
        if unit not in TIME_UNITS:
            sys.exit(f"ncu_kernel_table: unknown time unit {unit!r}")
        t = value * TIME_UNITS[unit]
        a = agg.setdefault(name, {"n": 0, "t": 0.0, "pct": collections.Counter(),
                                  "bytes": collections.Counter()})
        a["n"] += 1
        a["t"] += t
        total += t
        for m in pct_metrics:
            if m in metrics:
                a["pct"][m] += metrics[m][1] * t
        for m in byte_metrics:
            if m in metrics:
                a["bytes"][m] += metrics[m][1] * BYTE_UNITS[metrics[m][0]]
    if not agg:
        sys.exit(f"ncu_kernel_table: no launch has {TIME_METRIC}")

    short = {m: m.split(".")[0].replace("__", ":")[:14] for m in pct_metrics + byte_metrics}
    print(f"{len(launches)} launches, {len(agg)} kernels, {total * 1e3:.3f} ms of kernel time")
    cols = [f"{short[m]} %" for m in pct_metrics]
    for m in byte_metrics:
        cols += [f"{short[m]} GB", "TB/s"]
    print(f"{'kernel':{args.width}s} {'n':>5s} {'ms':>9s} {'mean us':>9s} {'share':>6s} " +
          " ".join(f"{c:>16s}" for c in cols))
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["t"])[:args.top]:
        vals = [f"{a['pct'][m] / a['t']:16.1f}" if a["t"] > 0 else f"{'-':>16s}"
                for m in pct_metrics]
        for m in byte_metrics:
            b = a["bytes"][m]
            vals += [f"{b / 1e9:16.3f}", f"{b / a['t'] / 1e12:16.2f}" if a["t"] > 0 else "-"]
        print(f"{elide(name, args.width):{args.width}s} {a['n']:5d} {a['t'] * 1e3:9.3f} {a['t'] * 1e6 / a['n']:9.1f} "
              f"{100 * a['t'] / total:5.1f}% " +
              " ".join(vals))
    rest = sorted(agg.values(), key=lambda a: -a["t"])[args.top:]
    if rest:
        print(f"(the rest: {sum(a['t'] for a in rest) * 1e3:.3f} ms over {len(rest)} kernels)")


if __name__ == "__main__":
    main()

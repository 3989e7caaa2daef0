#!/usr/bin/env python3
"""ncu_sass_profile.py — where a kernel's instructions and stall samples go, per SASS region.

Reads the per-instruction source page of an Nsight Compute report, i.e. the output of
    ncu --section SourceCounters --section WarpStateStats -k regex:KERNEL -o rep <command>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
(plain or gzip-compressed), and prints
  - the share of warp-stall samples per opcode, and the executed instructions per opcode,
  - per block of --step consecutive instructions: its share of the samples and of the executed
    instructions, its main opcodes and main stall reasons (the blocks follow the code's layout:
    GEMM issue, the pointwise step, the epilogue ... show up as separate blocks),
  - with --unit N, the executed instructions per block divided by N (e.g. the number of tiles
    times warps, to read instructions per tile and warp),
  - the --top instructions with the most samples.
Why: the sm_90a attention kernels' consumer warps issue one instruction per ~6 cycles, so their
time follows their instruction count; this view found the tile classification that took ~20% of
the forward's instructions (docs/BENCHMARKS.md, session 19).
"""
import argparse
import collections
import csv
import gzip
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    return re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?", help="the source page CSV (.csv or .csv.gz); stdin if absent")
    ap.add_argument("--step", type=int, default=200, help="instructions per block")
    ap.add_argument("--unit", type=float, default=0, help="divide executed counts by this")
    ap.add_argument("--top", type=int, default=25, help="instructions listed by samples")
    args = ap.parse_args()
    if args.csv:
        opener = gzip.open if args.csv.endswith(".gz") else open
        with opener(args.csv, "rt") as f:
            rows = list(csv.reader(f))
    else:
        rows = list(csv.reader(sys.stdin))
    header_at = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if header_at is None:
        sys.exit("ncu_sass_profile: no 'Source' column: is this ncu's --page source --csv output?")
    header = rows[header_at]
    data = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    src = header.index("Source")
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed")
    reasons = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    total_s = sum(number(r[samples]) for r in data) or 1.0
    total_e = sum(number(r[executed]) for r in data) or 1.0
    print(f"{len(data)} instructions, {total_s:.0f} samples, {total_e:.0f} executed")

    by_op = collections.Counter()
    for r in data:
        by_op[opcode(r[src])] += number(r[samples])
    print("samples by opcode: " + ", ".join(
        f"{k} {v / total_s * 100:.1f}%" for k, v in by_op.most_common(15)))

    ex_op = collections.Counter()
    for r in data:
        ex_op[opcode(r[src])] += number(r[executed])
    div = args.unit or total_e / 100
    print(("executed per unit" if args.unit else "executed %") + " by opcode: " + ", ".join(
        f"{k} {v / div:.1f}" for k, v in ex_op.most_common(20)))

    print(f"\nblocks of {args.step} instructions (shown if >= 1% of samples or executed):")
    for a in range(0, len(data), args.step):
        block = data[a:a + args.step]
        s = sum(number(r[samples]) for r in block)
        e = sum(number(r[executed]) for r in block)
        if s / total_s < 0.01 and e / total_e < 0.01:
            continue
        ops = collections.Counter()
        why = collections.Counter()
        for r in block:
            ops[opcode(r[src])] += number(r[executed])
            for c in reasons:
                why[header[c]] += number(r[c])
        per_unit = f" {e / args.unit:8.1f}/unit" if args.unit else ""
        print(f"{a:6d}  samples {s / total_s * 100:5.1f}%  executed {e / total_e * 100:5.1f}%"
              f"{per_unit} | " + ", ".join(k for k, _ in ops.most_common(5)) + " | " +
              ", ".join(f"{k[6:]} {v / max(s, 1) * 100:.0f}%" for k, v in why.most_common(3)))

    print(f"\nthe {args.top} instructions with the most samples:")
    top = sorted(range(len(data)), key=lambda i: -number(data[i][samples]))[:args.top]
    for i in sorted(top):
        r = data[i]
        why = sorted(((number(r[c]), header[c]) for c in reasons), reverse=True)[:2]
        print(f"{i:6d} {number(r[samples]) / total_s * 100:5.2f}%  {r[src].strip()[:72]:72s} " +
              " ".join(f"{h[6:]}={v:.0f}" for v, h in why if v > 0))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ncu_kernel_table.py — a compact per-kernel table from `ncu --csv --page raw --print-units base`
output (stdin or a file): launches, total and mean time, DRAM bytes read / written and the
achieved DRAM rate, grouped by kernel name (template arguments and parameters dropped)."""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    name = re.sub(r"\(.*$", "", name)  # parameters
    depth, out = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    n = "".join(out).split("::")[-1].strip()
    return n.replace("void ", "")[:44]


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    lines = [l for l in src if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        print("ncu_kernel_table: no CSV rows")
        return
    head = rows[0]
    body = [r for r in rows[1:] if len(r) == len(head) and r[0] != "" and r[0][0].isdigit()]
    col = {h: i for i, h in enumerate(head)}
    def num(r, k):
        try:
            return float(r[col[k]].replace(",", ""))
        except (KeyError, ValueError):
            return 0.0
    agg = OrderedDict()
    for r in body:
        k = short(r[col["Kernel Name"]])
        a = agg.setdefault(k, [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += num(r, "gpu__time_duration.sum")
        a[2] += num(r, "dram__bytes_read.sum")
        a[3] += num(r, "dram__bytes_write.sum")
    tot = [0, 0.0, 0.0, 0.0]
    print(f"{'kernel':44s} {'n':>4s} {'tot us':>9s} {'avg us':>8s} {'rd MB':>8s} {'wr MB':>8s} {'TB/s':>6s}")
    for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        t = a[1] * 1e-3  # ns -> us
        rate = (a[2] + a[3]) / (a[1] * 1e-9) / 1e12 if a[1] > 0 else 0.0
        print(f"{k:44s} {a[0]:4d} {t:9.1f} {t / a[0]:8.2f} {a[2] / 1e6:8.1f} {a[3] / 1e6:8.1f} {rate:6.2f}")
        for i in range(4):
            tot[i] += a[i]
    rate = (tot[2] + tot[3]) / (tot[1] * 1e-9) / 1e12 if tot[1] > 0 else 0.0
    print(f"{'TOTAL (kernels serialised)':44s} {tot[0]:4d} {tot[1] * 1e-3:9.1f} {'':8s} "
          f"{tot[2] / 1e6:8.1f} {tot[3] / 1e6:8.1f} {rate:6.2f}")


if __name__ == "__main__":
    main()

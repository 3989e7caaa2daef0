#!/usr/bin/env python3
"""compare_checkpoints.py — compares the weights of two hstu checkpoints (step folders, or run /
checkpoints folders whose `latest` save is taken), with only the standard library.

Reads model.safetensors of each, plus tables saved as shard files by a data-parallel run
(<table>.shards.json + <table>.shard-<r>-of-<W>.safetensors, rows keyed by id), so a W-rank save
compares with a 1-rank one. Prints the largest |a - b| / (1 + |b|) per tensor and overall; exits
1 when it exceeds --tol (default 0: bit-identical), 2 on unreadable input.

  tools/compare_checkpoints.py runs/a runs/b --tol 1e-3
"""
import argparse
import array
import json
import os
import struct
import sys


def step_folder(path):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    for ckpt in (path, os.path.join(path, "checkpoints")):
        latest = os.path.join(ckpt, "latest")
        if os.path.exists(latest):
            with open(latest) as f:
                return os.path.join(ckpt, f.read().strip())
    raise SystemExit(f"{path}: no checkpoint (model.safetensors or a latest file)")


def read_safetensors(path):
    """name -> (dtype, shape, array of floats or ints)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    codes = {"F32": "f", "I64": "q", "I32": "i", "F64": "d"}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a = array.array(codes[e["dtype"]])
        b, end = e["data_offsets"]
        a.frombytes(data[b:end])
        out[name] = (e["dtype"], e["shape"], a)
    return out


def weights(folder):
    w = {k: v for k, v in read_safetensors(os.path.join(folder, "model.safetensors")).items()}
    for name in os.listdir(folder):
        if not name.endswith(".shards.json"):
            continue
        table = name[: -len(".shards.json")]
        with open(os.path.join(folder, name)) as f:
            index = json.load(f)
        rows, dim = index["rows"], index["dim"]
        full = array.array("f", bytes(4 * rows * dim))
        for entry in index["files"]:
            shard = read_safetensors(os.path.join(folder, entry["file"]))
            ids = shard["ids"][2]
            vals = shard["weight"][2]
            for j, i in enumerate(ids):
                full[i * dim:(i + 1) * dim] = vals[j * dim:(j + 1) * dim]
        w[table] = ("F32", [rows, dim], full)
    return w


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tol", type=float, default=0.0)
    args = p.parse_args()
    try:
        wa, wb = weights(step_folder(args.a)), weights(step_folder(args.b))
    except (OSError, KeyError, ValueError) as e:
        print(f"compare_checkpoints: {e}", file=sys.stderr)
        return 2
    if sorted(wa) != sorted(wb):
        print(f"different tensors: {sorted(set(wa) ^ set(wb))}")
        return 1
    worst = 0.0
    for name in sorted(wb):
        xa, xb = wa[name][2], wb[name][2]
        if len(xa) != len(xb):
            print(f"{name}: {len(xa)} vs {len(xb)} elements")
            return 1
        d = max((abs(x - y) / (1 + abs(y)) for x, y in zip(xa, xb)), default=0.0)
        worst = max(worst, d)
        print(f"  {name:50s} {d:.3e}")
    print(f"largest relative difference: {worst:.3e} (tolerance {args.tol:g})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""read_tensorboard.py — reads a directory of TensorBoard event files with TensorBoard's own
EventAccumulator, prints the file version and every scalar tag with its steps and values, and,
given EXPECTED.json, checks them exactly: the same tags, the same step list per tag and every
value equal as float32. test_io runs it on the files that hstu's TensorBoardWriter wrote.

usage: read_tensorboard.py DIR [EXPECTED.json]      (EXPECTED.json: {"tag": [[step, value], ...]})
Exits 1 listing every difference.
"""
import json
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_scalars(log_dir):
    acc = event_accumulator.EventAccumulator(
        log_dir, size_guidance={event_accumulator.SCALARS: 0})  # 0: keep every point
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
               for tag in sorted(acc.Tags()[event_accumulator.SCALARS])}
    return acc.file_version, scalars


def differences(scalars, expected):
    errors = []
    if sorted(scalars) != sorted(expected):
        errors.append("tags: got %s, want %s" % (sorted(scalars), sorted(expected)))
    for tag in sorted(set(scalars) & set(expected)):
        got_steps = [s for s, _ in scalars[tag]]
        want_steps = [s for s, _ in expected[tag]]
        if got_steps != want_steps:
            errors.append("%s: steps %s, want %s" % (tag, got_steps, want_steps))
            continue
        for (step, got), (_, want) in zip(scalars[tag], expected[tag]):
            if got != f32(want):
                errors.append("%s step %d: value %r, want float32(%r) = %r"
                              % (tag, step, got, want, f32(want)))
    return errors


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    file_version, scalars = read_scalars(sys.argv[1])
    print("file_version %s" % file_version)
    for tag, points in scalars.items():
        print("%s: steps %s values %s" % (tag, [s for s, _ in points], [v for _, v in points]))
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            errors = differences(scalars, json.load(f))
        if file_version != 2:
            errors.append("file_version %s, want 2 (brain.Event:2)" % file_version)
        for e in errors:
            print("MISMATCH " + e)
        print("FAIL" if errors else "OK")
        sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

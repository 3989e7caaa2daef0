#!/usr/bin/env python3
"""sass_diff.py — compare two `tools/sass.sh -a` listings kernel by kernel.

For every function of either listing it prints `same` or `DIFF` with both instruction counts,
and for a differing one (with --hunks N) its first N changed hunks: what moved, what appeared.
Why: ptxas's code for a warp-specialised kernel moves with changes that look neutral (a lambda
around a loop, a spin in another warp's code; session 27), so a change to one kernel is checked
against every kernel of its file before device time is spent. Session 28 found in one look that
moving the tickets' L1 invalidation out of the writers' spin loops left every consumer instruction
in place, and that publishing the tile's coordinates renumbered the consumers' code (1,064
hunks; 375 against 386 TFLOPS on the device).

Usage: tools/sass.sh -a f.cu > a.sass; (edit); tools/sass.sh -a f.cu > b.sass
       tools/sass_diff.py a.sass b.sass [--filter REGEX] [--hunks N] [--params]
                         [--rename 'REGEX=>REPLACEMENT' ...]
--params compares the kernels' parameter reads by bank only: a field added to a parameter struct
(HstuAttnParams.rab_ds, session 29) moves every `c[0x0][offset]` after it, and every kernel then
differs. --rename rewrites b's function names before matching (Python re.sub), for a template
argument added to a kernel's traits: session 29 compared the backward with
--rename '(BwdTraitsIS4_Li[0-9]+ELb[01]ELb[01])ELb0EEE=>\1EEE'.
Exit status: 0 when every function compared is the same, 1 otherwise.
"""
import argparse
import difflib
import re
import sys


def functions(path, params=False, renames=()):
    """{mangled name: [instruction lines]} of a sass.sh listing (blank lines dropped); with
    params, constant-bank-0 offsets replaced by one token; renames: (regex, replacement) pairs
    applied to the names."""
    funcs, cur = {}, None
    with open(path) as f:
        for line in f:
            m = re.search(r"Function : (\S+)", line)
            if m:
                cur = m.group(1)
                for pat, rep in renames:
                    cur = re.sub(pat, rep, cur)
                funcs[cur] = []
            elif cur and line.strip():
                text = line.strip()
                if params:
                    text = re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[0x0][P]", text)
                funcs[cur].append(text)
    return funcs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", help="the first listing (tools/sass.sh -a)")
    ap.add_argument("b", help="the second listing")
    ap.add_argument("--filter", default="", help="only functions whose names match this regex")
    ap.add_argument("--hunks", type=int, default=4, help="changed hunks printed per function")
    ap.add_argument("--params", action="store_true",
                    help="ignore parameter offsets (c[0x0][...]): a grown parameter struct")
    ap.add_argument("--rename", action="append", default=[], metavar="REGEX=>REPLACEMENT",
                    help="rewrite b's function names before matching (repeatable)")
    args = ap.parse_args()
    renames = []
    for r in args.rename:
        if "=>" not in r:
            ap.error(f"--rename {r!r}: expected REGEX=>REPLACEMENT")
        renames.append(tuple(r.split("=>", 1)))
    a = functions(args.a, args.params)
    b = functions(args.b, args.params, renames)
    differ = False
    for name in sorted(set(a) | set(b)):
        if args.filter and not re.search(args.filter, name):
            continue
        if name not in a or name not in b:
            print(f"ONLY IN {'b' if name in b else 'a'}  {name}")
            differ = True
            continue
        if a[name] == b[name]:
            print(f"same  {len(a[name]):6d}         {name}")
            continue
        differ = True
        sm = difflib.SequenceMatcher(None, a[name], b[name], autojunk=False)
        hunks = [op for op in sm.get_opcodes() if op[0] != "equal"]
        print(f"DIFF  {len(a[name]):6d} {len(b[name]):6d}  {name}  ({len(hunks)} hunks)")
        for tag, i1, i2, j1, j2 in hunks[: args.hunks]:
            print(f"      {tag}: {' | '.join(a[name][i1:i2]) or '-'}  ->  {' | '.join(b[name][j1:j2]) or '-'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

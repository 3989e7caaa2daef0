#!/usr/bin/env python3
"""Loads an hstu retrieval checkpoint into the PyTorch re-implementation of Meta's HSTU
(meta_hstu_ml.py, next to this file) and evaluates it there, on the test split `hstu eval`
evaluates.

    python3 tools/reference/load_hstu_checkpoint.py RUN_DIR --data-dir DIR [--json OUT]

RUN_DIR is an hstu run directory: its config.gin says the dataset, the model's sizes and options
and the evaluation protocol; RUN_DIR/checkpoints (or --checkpoint) holds model.safetensors, read
with safetensors.torch. Every tensor is mapped explicitly (docs/CHECKPOINTS.md): a tensor the
reference has no place for, a reference parameter the checkpoint does not fill, or a shape that
differs is an error, and so is a config option whose semantics the reference does not implement
(then the two models would not compute the same function).

The data: DIR's ratings.csv and movies.csv, sorted by timestamp with ties in file order (hstu's
DatasetArgs.tie_break = "file"; the reference's --tie-order stable), one test sample per user with
at least two ratings: target = the last rating, history = the newest <= max_history_seqlen before
it. hstu's dense item ids are mapped to the reference's through the run's item_ids.csv.

Prints HR@K, NDCG@K and MRR (the reference's ranking: 1 + the number of catalogue items outside the
user's history scoring strictly higher than the target, capped at eval_rank_cap + 1; hstu also
counts an item of equal score and smaller id, a tie that float32 cosines of distinct trained
embeddings practically never produce).
"""

import argparse
import ast
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import meta_hstu_ml as ref  # noqa: E402  (the reference model, data and evaluation)

FORMAT_VERSION = 2  # the newest hstu checkpoint format this script reads


def read_gin(path):
    """{"Class.field": value} of an hstu config.gin (one binding per line, # comments; Python
    literals, except gin references, which stay text)."""
    bindings = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            end, quote, i = len(line), None, 0
            while i < len(line):  # the binding ends at a '#' outside any string
                ch = line[i]
                if quote and ch == "\\":
                    i += 1
                elif quote and ch == quote:
                    quote = None
                elif not quote and ch in "\"'":
                    quote = ch
                elif not quote and ch == "#":
                    end = i
                    break
                i += 1
            text = line[:end].strip()
            if not text:
                continue
            key, sep, value = text.partition("=")
            if not sep:
                sys.exit(f"{path}:{lineno}: expected 'Class.field = value'")
            try:
                bindings[key.strip()] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):  # a gin reference (@name/Class()): kept as text
                bindings[key.strip()] = value.strip()
    return bindings


def reference_options(gin, gin_path):
    """The reference model's and evaluation's options for an hstu config; exits naming every
    option whose semantics the reference does not implement."""
    g = gin.__getitem__  # a KeyError names a missing binding
    hidden, max_seq_len = g("NetworkArgs.hidden_size"), g("DatasetArgs.max_history_seqlen")
    # The reference's padded width N is both its positional table's length and the length the
    # Toeplitz position bias is built for (2N - 1 weights); hstu's num_position_buckets is both.
    width = g("NetworkArgs.num_position_buckets")
    divisor = g("NetworkArgs.scaling_seqlen")
    need = {
        "task (RetrievalArgs bound)": (gin_task(gin), "retrieval"),
        "DatasetArgs.dataset_name, a ratings.csv MovieLens":
            (g("DatasetArgs.dataset_name") in ("ml-20m", "ml-latest", "ml-latest-small"), True),
        "DatasetArgs.tie_break": (g("DatasetArgs.tie_break"), "file"),
        "NetworkArgs.attention_alpha": (g("NetworkArgs.attention_alpha"), 1.0),
        "NetworkArgs.learnable_input_layernorm": (g("NetworkArgs.learnable_input_layernorm"), False),
        "NetworkArgs.learnable_output_layernorm": (g("NetworkArgs.learnable_output_layernorm"),
                                                   False),
        "NetworkArgs.uvqk_bias": (g("NetworkArgs.uvqk_bias"), False),
        "NetworkArgs.output_bias": (g("NetworkArgs.output_bias"), True),
        "NetworkArgs.relative_attention_bias": (g("NetworkArgs.relative_attention_bias"), True),
        "NetworkArgs.final_layernorm": (g("NetworkArgs.final_layernorm"), False),
        "NetworkArgs.is_causal": (g("NetworkArgs.is_causal"), True),
        "NetworkArgs.max_attn_len": (g("NetworkArgs.max_attn_len"), 0),
        "NetworkArgs.norm_epsilon": (g("NetworkArgs.norm_epsilon"), 1e-6),
        "NetworkArgs.item_embedding_dim in (-1, hidden_size)":
            (g("NetworkArgs.item_embedding_dim") in (-1, hidden), True),
        "RetrievalArgs.l2_norm_eps": (g("RetrievalArgs.l2_norm_eps"), 1e-6),
        "num_position_buckets > max_history_seqlen": (width > max_seq_len, True),
    }
    bad = [f"{k} = {got!r} (the reference implements {want!r})" for k, (got, want) in need.items()
           if got != want]
    if bad:
        sys.exit(f"{gin_path}: this config computes something the reference model does not:\n  "
                 + "\n  ".join(bad))
    return argparse.Namespace(
        dim=hidden, heads=g("NetworkArgs.num_attention_heads"),
        head_dim=g("NetworkArgs.kv_channels"), blocks=g("NetworkArgs.num_layers"),
        num_buckets=g("NetworkArgs.rab_num_time_buckets"), width=width,
        attn_div=float(divisor if divisor > 0 else max_seq_len),
        # meta_hstu_ml.evaluate's options
        max_seq_len=max_seq_len, gr_output_length=width - max_seq_len - 1,
        eval_batch_size=g("TrainerArgs.eval_batch_size"), history_filter=True,
        rank_cap=g("RetrievalArgs.eval_rank_cap"))


def gin_task(gin):
    """hstu's rule: a config that binds a RankingArgs field is a ranking config (config.gin lists
    RankingArgs bindings only then)."""
    return "ranking" if any(k.startswith("RankingArgs.") for k in gin) else "retrieval"


def checkpoint_version(path):
    """Format version of an hstu model.safetensors (1: no format_version, [in, out] weights)."""
    with safe_open(path, "pt") as f:
        md = f.metadata() or {}
    if md.get("format") != "hstu":
        sys.exit(f"{path}: not an hstu checkpoint (metadata format = {md.get('format')!r})")
    text = md.get("format_version", "1")
    if not text.isdigit() or int(text) < 1:
        sys.exit(f"{path}: format_version {text!r} is not a positive integer")
    version = int(text)
    if version > FORMAT_VERSION:
        sys.exit(f"{path}: format_version {version} is newer than this script reads "
                 f"(1 to {FORMAT_VERSION})")
    if version >= 2 and md.get("layout") != "pytorch":
        sys.exit(f"{path}: format_version {version} without layout = 'pytorch'")
    if md.get("task", "retrieval") != "retrieval":
        sys.exit(f"{path}: a {md['task']} checkpoint; this script evaluates retrieval runs")
    return version


def item_permutation(item_ids_csv, catalogue):
    """For hstu's dense item i (1..V-1), the reference's compact id of the same raw movieId."""
    rows = np.loadtxt(item_ids_csv, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    index, raw = rows[:, 0], rows[:, 1]
    if not np.array_equal(index, np.arange(1, len(index) + 1)):
        sys.exit(f"{item_ids_csv}: indices are not 1..{len(index)}")
    if not np.array_equal(np.sort(raw), catalogue):
        sys.exit(f"{item_ids_csv}: hstu's {len(raw)} items are not the reference's catalogue of "
                 f"{len(catalogue)} movieIds (movies.csv)")
    return np.searchsorted(catalogue, raw) + 1  # catalogue is sorted; compact ids start at 1


def load_into(model, tensors, version, perm, path):
    """Copies hstu's tensors into the reference model, each by an explicit rule."""
    pytorch = version >= 2
    # hstu v2 stores linear weights as nn.Linear's [out, in]; v1 as x @ W's [in, out].
    as_x_at_w = (lambda w: w.t()) if pytorch else (lambda w: w)
    as_nn_linear = (lambda w: w) if pytorch else (lambda w: w.t())

    def items(w):  # hstu's dense rows -> the reference's compact rows; row 0 = padding
        out = torch.empty_like(w)
        out[0] = w[0]
        out[torch.from_numpy(perm)] = w[1:]
        return out

    rules = {"item_emb.weight": ("item_embedding", items),
             "pos_emb.weight": ("position_embedding", None)}
    for l in range(len(model.layers)):
        pre = f"layers.{l}."  # the same prefix in both models
        rules[pre + "uvqk"] = (pre + "uvqk.weight", as_x_at_w)
        rules[pre + "o.weight"] = (pre + "output.weight", as_nn_linear)
        rules[pre + "o.bias"] = (pre + "output.bias", None)
        rules[pre + "rab.pos_w"] = (pre + "rab.position", None)
        rules[pre + "rab.ts_w"] = (pre + "rab.time", None)
    params = dict(model.named_parameters())
    errors = [f"reference parameter {n} has no rule" for n in params if n not in rules]
    errors += [f"tensor {n} has no place in the reference model"
               for n in tensors if n not in {src for src, _ in rules.values()}]
    values = {}
    for name, (src, convert) in rules.items():
        if src not in tensors:
            errors.append(f"tensor {src} (for {name}) is missing")
            continue
        values[name] = convert(tensors[src]) if convert else tensors[src]
        if values[name].shape != params[name].shape:
            errors.append(f"{src} is stored as {list(tensors[src].shape)}, which maps to "
                          f"{list(values[name].shape)}, but {name} is "
                          f"{list(params[name].shape)}")
    if errors:
        sys.exit(f"{path}:\n  " + "\n  ".join(errors))
    with torch.no_grad():
        for name, value in values.items():
            params[name].copy_(value)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--data-dir", required=True, help="the MovieLens ratings.csv/movies.csv folder")
    p.add_argument("--checkpoint", help="checkpoint folder (default: RUN_DIR/checkpoints)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write the metrics to this file as JSON")
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    gin_path = os.path.join(a.run_dir, "config.gin")
    gin = read_gin(gin_path)
    opt = reference_options(gin, gin_path)
    if os.path.realpath(a.data_dir) != os.path.realpath(gin["DatasetArgs.dataset_path"]):
        print(f"note: the run was trained on {gin['DatasetArgs.dataset_path']}, evaluating on "
              f"{a.data_dir}")
    cache = gin["DatasetArgs.cache_dir"] or gin["TrainerArgs.run_dir"]
    item_ids_csv = os.path.join(cache, gin["DatasetArgs.dataset_name"], "item_ids.csv")
    ckpt = a.checkpoint or os.path.join(a.run_dir, "checkpoints")
    latest = os.path.join(ckpt, "latest")  # docs/CHECKPOINTS.md: the save `latest` names
    if os.path.exists(latest):
        with open(latest) as f:
            ckpt = os.path.join(ckpt, f.read().strip())
    model_path = os.path.join(ckpt, "model.safetensors")

    seqs, catalogue = ref.load_sequences(a.data_dir, "stable", 0)
    perm = item_permutation(item_ids_csv, catalogue)
    id_map = np.zeros(int(max(catalogue.max(), max(s[0].max() for s in seqs))) + 1, np.int64)
    id_map[catalogue] = np.arange(1, len(catalogue) + 1)
    rows = ref.build_split(seqs, id_map, 0, opt.max_seq_len)

    version = checkpoint_version(model_path)
    model = ref.HSTU(len(catalogue), D=opt.dim, H=opt.heads, dqk=opt.head_dim, dv=opt.head_dim,
                     num_blocks=opt.blocks, N=opt.width, num_buckets=opt.num_buckets,
                     attn_div=opt.attn_div)
    load_into(model, load_file(model_path), version, perm, model_path)
    metrics = ref.evaluate(model, rows, opt, len(catalogue), torch.device("cpu"))

    print(f"{model_path} (format_version {version}) in the reference model, {len(rows)} test "
          f"users, catalogue {len(catalogue)} items:")
    for k, v in metrics.items():
        print(f"  {k:9s} {v:.6f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(metrics, f)


if __name__ == "__main__":
    main()

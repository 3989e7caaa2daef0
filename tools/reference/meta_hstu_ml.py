#!/usr/bin/env python3
"""Independent PyTorch re-implementation of Meta generative-recommenders' research HSTU
retrieval trainer (the one behind the paper's ML-1M / ML-20M tables), for MovieLens
``ratings.csv`` data such as ml-latest-small.

Written from the project's written notes (../../../shared/reference/generative-recommenders.md,
sections 1.3, 1.4, 2.1-2.5 and 3) and the ML-1M HSTU preset; no code of either Meta's repository
or hstu was copied. It exists to answer one question: does a faithful Python trainer on
ml-latest-small land where hstu lands (HR@10 ~0.103) or where Meta's trainer reportedly lands
(~0.110)?  See README.md next to this file for the list of guesses.

What it does (ML-1M HSTU config, ``configs/ml-1m/hstu-sampled-softmax-n128-final.gin``):

* data: ratings.csv sorted by timestamp with pandas' default (unstable quicksort) sort, grouped
  by user (chronological lists). Raw movieIds are the item ids (0 = padding); the catalogue
  ``all_item_ids`` is every movieId of movies.csv. Internally the ids are mapped to a compact
  1..|catalogue| table: the rows of Meta's max_item_id+1 table that no id ever touches never get
  a gradient, and with dense Adam and zero grad they never move, so this is exact.
* split (leave-one-out, paper protocol): train = each user's sequence without its last item,
  target = its second-to-last item, history = the last 200 items before it; eval = the full
  sequence, target = the last item, history = the last 200 before it. Test metrics every epoch.
* batch: past_ids [B, 211] (200 history + 11 zero columns), left-aligned; target timestamp at
  column len_b (train and eval); target id at column len_b (train only, lengths not incremented).
* model: x0 = Dropout_0.2(E*sqrt(50) + P[pos]) * [id != 0]; 2 HSTU layers
  (LN no-affine eps 1e-6 -> SiLU(x W_uvqk) -> u,v,q,k -> SiLU(QK^T + rab)/211 * causal -> AV
  -> u * LN(AV) -> Dropout_0.2 -> Linear(+bias) -> residual); rab = Toeplitz position bias
  (2N-1 weights) + log-bucketed time bias of ts[i+1]-ts[j] (129 weights), per layer; output
  L2-normalised (eps 1e-6). No final LayerNorm.
* loss: every valid position predicts the next id; sampled softmax with 128 negatives per
  position drawn uniformly (with replacement) from all_item_ids, cosine / 0.05, negatives equal
  to the label masked to -5e4; token mean.
* optimiser: torch.optim.AdamW(lr 1e-3, betas (0.9, 0.98), weight_decay 0) over all parameters
  incl. the item table (dense gradients), constant LR, no clipping.
* init: item table truncated normal (N(0,1) redrawn outside +-2, times 0.02); W_uvqk N(0, 0.02);
  Linear_o weight xavier_uniform, bias nn.Linear default; rab weights N(0, 0.02); positional
  table xavier_normal.
* eval: query = output at position len-1; cosine scores against all catalogue items; the user's
  (<= 200) history ids removed; rank 1-based, capped at 2501; HR@K, NDCG@K, MRR averaged over
  all users.

Usage:
    python3 meta_hstu_ml.py --data-dir ../shared/data/ml-latest-small --seed 42 --epochs 101 \
        --device cpu --out metrics.jsonl
Toggles for protocol experiments (defaults = Meta's behaviour as read from the notes):
    --tie-order pandas|stable|random, --no-history-filter, --neg-sampler uniform|inbatch, etc.
"""

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------

def load_sequences(data_dir, tie_order, tie_seed):
    """Returns (users' chronological (ids, timestamps) lists, catalogue movieIds sorted)."""
    ratings = pd.read_csv(os.path.join(data_dir, "ratings.csv"))
    ratings = ratings.rename(columns={"userId": "user_id", "movieId": "item_id",
                                      "timestamp": "unix_timestamp"})
    if tie_order == "pandas":
        # Meta: ratings.sort_values(by=["unix_timestamp"]) -- pandas' default kind (quicksort,
        # not stable), so the order of equal timestamps is whatever numpy's sort gives.
        ratings = ratings.sort_values(by=["unix_timestamp"])
    elif tie_order == "stable":
        ratings = ratings.sort_values(by=["unix_timestamp"], kind="stable")
    elif tie_order == "random":
        rng = np.random.RandomState(tie_seed)
        ratings = ratings.iloc[rng.permutation(len(ratings))]
        ratings = ratings.sort_values(by=["unix_timestamp"], kind="stable")
    else:
        raise ValueError(tie_order)
    seqs = []
    for uid, g in ratings.groupby("user_id"):  # groupby keeps the sorted row order per group
        seqs.append((g["item_id"].to_numpy(np.int64), g["unix_timestamp"].to_numpy(np.int64)))
    movies_path = os.path.join(data_dir, "movies.csv")
    if os.path.exists(movies_path):
        catalogue = np.sort(pd.read_csv(movies_path)["movieId"].unique().astype(np.int64))
    else:  # fall back to the rated items
        catalogue = np.sort(ratings["item_id"].unique().astype(np.int64))
    return seqs, catalogue


def build_split(seqs, id_map, ignore_last_n, max_seq_len):
    """DatasetV2-like rows: history (<= max_seq_len, chronological), target, timestamps."""
    rows = []
    for ids, ts in seqs:
        if ignore_last_n > 0:
            ids, ts = ids[:-ignore_last_n], ts[:-ignore_last_n]
        if len(ids) < 2:
            continue
        hist_ids, hist_ts = ids[:-1][-max_seq_len:], ts[:-1][-max_seq_len:]
        rows.append((id_map[hist_ids], hist_ts, int(id_map[ids[-1]]), int(ts[-1])))
    return rows


def make_batch(rows, idx, max_seq_len, n_extra, scatter_target_id):
    B = len(idx)
    N = max_seq_len + n_extra
    past_ids = np.zeros((B, N), np.int64)
    past_ts = np.zeros((B, N), np.int64)
    lengths = np.zeros(B, np.int64)
    targets = np.zeros(B, np.int64)
    for b, r in enumerate(idx):
        h, hts, tgt, tts = rows[r]
        L = len(h)
        past_ids[b, :L] = h
        past_ts[b, :L] = hts
        past_ts[b, L] = tts          # target (request) timestamp at column len_b
        if scatter_target_id:
            past_ids[b, L] = tgt      # label of the last position; lengths NOT incremented
        lengths[b] = L
        targets[b] = tgt
    return (torch.from_numpy(past_ids), torch.from_numpy(past_ts), torch.from_numpy(lengths),
            torch.from_numpy(targets))


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def meta_truncated_normal_(t, std, mean=0.0):
    """Truncated normal in standard-deviation units: N(0,1) draws with |z| >= 2 are redrawn,
    then scaled by std (so the bound is +-2*std, unlike torch.nn.init.trunc_normal_'s absolute
    a=-2, b=2). Meta caps the redraws at 4 tries; the difference (~4e-6 of entries) is nil."""
    with torch.no_grad():
        z = torch.randn(t.shape, device=t.device)
        bad = z.abs() >= 2
        while bool(bad.any()):
            z[bad] = torch.randn(int(bad.sum()), device=t.device)
            bad = z.abs() >= 2
        t.copy_(z * std + mean)
    return t


class RelativeBucketedTimeAndPositionBias(nn.Module):
    def __init__(self, N, num_buckets):
        super().__init__()
        self.N = N
        self.num_buckets = num_buckets
        self.ts_w = nn.Parameter(torch.empty(num_buckets + 1).normal_(0, 0.02))
        self.pos_w = nn.Parameter(torch.empty(2 * N - 1).normal_(0, 0.02))

    def forward(self, buckets, rel_pos_idx):
        # rel_pos_idx[i, j] = N - 1 + j - i ; buckets [B, N, N] precomputed (detached)
        return self.pos_w[rel_pos_idx].unsqueeze(0) + self.ts_w[buckets]


def time_buckets(past_ts, num_buckets):
    N = past_ts.shape[1]
    ext = torch.cat([past_ts, past_ts[:, N - 1:N]], dim=1)         # [B, N+1]
    dt = ext[:, 1:].unsqueeze(2) - ext[:, :-1].unsqueeze(1)         # dt[i,j] = ts[i+1] - ts[j]
    b = (torch.log(dt.abs().clamp(min=1).float()) / 0.301).long()
    return b.clamp(min=0, max=num_buckets).detach()


class HSTULayer(nn.Module):
    def __init__(self, D, H, dqk, dv, N, dropout, num_buckets, attn_div):
        super().__init__()
        self.D, self.H, self.dqk, self.dv, self.N = D, H, dqk, dv, N
        self.dropout = dropout
        self.attn_div = attn_div
        self.uvqk = nn.Parameter(torch.empty(D, 2 * H * dv + 2 * H * dqk).normal_(0, 0.02))
        self.o = nn.Linear(H * dv, D)            # bias keeps nn.Linear's default init
        nn.init.xavier_uniform_(self.o.weight)
        self.rab = RelativeBucketedTimeAndPositionBias(N, num_buckets)

    def forward(self, x, buckets, rel_pos_idx, causal, eps=1e-6):
        B, N, D = x.shape
        H, dqk, dv = self.H, self.dqk, self.dv
        xn = F.layer_norm(x, (D,), eps=eps)
        uvqk = F.silu(xn @ self.uvqk)
        u, v, q, k = torch.split(uvqk, [H * dv, H * dv, H * dqk, H * dqk], dim=-1)
        q = q.view(B, N, H, dqk).transpose(1, 2)
        k = k.view(B, N, H, dqk).transpose(1, 2)
        v = v.view(B, N, H, dv).transpose(1, 2)
        s = q @ k.transpose(-1, -2) + self.rab(buckets, rel_pos_idx).unsqueeze(1)  # [B,H,N,N]
        a = F.silu(s) / self.attn_div * causal
        o = (a @ v).transpose(1, 2).reshape(B, N, H * dv)
        y = u * F.layer_norm(o, (H * dv,), eps=eps)
        return x + self.o(F.dropout(y, p=self.dropout, training=self.training))


class HSTU(nn.Module):
    def __init__(self, num_items, D=50, H=1, dqk=50, dv=50, num_blocks=2, N=211,
                 dropout=0.2, input_dropout=0.2, num_buckets=128, attn_div=None):
        super().__init__()
        self.D, self.N = D, N
        self.input_dropout = input_dropout
        self.item_emb = nn.Embedding(num_items + 1, D, padding_idx=0)
        meta_truncated_normal_(self.item_emb.weight.data, std=0.02)
        self.pos_emb = nn.Embedding(N, D)
        nn.init.xavier_normal_(self.pos_emb.weight)      # overwrites truncated_normal(sqrt(1/D))
        self.layers = nn.ModuleList([
            HSTULayer(D, 1 if H is None else H, dqk, dv, N, dropout, num_buckets,
                      float(N if attn_div is None else attn_div)) for _ in range(num_blocks)])
        ar = torch.arange(N)
        self.register_buffer("rel_pos_idx", (N - 1 + ar.view(1, N) - ar.view(N, 1)), False)
        self.register_buffer("causal", torch.tril(torch.ones(N, N)), False)
        self.num_buckets = num_buckets

    def encode(self, past_ids, past_ts, lengths):
        B, N = past_ids.shape
        valid = (torch.arange(N, device=past_ids.device).view(1, N) < lengths.view(B, 1))
        e = self.item_emb(past_ids)
        x = e * math.sqrt(self.D) + self.pos_emb.weight.unsqueeze(0)
        x = F.dropout(x, p=self.input_dropout, training=self.training)
        x = x * (past_ids != 0).unsqueeze(-1).float()
        # jagged semantics: only rows < len_b exist; rows beyond never reach valid rows (causal).
        x = x * valid.unsqueeze(-1).float()
        buckets = time_buckets(past_ts, self.num_buckets)
        for layer in self.layers:
            x = layer(x, buckets, self.rel_pos_idx, self.causal)
        x = x * valid.unsqueeze(-1).float()              # jagged_to_padded_dense: zeros
        return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-6), e


def l2n(x, eps=1e-6):
    return x / x.norm(dim=-1, keepdim=True).clamp(min=eps)


# ----------------------------------------------------------------------------------------------
# Loss
# ----------------------------------------------------------------------------------------------

def sampled_softmax_nll(model, out, e, past_ids, lengths, num_neg, temperature, neg_sampler,
                        num_catalogue, chunk=4096):
    """Per supervised token: -log softmax of the positive among [positive, R negatives].
    Returns (nll [L], weight [L], batch row of each token [L])."""
    B, N, D = out.shape
    ar = torch.arange(N - 1, device=out.device)
    tok = ar.view(1, -1) < lengths.view(-1, 1)                          # [B, N-1]
    row = torch.arange(B, device=out.device).view(-1, 1).expand(B, N - 1)[tok]
    q = out[:, :-1, :][tok]                                              # [L, D]
    sup = past_ids[:, 1:][tok]                                           # [L]
    pos_e = l2n(e[:, 1:, :][tok])                                        # [L, D]
    w = (sup != 0).float()
    L = q.shape[0]
    if neg_sampler == "uniform":
        # uniform over all_item_ids (compact ids 1..num_catalogue), with replacement
        neg = torch.randint(1, num_catalogue + 1, (L, num_neg), device=out.device)
    elif neg_sampler == "inbatch":
        uniq = torch.unique(sup[sup != 0])
        neg = uniq[torch.randint(0, uniq.numel(), (L, num_neg), device=out.device)]
    else:
        raise ValueError(neg_sampler)
    lp = (q * pos_e).sum(-1, keepdim=True) / temperature                # [L, 1]
    # Meta gathers item_emb(neg) [L, R, D] and L2-normalises every gathered row. Normalising
    # the table once and gathering from it gives the same values and the same gradients
    # (the per-row normalisation Jacobian does not depend on how often a row is drawn), but
    # costs far less on a CPU.
    table = l2n(model.item_emb.weight)                                   # [C+1, D]
    nlls = []
    for s in range(0, L, chunk):
        sl = slice(s, min(L, s + chunk))
        ne = F.embedding(neg[sl], table)                                 # [c, R, D]
        ln = torch.bmm(ne, q[sl].unsqueeze(-1)).squeeze(-1) / temperature
        ln = torch.where(neg[sl] == sup[sl].unsqueeze(1), torch.full_like(ln, -5e4), ln)
        logits = torch.cat([lp[sl], ln], dim=1)
        nlls.append(-F.log_softmax(logits, dim=1)[:, 0])
    return torch.cat(nlls), w, row


def sampled_softmax_loss(model, out, e, past_ids, lengths, num_neg, temperature, neg_sampler,
                         num_catalogue):
    """Meta's loss: token-weighted mean over the batch."""
    nll, w, _ = sampled_softmax_nll(model, out, e, past_ids, lengths, num_neg, temperature,
                                    neg_sampler, num_catalogue)
    return (nll * w).sum() / w.sum()


# ----------------------------------------------------------------------------------------------
# Eval
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model, rows, args, num_catalogue, device):
    model.eval()
    N_extra = args.gr_output_length + 1
    item_e = l2n(model.item_emb.weight[1:num_catalogue + 1])            # [C, D] compact 1..C
    ranks = []
    for s in range(0, len(rows), args.eval_batch_size):
        idx = list(range(s, min(len(rows), s + args.eval_batch_size)))
        past_ids, past_ts, lengths, targets = make_batch(rows, idx, args.max_seq_len, N_extra,
                                                         scatter_target_id=False)
        past_ids, past_ts, lengths, targets = (t.to(device) for t in
                                               (past_ids, past_ts, lengths, targets))
        out, _ = model.encode(past_ids, past_ts, lengths)
        qv = out[torch.arange(len(idx), device=device), lengths - 1]    # [b, D]
        scores = qv @ item_e.t()                                         # [b, C]; col c = id c+1
        tscore = scores.gather(1, (targets - 1).view(-1, 1))
        if args.history_filter:
            hist = past_ids[:, :].clone()                               # <= 200 history ids
            mask = torch.zeros_like(scores, dtype=torch.bool)
            hv = hist > 0
            rr = torch.arange(len(idx), device=device).view(-1, 1).expand_as(hist)
            mask[rr[hv], hist[hv] - 1] = True
            scores = scores.masked_fill(mask, float("-inf"))
        rank = (scores > tscore).sum(1) + 1
        rank = torch.where(rank > args.rank_cap, torch.full_like(rank, args.rank_cap + 1), rank)
        ranks.append(rank.cpu())
    r = torch.cat(ranks).double()
    m = {"MRR": (1.0 / r).mean().item()}
    for k in (1, 10, 50, 200):
        hit = (r <= k).double()
        m[f"HR@{k}"] = hit.mean().item()
        if k > 1:
            m[f"NDCG@{k}"] = (hit / torch.log2(r + 1)).mean().item()
    model.train()
    return m


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--epochs", type=int, default=101)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default="metrics.jsonl")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=1,
                   help="evaluate every n epochs; the last 10 epochs are always evaluated")
    # config (ML-1M HSTU preset)
    p.add_argument("--max-seq-len", type=int, default=200)
    p.add_argument("--gr-output-length", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--dim", type=int, default=50)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--dqk", type=int, default=50)
    p.add_argument("--dv", type=int, default=50)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--input-dropout", type=float, default=0.2)
    p.add_argument("--num-buckets", type=int, default=128)
    p.add_argument("--num-negatives", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta2", type=float, default=0.98)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--rank-cap", type=int, default=2500)
    # protocol toggles
    p.add_argument("--tie-order", default="pandas", choices=["pandas", "stable", "random"])
    p.add_argument("--tie-seed", type=int, default=0)
    p.add_argument("--no-history-filter", dest="history_filter", action="store_false")
    p.add_argument("--neg-sampler", default="uniform", choices=["uniform", "inbatch"])
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--world-size", type=int, default=1,
                   help="emulate Meta's DDP run on W GPUs in one process: DistributedSampler "
                        "(seed 0, drop_last=True when W > 1), local batch 128 per rank, the "
                        "gradient of the mean of per-rank token means, eval on W*floor(U/W) users")
    p.add_argument("--no-tf32", dest="tf32", action="store_false",
                   help="Meta sets enable_tf32=True (matters on CUDA only)")
    p.add_argument("--attn-div", type=float, default=None,
                   help="attention divisor (default N = max_seq_len + gr_output_length + 1)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    t0 = time.time()
    seqs, catalogue = load_sequences(args.data_dir, args.tie_order, args.tie_seed)
    C = len(catalogue)
    max_raw = int(max(catalogue.max(), max(s[0].max() for s in seqs)))
    id_map = np.zeros(max_raw + 1, np.int64)
    id_map[catalogue] = np.arange(1, C + 1)
    train_rows = build_split(seqs, id_map, 1, args.max_seq_len)
    eval_rows = build_split(seqs, id_map, 0, args.max_seq_len)
    N = args.max_seq_len + args.gr_output_length + 1
    fp = hashlib.md5()
    for ids, ts in seqs:
        fp.update(ids.tobytes())
        fp.update(ts.tobytes())
    print(f"sequence order fingerprint (md5 of per-user id/ts lists): {fp.hexdigest()}; "
          f"torch {torch.__version__}, numpy {np.__version__}, pandas {pd.__version__}")
    print(f"data: {len(seqs)} users, catalogue {C} items (max id {max_raw}), "
          f"train rows {len(train_rows)} ({sum(len(r[0]) for r in train_rows)} supervised "
          f"tokens/epoch), eval rows {len(eval_rows)}; N={N}; load {time.time()-t0:.1f}s",
          flush=True)

    model = HSTU(C, D=args.dim, H=args.heads, dqk=args.dqk, dv=args.dv, num_blocks=args.blocks,
                 N=N, dropout=args.dropout, input_dropout=args.input_dropout,
                 num_buckets=args.num_buckets, attn_div=args.attn_div).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, args.beta2),
                            weight_decay=args.weight_decay)
    out_f = open(args.out, "w")
    out_f.write(json.dumps({"event": "config", **vars(args)}) + "\n")
    hist = []
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    W = args.world_size
    t_train = 0.0
    for epoch in range(args.epochs):
        te = time.time()
        model.train()
        # DistributedSampler(shuffle=True, seed=s, drop_last=W>1).set_epoch(epoch): a permutation
        # from a generator seeded with seed + epoch (Meta: seed 0 always; here the run's seed).
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        perm = torch.randperm(len(train_rows), generator=g).tolist()
        if W > 1:
            n_keep = (len(perm) // W) * W
            rank_lists = [perm[:n_keep][r::W] for r in range(W)]
        else:
            rank_lists = [perm]
        n_steps = (len(rank_lists[0]) + args.batch_size - 1) // args.batch_size
        losses = []
        for st in range(n_steps):
            parts = [rl[st * args.batch_size:(st + 1) * args.batch_size] for rl in rank_lists]
            if args.drop_last and len(parts[0]) < args.batch_size:
                break
            idx = [i for p_ in parts for i in p_]
            rank_of_row = torch.tensor([r for r, p_ in enumerate(parts) for _ in p_],
                                       device=device)
            past_ids, past_ts, lengths, _ = make_batch(train_rows, idx, args.max_seq_len,
                                                       args.gr_output_length + 1, True)
            past_ids, past_ts, lengths = (t.to(device) for t in (past_ids, past_ts, lengths))
            opt.zero_grad()
            out, e = model.encode(past_ids, past_ts, lengths)
            nll, w, row = sampled_softmax_nll(model, out, e, past_ids, lengths,
                                              args.num_negatives, args.temperature,
                                              args.neg_sampler, C)
            if W == 1:
                loss = (nll * w).sum() / w.sum()
            else:  # DDP averages the ranks' gradients of their own token means
                rk = rank_of_row[row]
                num = torch.zeros(W, device=device).index_add(0, rk, nll * w)
                den = torch.zeros(W, device=device).index_add(0, rk, w)
                loss = (num / den).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        t_train += time.time() - te
        rec = {"event": "epoch", "epoch": epoch + 1, "loss": float(np.mean(losses)),
               "train_s": round(t_train, 1)}
        if (epoch + 1) % args.eval_every == 0 or epoch >= args.epochs - 10:
            ev_rows = eval_rows
            if W > 1:  # eval loader: DistributedSampler(drop_last=True) over shuffled users
                ge = torch.Generator().manual_seed(epoch)
                ep = torch.randperm(len(eval_rows), generator=ge).tolist()
                ev_rows = [eval_rows[i] for i in ep[:(len(ep) // W) * W]]
            m = evaluate(model, ev_rows, args, C, device)
            rec.update(m)
            hist.append((epoch + 1, m))
            print(f"epoch {epoch+1:3d} loss {rec['loss']:.4f} HR@10 {m['HR@10']:.4f} "
                  f"NDCG@10 {m['NDCG@10']:.4f} HR@50 {m['HR@50']:.4f} MRR {m['MRR']:.4f} "
                  f"({time.time()-te:.1f}s)", flush=True)
        else:
            print(f"epoch {epoch+1:3d} loss {rec['loss']:.4f} ({time.time()-te:.1f}s)",
                  flush=True)
        out_f.write(json.dumps(rec) + "\n")
        out_f.flush()
    last = [m for (ep, m) in hist if ep > args.epochs - 10]
    summ = {k: float(np.mean([m[k] for m in last])) for k in last[0]}
    print(f"mean of last {len(last)} epochs: HR@10 {summ['HR@10']:.4f} "
          f"NDCG@10 {summ['NDCG@10']:.4f} HR@50 {summ['HR@50']:.4f} "
          f"NDCG@50 {summ['NDCG@50']:.4f} MRR {summ['MRR']:.4f}; "
          f"total {time.time()-t0:.0f}s", flush=True)
    best_ep, best_m = max(hist, key=lambda h: h[1]["HR@10"])
    print(f"best evaluated epoch by HR@10: {best_ep} (HR@10 {best_m['HR@10']:.4f}, "
          f"NDCG@10 {best_m['NDCG@10']:.4f}); last epoch HR@10 {hist[-1][1]['HR@10']:.4f} "
          f"NDCG@10 {hist[-1][1]['NDCG@10']:.4f}", flush=True)
    summ["best_epoch"] = best_ep
    summ["best_HR@10"] = best_m["HR@10"]
    summ["best_NDCG@10"] = best_m["NDCG@10"]
    out_f.write(json.dumps({"event": "summary", "last_n": len(last), **summ,
                            "wall_s": round(time.time() - t0, 1)}) + "\n")
    out_f.close()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""PyTorch peer of bench/train_bench.cc: the same Transformer, batch and training step in
float32 torch, timed the same way, for the tokens/s ratio of bench/run_train_bench.sh.

Run with Debian's interpreter (torch 1.13; the pyenv python3 has no torch):
    /usr/bin/python3 bench/torch_train_peer.py --preset small --threads 1

Model (docs/model-format.md; the trainer's presets of trainer/train_config.cc): post-norm
encoder-decoder, ReLU, sinusoidal positions (interleaved sin/cos), one embedding matrix shared
by encoder input, decoder input and output projection, embeddings scaled by sqrt(d_model),
layer-norm epsilon 1e-6. Written with torch.nn primitives (nn.Linear, nn.LayerNorm,
F.dropout, matmul/softmax attention with a fused q/k/v projection, as tnmt fuses them).
Dropout only where tnmt has it: on embeddings+positions and on every sub-layer output (none
inside attention or after the ReLU).

Initialisation as trainer/model/parameters.h says: Xavier-uniform linears with zero biases,
N(0, d^-1/2) embeddings with a zero pad row, layer norms 1 and 0.

Loss per non-pad target token: -sum_j q_j log p_j with q = 1 - eps + eps/(V-1) on the target,
eps/(V-1) on every other token except pad, 0 on pad (eps 0.1), summed. The gradient is that of
the sum divided by the token count (tnmt: loss_scale 1, Adam grad_scale 1/tokens).

Step: zero grads + forward + backward + torch.optim.Adam (betas 0.9/0.98, eps 1e-9, the
paper's learning-rate schedule with warmup 4000). Batch: batch_sentences rows of random ids in
[4, V) (no padding); src = ids + eos, tgt_in = bos + ids, tgt_out = ids + eos.

Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set to --threads before torch is
imported (unless already set), then torch.set_num_threads(threads). Debian's torch does its
GEMMs in the system OpenBLAS (the same library tnmt loads); the kernel family OpenBLAS picks
can be forced with OPENBLAS_CORETYPE in the environment (run_train_bench.sh passes tnmt's).

Prints human-readable lines, then
    RESULT engine=torch threads=N tokens_per_s=X s_per_step=S peak_rss_mib=M loss0=L ...
"""

import argparse
import math
import os
import resource
import sys
import time

PRESETS = {
    # name: (d_model, heads, d_ff, encoder layers, decoder layers), as trainer/train_config.cc
    "base": (512, 8, 2048, 6, 6),
    "small": (256, 4, 1024, 3, 3),
    "tiny": (32, 2, 64, 1, 1),
}
PAD, BOS, EOS = 0, 2, 3
LABEL_SMOOTHING = 0.1
WARMUP = 4000


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-sentences", type=int, default=128)
    p.add_argument("--src-len", type=int, default=25)
    p.add_argument("--tgt-len", type=int, default=25)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="bfloat16: forward under torch.autocast('cpu', torch.bfloat16) (its matmuls in bfloat16)")
    return p.parse_args()


ARGS = parse_args()
# Thread pools are sized when the libraries load: set them before importing torch.
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def sinusoidal_table(n_pos, d):
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2.0 * i / d)
    table = torch.zeros(n_pos, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


class Attention(nn.Module):
    """Multi-head attention; self-attention uses one fused [3d, d] projection, cross-attention
    a [d, d] query and a fused [2d, d] key/value projection of the encoder output."""

    def __init__(self, d, heads, cross):
        super().__init__()
        self.d, self.h, self.dh, self.cross = d, heads, d // heads, cross
        if cross:
            self.q = nn.Linear(d, d)
            self.kv = nn.Linear(d, 2 * d)
        else:
            self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, memory=None, causal_mask=None):
        B, T, d = x.shape
        if self.cross:
            S = memory.shape[1]
            q = self.q(x).view(B, T, self.h, self.dh).transpose(1, 2)
            kv = self.kv(memory).view(B, S, 2, self.h, self.dh).permute(2, 0, 3, 1, 4)
            k, v = kv[0], kv[1]
        else:
            qkv = self.qkv(x).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))  # [B, H, T, S]
        if causal_mask is not None:
            scores = scores.masked_fill(causal_mask, float("-inf"))
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, T, dh]
        return self.out(ctx.transpose(1, 2).reshape(B, T, d))


class FeedForward(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff, p):
        super().__init__()
        self.p = p
        self.self_attn = Attention(d, heads, cross=False)
        self.self_ln = nn.LayerNorm(d, eps=1e-6)
        self.ffn = FeedForward(d, d_ff)
        self.final_ln = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x):
        x = self.self_ln(x + F.dropout(self.self_attn(x), self.p, self.training))
        return self.final_ln(x + F.dropout(self.ffn(x), self.p, self.training))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff, p):
        super().__init__()
        self.p = p
        self.self_attn = Attention(d, heads, cross=False)
        self.self_ln = nn.LayerNorm(d, eps=1e-6)
        self.cross_attn = Attention(d, heads, cross=True)
        self.cross_ln = nn.LayerNorm(d, eps=1e-6)
        self.ffn = FeedForward(d, d_ff)
        self.final_ln = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x, memory, causal_mask):
        x = self.self_ln(x + F.dropout(self.self_attn(x, causal_mask=causal_mask), self.p, self.training))
        x = self.cross_ln(x + F.dropout(self.cross_attn(x, memory=memory), self.p, self.training))
        return self.final_ln(x + F.dropout(self.ffn(x), self.p, self.training))


class Transformer(nn.Module):
    def __init__(self, vocab, d, heads, d_ff, enc_layers, dec_layers, p, max_positions=1024):
        super().__init__()
        self.d, self.p = d, p
        self.embed = nn.Parameter(torch.empty(vocab, d))  # shared: enc/dec input, output proj
        self.register_buffer("positions", sinusoidal_table(max_positions, d), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(d, heads, d_ff, p) for _ in range(enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d, heads, d_ff, p) for _ in range(dec_layers))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.embed, mean=0.0, std=self.d ** -0.5)
        with torch.no_grad():
            self.embed[PAD].zero_()
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def embed_tokens(self, ids):
        x = F.embedding(ids, self.embed) * math.sqrt(self.d) + self.positions[: ids.shape[1]]
        return F.dropout(x, self.p, self.training)

    def forward(self, src, tgt_in):
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x)
        memory = x
        T = tgt_in.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, causal)
        return F.linear(y, self.embed)  # logits [B, T, V]


def label_smoothed_loss(logits, targets, vocab, eps):
    """Summed label-smoothed loss and NLL over non-pad targets (q as in the docstring)."""
    logp = torch.log_softmax(logits.reshape(-1, vocab), dim=-1)
    t = targets.reshape(-1)
    keep = t != PAD
    logp, t = logp[keep], t[keep]
    off = eps / (vocab - 1)
    target_logp = logp.gather(1, t[:, None]).squeeze(1)
    # sum_j q_j log p_j = (1 - eps) log p_target + off * (sum_j log p_j - log p_pad)
    smooth = logp.sum(-1) - logp[:, PAD]
    loss = -((1.0 - eps) * target_logp + off * smooth).sum()
    return loss, -target_logp.sum().detach(), int(t.numel())


def noam(step, d_model):
    return d_model ** -0.5 * min(step ** -0.5, step * WARMUP ** -1.5)


def make_batch(args, vocab):
    g = torch.Generator().manual_seed(args.seed * 7919 + 17)
    B = args.batch_sentences
    src_ids = torch.randint(4, vocab, (B, args.src_len - 1), generator=g)
    tgt_ids = torch.randint(4, vocab, (B, args.tgt_len - 1), generator=g)
    col = lambda v: torch.full((B, 1), v, dtype=torch.long)  # noqa: E731
    src = torch.cat([src_ids, col(EOS)], 1)
    tgt_in = torch.cat([col(BOS), tgt_ids], 1)
    tgt_out = torch.cat([tgt_ids, col(EOS)], 1)
    return src, tgt_in, tgt_out


def main():
    args = ARGS
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    d, heads, d_ff, enc, dec = PRESETS[args.preset]
    V = args.vocab
    model = Transformer(V, d, heads, d_ff, enc, dec, args.dropout)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=noam(1, d), betas=(0.9, 0.98), eps=1e-9)
    src, tgt_in, tgt_out = make_batch(args, V)
    tokens_per_step = args.batch_sentences * args.tgt_len

    blas = os.environ.get("OPENBLAS_CORETYPE", "(OpenBLAS's own choice)")
    print(f"torch_train_peer: torch {torch.__version__}, preset {args.preset} (d_model {d}, d_ff {d_ff}, "
          f"heads {heads}, layers {enc}+{dec}), vocab {V}, {params} params")
    print(f"torch_train_peer: batch {args.batch_sentences} sentences x (src {args.src_len}, tgt {args.tgt_len}) "
          f"= {tokens_per_step} target tokens/step, dropout {args.dropout:.2f}, threads {torch.get_num_threads()} "
          f"(OPENBLAS_CORETYPE {blas}, OPENBLAS_NUM_THREADS {os.environ['OPENBLAS_NUM_THREADS']}), "
          f"{args.warmup} warm-up + {args.steps} timed steps", flush=True)

    state = {"step": 0, "loss0": None, "last": None}

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
            logits = model(src, tgt_in)
        loss, nll, tokens = label_smoothed_loss(logits.float(), tgt_out, V, LABEL_SMOOTHING)
        assert tokens == tokens_per_step, (tokens, tokens_per_step)
        (loss / tokens).backward()
        state["step"] += 1
        for group in opt.param_groups:
            group["lr"] = noam(state["step"], d)
        opt.step()
        per_token = loss.item() / tokens
        if state["loss0"] is None:
            state["loss0"] = per_token
        state["last"] = per_token

    for _ in range(args.warmup):
        step()
    load_start = os.getloadavg()[0]
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    times = []
    for _ in range(args.steps):
        a = time.perf_counter()
        step()
        times.append(time.perf_counter() - a)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    tps = tokens_per_step * args.steps / wall
    rss = ru1.ru_maxrss / 1024.0
    print(f"torch_train_peer: loss/token first step {state['loss0']:.4f} (ln V = {math.log(V):.4f}), "
          f"last step {state['last']:.4f}")
    print(f"torch_train_peer: {wall / args.steps:.3f} s/step (min {min(times):.3f}, max {max(times):.3f}), "
          f"{tps:.1f} target tokens/s, cores used {cpu / wall:.2f}, peak RSS {rss:.0f} MiB, "
          f"load {load_start:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"RESULT engine=torch threads={args.threads} tokens_per_s={tps:.2f} s_per_step={wall / args.steps:.4f} "
          f"peak_rss_mib={rss:.0f} loss0={state['loss0']:.4f} cores={cpu / wall:.2f} "
          f"blas_core={os.environ.get('OPENBLAS_CORETYPE', 'default')} dtype={args.dtype}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

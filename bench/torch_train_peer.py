#!/usr/bin/python3
"""PyTorch peer of tnmt's trainer: the same Transformer and the same batches in torch, timed
for the tokens/s ratio. Two uses:

- CPU, against bench/train_bench.cc (bench/run_train_bench.sh): a fixed synthetic batch in
  float32 or bfloat16 autocast, threads pinned. Run with Debian's interpreter (torch 1.13;
  the pyenv python3 has no torch):
      /usr/bin/python3 bench/torch_train_peer.py --preset small --threads 1
- GPU, against `tnmt train --device cuda` (tests/gpu/check.sh): tnmt's own batches of a corpus
  (--train-source/--train-target/--spm-model/--max-tokens/--seed, as `tnmt train` takes
  them), bfloat16 autocast, scaled_dot_product_attention, fused Adam; eager, or
  torch.compile with --compile:
      python3 bench/torch_train_peer.py --device cuda --dtype bfloat16 --preset base \\
          --train-source train.en --train-target train.de --spm-model spm.model \\
          --max-tokens 8192 --warmup 10 --steps 50 [--compile] [--tnmt-save-dir DIR]

Model (docs/model-format.md; the trainer's presets of trainer/train_config.cc): post-norm
encoder-decoder, ReLU, sinusoidal positions (interleaved sin/cos), one embedding matrix shared
by encoder input, decoder input and output projection, embeddings scaled by sqrt(d_model),
layer-norm epsilon 1e-6. Written with torch.nn primitives (nn.Linear, nn.LayerNorm,
F.dropout, a fused q/k/v projection, as tnmt fuses them). Dropout only where tnmt has it: on
embeddings+positions and on every sub-layer output (none inside attention or after the ReLU).
Attention (--attention): "sdpa" = torch.nn.functional.scaled_dot_product_attention (torch 2;
the decoder's self-attention is_causal with no mask, so the flash kernel can take it: target
padding sits at the end, after every real query's keys; encoder self-attention and
cross-attention get a boolean key-padding mask only when the batch has padded sources, which
rules flash out for those calls and leaves the memory-efficient kernel); "matmul" =
matmul/softmax/matmul with the same masks; "auto" (default) = sdpa where torch has it.

Initialisation as trainer/model/parameters.h says: Xavier-uniform linears with zero biases,
N(0, d^-1/2) embeddings with a zero pad row, layer norms 1 and 0 (torch's generator: the
same distributions, not tnmt's numbers).

Loss per non-pad target token: -sum_j q_j log p_j with q = 1 - eps + eps/(V-1) on the target,
eps/(V-1) on every other token except pad, 0 on pad (eps 0.1), summed, in float32 over the
logits (autocast's bfloat16 upcast); padding is masked by multiplication, so no step waits for
the device. The gradient is that of the sum divided by the batch's target tokens (tnmt:
loss_scale 1, Adam grad_scale 1/tokens).

Step: zero grads + forward + backward + Adam (betas 0.9/0.98, eps 1e-9, the paper's
learning-rate schedule with warmup 4000). --adam: "fused" = torch.optim.Adam(fused=True) (one
kernel set for all parameters; CUDA), "foreach", "plain" (per-parameter, torch's CPU
default); "auto" = fused on cuda, plain on cpu. Master weights stay float32 (autocast).

Batches:
- corpus (--train-source): bench/gpu/tnmt_batches.py rebuilds `tnmt train`'s batches from
  the same corpus, SentencePiece model, --max-tokens and --seed (tnmt cannot write its
  batches to a file): the same pairs in the same padded batches in the same order, so
  --warmup W --steps N times batches W+1 .. W+N of a fresh `tnmt train` run (check.sh times
  tnmt's steps 11-60: W 10, N 50). --tnmt-save-dir DIR compares with such a run: the ids in
  DIR/train.rank0.cache and the tokens_seen of DIR/metrics.jsonl (it only reports). Batches
  are built before the clock starts and copied from pinned memory (tnmt prepares each on its
  training thread: that time is inside tnmt's tokens/s). Vocabulary = the SentencePiece
  model's.
- synthetic (no --train-source): batch_sentences rows of random ids in [4, V) (no padding);
  src = ids + eos, tgt_in = bos + ids, tgt_out = ids + eos; the same batch every step.

Timing: W warm-up steps (CUDA kernels load, cuBLAS plans, torch.compile compiles), then N
steps between two device synchronizations; tokens/s = target tokens (non-pad) of the N
batches / wall seconds, as tnmt's metrics count them. --time-limit S stops the run after S
seconds in all (a SIGALRM) and prints what finished, with status=timeout (a compile that
does not finish in time says so instead of a number).

Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set to --threads before torch is
imported (unless already set), then torch.set_num_threads(threads). Debian's torch does its
GEMMs in the system OpenBLAS (the same library tnmt loads); the kernel family OpenBLAS picks
can be forced with OPENBLAS_CORETYPE in the environment (run_train_bench.sh passes tnmt's).

Prints human-readable lines, then
    RESULT engine=torch threads=N tokens_per_s=X s_per_step=S peak_rss_mib=M loss0=L ...
    PEER train engine=torch mode=eager|compile device=D dtype=T attention=A adam=O preset=P
         batches=tnmt|synthetic max_tokens=M steps=N tokens=X seconds=S tokens_per_s=R ...
"""

import argparse
import math
import os
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import tnmt_batches  # noqa: E402 (standard library only until it builds batches)

PRESETS = {
    # name: (d_model, heads, d_ff, encoder layers, decoder layers), as trainer/train_config.cc
    "base": (512, 8, 2048, 6, 6),
    "big": (1024, 16, 4096, 6, 6),
    "small": (256, 4, 1024, 3, 3),
    "tiny": (32, 2, 64, 1, 1),
}
PAD, BOS, EOS = 0, 2, 3
LABEL_SMOOTHING = 0.1
WARMUP = 4000


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=8000, help="synthetic batches (corpus: the SentencePiece model's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-sentences", type=int, default=128)
    p.add_argument("--src-len", type=int, default=25)
    p.add_argument("--tgt-len", type=int, default=25)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="bfloat16: forward under torch.autocast(device, torch.bfloat16) (its matmuls in bfloat16)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--attention", default="auto", choices=["auto", "sdpa", "matmul"])
    p.add_argument("--adam", default="auto", choices=["auto", "fused", "foreach", "plain"])
    p.add_argument("--compile", action="store_true", help="torch.compile the forward and loss (dynamic shapes)")
    p.add_argument("--compile-mode", default="default", help="torch.compile mode (default, reduce-overhead, ...)")
    p.add_argument("--time-limit", type=float, default=0, help="seconds for the whole run (0: none)")
    tnmt_batches.add_arguments(p, required=False)  # --train-source etc.: tnmt's batches (see above)
    a = p.parse_args()
    if a.train_source and not (a.train_target and a.spm_model):
        p.error("--train-source needs --train-target and --spm-model")
    return a


ARGS = parse_args()
# Thread pools are sized when the libraries load: set them before importing torch.
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


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
    a [d, d] query and a fused [2d, d] key/value projection of the encoder output.
    key_mask: [B, 1, 1, S] bool, True where a key takes part (None: every key)."""

    def __init__(self, d, heads, cross, sdpa):
        super().__init__()
        self.d, self.h, self.dh, self.cross, self.sdpa = d, heads, d // heads, cross, sdpa
        if cross:
            self.q = nn.Linear(d, d)
            self.kv = nn.Linear(d, 2 * d)
        else:
            self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, memory=None, key_mask=None, causal=False):
        B, T, d = x.shape
        if self.cross:
            S = memory.shape[1]
            q = self.q(x).view(B, T, self.h, self.dh).transpose(1, 2)
            kv = self.kv(memory).view(B, S, 2, self.h, self.dh).permute(2, 0, 3, 1, 4)
            k, v = kv[0], kv[1]
        else:
            qkv = self.qkv(x).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, is_causal=causal)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))  # [B, H, T, S]
            if causal:
                scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1),
                                            float("-inf"))
            if key_mask is not None:
                scores = scores.masked_fill(~key_mask, float("-inf"))
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
    def __init__(self, d, heads, d_ff, p, sdpa):
        super().__init__()
        self.p = p
        self.self_attn = Attention(d, heads, cross=False, sdpa=sdpa)
        self.self_ln = nn.LayerNorm(d, eps=1e-6)
        self.ffn = FeedForward(d, d_ff)
        self.final_ln = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x, src_mask):
        x = self.self_ln(x + F.dropout(self.self_attn(x, key_mask=src_mask), self.p, self.training))
        return self.final_ln(x + F.dropout(self.ffn(x), self.p, self.training))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff, p, sdpa):
        super().__init__()
        self.p = p
        self.self_attn = Attention(d, heads, cross=False, sdpa=sdpa)
        self.self_ln = nn.LayerNorm(d, eps=1e-6)
        self.cross_attn = Attention(d, heads, cross=True, sdpa=sdpa)
        self.cross_ln = nn.LayerNorm(d, eps=1e-6)
        self.ffn = FeedForward(d, d_ff)
        self.final_ln = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x, memory, src_mask):
        x = self.self_ln(x + F.dropout(self.self_attn(x, causal=True), self.p, self.training))
        x = self.cross_ln(x + F.dropout(self.cross_attn(x, memory=memory, key_mask=src_mask), self.p, self.training))
        return self.final_ln(x + F.dropout(self.ffn(x), self.p, self.training))


class Transformer(nn.Module):
    def __init__(self, vocab, d, heads, d_ff, enc_layers, dec_layers, p, sdpa, max_positions=1024):
        super().__init__()
        self.d, self.p = d, p
        self.embed = nn.Parameter(torch.empty(vocab, d))  # shared: enc/dec input, output proj
        self.register_buffer("positions", sinusoidal_table(max_positions, d), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(d, heads, d_ff, p, sdpa) for _ in range(enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d, heads, d_ff, p, sdpa) for _ in range(dec_layers))
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

    def forward(self, src, tgt_in, src_mask=None):
        """src_mask: [B, 1, 1, S] bool (True: a real source token) or None (no padding)."""
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        memory = x
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, src_mask)
        return F.linear(y, self.embed)  # logits [B, T, V]


def label_smoothed_loss(logits, targets, vocab, eps):
    """Summed label-smoothed loss and NLL over non-pad targets (q as in the docstring)."""
    logp = torch.log_softmax(logits.reshape(-1, vocab), dim=-1)
    t = targets.reshape(-1)
    keep = (t != PAD).to(logp.dtype)
    off = eps / (vocab - 1)
    target_logp = logp.gather(1, t[:, None]).squeeze(1)
    # sum_j q_j log p_j = (1 - eps) log p_target + off * (sum_j log p_j - log p_pad)
    smooth = logp.sum(-1) - logp[:, PAD]
    loss = -(((1.0 - eps) * target_logp + off * smooth) * keep).sum()
    return loss, -(target_logp * keep).sum().detach()


def noam(step, d_model):
    return d_model ** -0.5 * min(step ** -0.5, step * WARMUP ** -1.5)


def synthetic_batch(args, vocab):
    g = torch.Generator().manual_seed(args.seed * 7919 + 17)
    B = args.batch_sentences
    src_ids = torch.randint(4, vocab, (B, args.src_len - 1), generator=g)
    tgt_ids = torch.randint(4, vocab, (B, args.tgt_len - 1), generator=g)
    col = lambda v: torch.full((B, 1), v, dtype=torch.long)  # noqa: E731
    src = torch.cat([src_ids, col(EOS)], 1)
    tgt_in = torch.cat([col(BOS), tgt_ids], 1)
    tgt_out = torch.cat([tgt_ids, col(EOS)], 1)
    return src, tgt_in, tgt_out, B * args.tgt_len, False


def corpus_batches(args, count):
    """tnmt's first `count` batches as (src, tgt_in, tgt_out, target tokens, padded sources?),
    and the vocabulary size."""
    t = time.time()
    corpus, it = tnmt_batches.from_arguments(args, pad=PAD, bos=BOS, eos=EOS)
    raw = it.first(count)
    print(f"torch_train_peer: tnmt's batches of {args.train_source}: {len(corpus.pairs)} pairs kept of "
          f"{corpus.read}, {len(it.plan(0))} batches per epoch at --max-tokens {args.max_tokens}, "
          f"seed {args.seed}; built the first {count} in {time.time() - t:.1f} s", flush=True)
    if args.tnmt_save_dir:
        verdict, notes = tnmt_batches.check_against(corpus, raw, args.tnmt_save_dir)
        for n in notes:
            print(f"torch_train_peer: batches vs {args.tnmt_save_dir}: {n}")
        print(f"torch_train_peer: {verdict}", flush=True)
    out = []
    for src, tgt_in, tgt_out, tokens, lengths in raw:
        tensors = [torch.tensor(x, dtype=torch.long) for x in (src, tgt_in, tgt_out)]
        out.append((*tensors, tokens, min(lengths) < len(src[0])))
    return out, corpus.vocab_size


class TimeLimit(Exception):
    pass


def compiled_graphs():
    """Graphs torch.compile has made so far (0 where torch has no dynamo)."""
    try:
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"]
    except Exception:  # noqa: BLE001 (torch without dynamo, or the counter renamed)
        return 0


def main():
    args = ARGS
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_train_peer: SKIPPED: no CUDA device", flush=True)
        return 0
    sdpa = {"auto": HAVE_SDPA, "sdpa": True, "matmul": False}[args.attention]
    if sdpa and not HAVE_SDPA:
        sys.exit(f"torch_train_peer: torch {torch.__version__} has no scaled_dot_product_attention")
    if args.compile and not hasattr(torch, "compile"):
        print(f"torch_train_peer: SKIPPED: torch {torch.__version__} has no torch.compile", flush=True)
        return 0
    adam = args.adam if args.adam != "auto" else ("fused" if cuda else "plain")
    mode = "compile" if args.compile else "eager"
    started = time.time()
    if args.time_limit > 0:
        def on_alarm(signum, frame):
            raise TimeLimit()
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, args.time_limit)

    n_batches = args.warmup + args.steps
    if args.train_source:
        batches, V = corpus_batches(args, n_batches)
        kind = "tnmt"
    else:
        V = args.vocab
        batches, kind = [synthetic_batch(args, V)] * n_batches, "synthetic"
    if cuda:
        batches = [(s.pin_memory(), ti.pin_memory(), to.pin_memory(), n, m) for s, ti, to, n, m in batches]

    d, heads, d_ff, enc, dec = PRESETS[args.preset]
    model = Transformer(V, d, heads, d_ff, enc, dec, args.dropout, sdpa).to(device)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    extra = {"fused": {"fused": True}, "foreach": {"foreach": True}, "plain": {"foreach": False}}[adam]
    opt = torch.optim.Adam(model.parameters(), lr=noam(1, d), betas=(0.9, 0.98), eps=1e-9, **extra)
    bf16 = args.dtype == "bfloat16"

    def forward_loss(src, tgt_in, tgt_out, src_mask):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in, src_mask)
        return label_smoothed_loss(logits.float(), tgt_out, V, LABEL_SMOOTHING)

    forward = torch.compile(forward_loss, dynamic=True, mode=args.compile_mode) if args.compile else forward_loss

    where = (f"{torch.cuda.get_device_name(device)}" if cuda else
             f"cpu, threads {torch.get_num_threads()} (OPENBLAS_CORETYPE "
             f"{os.environ.get('OPENBLAS_CORETYPE', '(OpenBLAS own choice)')}, OPENBLAS_NUM_THREADS "
             f"{os.environ['OPENBLAS_NUM_THREADS']})")
    print(f"torch_train_peer: torch {torch.__version__} on {where}; preset {args.preset} (d_model {d}, d_ff {d_ff}, "
          f"heads {heads}, layers {enc}+{dec}), vocab {V}, {params} params; {args.dtype}, attention "
          f"{'sdpa' if sdpa else 'matmul'}, Adam {adam}, {mode}")
    if kind == "synthetic":
        print(f"torch_train_peer: batch {args.batch_sentences} sentences x (src {args.src_len}, tgt {args.tgt_len}) "
              f"= {batches[0][3]} target tokens/step, dropout {args.dropout:.2f}, "
              f"{args.warmup} warm-up + {args.steps} timed steps", flush=True)
    else:
        print(f"torch_train_peer: dropout {args.dropout:.2f}, {args.warmup} warm-up + {args.steps} timed steps "
              f"(tnmt's batches {args.warmup + 1}..{n_batches}; "
              f"{sum(b[4] for b in batches)} of {n_batches} with padded sources)", flush=True)

    state = {"step": 0}

    def step(batch):
        src, tgt_in, tgt_out, tokens, padded = batch
        src, tgt_in, tgt_out = (x.to(device, non_blocking=True) for x in (src, tgt_in, tgt_out))
        src_mask = (src != PAD)[:, None, None, :] if padded else None
        opt.zero_grad(set_to_none=True)
        loss, _ = forward(src, tgt_in, tgt_out, src_mask)
        (loss / tokens).backward()
        state["step"] += 1
        for group in opt.param_groups:
            group["lr"] = noam(state["step"], d)
        opt.step()
        return loss.detach() / tokens

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    loss0 = last = None
    done, timed_tokens, times, wall, warm = 0, 0, [], 0.0, 0.0
    status = "ok"
    load_start = os.getloadavg()[0]
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0, graphs = None, 0
    try:
        t = time.perf_counter()
        for i in range(args.warmup):
            per_token = step(batches[i])
            if loss0 is None:
                loss0 = per_token.item()
        if args.compile:
            # Both graphs (sources padded or not) compiled before the clock starts: one more
            # untimed step on the first timed batch of a kind the warm-up did not have.
            seen = {b[4] for b in batches[:args.warmup]}
            for kind_padded in (False, True):
                extra = next((b for b in batches[args.warmup:] if b[4] == kind_padded), None)
                if kind_padded not in seen and extra is not None:
                    step(extra)
        sync()
        warm = time.perf_counter() - t
        graphs = compiled_graphs()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for i in range(args.warmup, n_batches):
            a = time.perf_counter()
            per_token = step(batches[i])
            if not cuda:
                times.append(time.perf_counter() - a)
            timed_tokens += batches[i][3]
            done += 1
        sync()
        wall = time.perf_counter() - t0
        last = per_token.item()
        if args.compile and compiled_graphs() != graphs:
            print(f"torch_train_peer: warning: torch.compile compiled {compiled_graphs() - graphs} more graph(s) "
                  f"during the timed steps (their compile time is in tokens/s)", flush=True)
        if loss0 is None:
            loss0 = last
    except TimeLimit:
        status = "timeout"
        if done and t0 is not None:  # the timed steps that finished, as far as they got
            sync()
            wall = time.perf_counter() - t0
        compiling = " (torch.compile had not finished)" if args.compile and state["step"] == 0 else ""
        print(f"torch_train_peer: stopped by --time-limit {args.time_limit:g} s after {state['step']} "
              f"steps, {done} of them timed{compiling}", flush=True)
    if args.time_limit > 0:
        signal.setitimer(signal.ITIMER_REAL, 0)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    tps = timed_tokens / wall if wall > 0 else 0.0
    rss = ru1.ru_maxrss / 1024.0
    steps = done
    if status == "ok":
        print(f"torch_train_peer: loss/token first step {loss0:.4f} (ln V = {math.log(V):.4f}), last step {last:.4f}")
        spread = f" (min {min(times):.3f}, max {max(times):.3f})" if times else ""
        print(f"torch_train_peer: {wall / max(1, steps):.3f} s/step{spread}, {tps:.1f} target tokens/s, "
              f"warm-up {warm:.1f} s, cores used {cpu / max(wall, 1e-9):.2f}, peak RSS {rss:.0f} MiB"
              + (f", peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB" if cuda else "")
              + f", load {load_start:.2f} -> {os.getloadavg()[0]:.2f}")
        print(f"RESULT engine=torch threads={args.threads} tokens_per_s={tps:.2f} s_per_step={wall / max(1, steps):.4f} "
              f"peak_rss_mib={rss:.0f} loss0={loss0:.4f} cores={cpu / max(wall, 1e-9):.2f} "
              f"blas_core={os.environ.get('OPENBLAS_CORETYPE', 'default')} dtype={args.dtype}")
    print(f"PEER train engine=torch mode={mode} device={device.type} dtype={args.dtype} "
          f"attention={'sdpa' if sdpa else 'matmul'} adam={adam} preset={args.preset} batches={kind} "
          f"max_tokens={args.max_tokens if kind == 'tnmt' else batches[0][3]} steps={steps} tokens={timed_tokens} "
          f"seconds={wall:.3f} tokens_per_s={tps:.0f} warmup_s={warm:.1f} "
          f"loss={'%.3f->%.3f' % (loss0, last) if status == 'ok' else '?'} status={status} "
          f"total_s={time.time() - started:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

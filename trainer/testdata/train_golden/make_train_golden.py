#!/usr/bin/python3
"""Golden data for the trainer: loss, gradients and three Adam steps, from an independent
float64 PyTorch reference.

For each fixture model of tests/golden/data (tiny: post-norm, relu, sinusoidal, all
embeddings shared; tiny_prenorm: pre-norm, gelu, learned positions, nothing shared) and one
fixed batch, this writes trainer/testdata/train_golden/<model>.json with

  * the summed label-smoothed loss, the summed NLL and the target token count,
  * the gradient of the summed loss with respect to every parameter tensor (fairseq names,
    docs/model-format.md; a shared embedding is one tensor, `encoder.embed_tokens.weight`,
    whose gradient is the sum over all its uses),
  * three Adam steps on the same batch (gradient recomputed each step), and the change of every
    parameter after them.

//trainer/optim:train_golden_test runs the C++ trainer on the same batch and compares.

Definitions (written from docs/model-format.md and the contracts in kernels/cpu/loss.h and
adam.h, not from the trainer's code):
  * forward: make_golden.py's float64 model (tests/golden; written from the document alone),
    run per sentence on the unpadded source and target, which is what padding with masks
    must amount to; dropout 0;
  * loss per non-pad target token: -sum_j q_j log p_j, with q = 1 - eps + eps/(V-1) on the
    target, eps/(V-1) on every other token except pad, 0 on pad (eps = 0.1); summed over the
    batch; pad targets are ignored; NLL = -log p_target;
  * Adam (beta1 0.9, beta2 0.98, eps 1e-9), step t = 1, 2, 3: g = grad_scale * dLoss/dw with
    grad_scale = 1/tokens; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    w -= lr_t * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps);
    lr_t = scale * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5), warmup 4000.

Adam's first steps move (almost) every weight by about lr_t whatever the gradient's size, so
the JSON stores the *change* of each parameter ("update" = after - before, in integer units of
"update_unit") rather than the parameters themselves, which would bury the change in their
digits.

JSON: {"model", "model_dir", "dropout", "label_smoothing",
       "batch": {"batch", "src_len", "tgt_len", "src", "src_lengths", "tgt_in", "tgt_out"}
                (flat, row-major, padded with 0, exactly TrainBatch's fields),
       "loss_sum", "nll_sum", "tokens",
       "grads": {name: [flat values]},
       "adam": {"beta1", "beta2", "eps", "d_model", "warmup_steps", "schedule_scale",
                "grad_scale": "1/tokens",
                "steps": [{"step", "lr", "loss_sum", "nll_sum"}]  (loss before the step),
                "final_loss_sum", "final_nll_sum"}  (after the last step),
       "update_unit", "update": {name: [flat integers]}}

Run with Debian's interpreter (it has torch 1.13; the pyenv python3 does not), from anywhere:
    /usr/bin/python3 trainer/testdata/train_golden/make_train_golden.py
The output is deterministic.
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import make_golden  # noqa: E402  (our own float64 forward reference; sets float64 default)

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

PAD, BOS, EOS = 0, 2, 3
LABEL_SMOOTHING = 0.1
BETA1, BETA2, ADAM_EPS = 0.9, 0.98, 1e-9
WARMUP = 4000
# The paper's schedule at steps 1..3 with warmup 4000 is tiny (7e-7 per unit of scale); this
# factor makes the three updates (about 1e-3 each) stand far above float32 rounding.
SCHEDULE_SCALE = 1000.0
STEPS = 3

# The batch: 3 sentences, source ids (eos appended), target ids (bos prepended for the
# decoder input, eos appended for the output). Token 17 appears on both sides and twice in
# sentence 0's target (shared-embedding accumulation); lengths differ so every row but one is
# padded.
SRC_IDS = [[17, 45, 200, 9, 131], [17, 88], [250, 4, 63]]
TGT_IDS = [[17, 17, 102], [71, 9, 230, 5], [255]]
SRC_LEN = 6
TGT_LEN = 5


def make_batch():
    src, src_lengths, tgt_in, tgt_out = [], [], [], []
    for s, t in zip(SRC_IDS, TGT_IDS):
        row = s + [EOS]
        assert len(row) <= SRC_LEN and len(t) + 1 <= TGT_LEN
        src += row + [PAD] * (SRC_LEN - len(row))
        src_lengths.append(len(row))
        ti, to = [BOS] + t, t + [EOS]
        tgt_in += ti + [PAD] * (TGT_LEN - len(ti))
        tgt_out += to + [PAD] * (TGT_LEN - len(to))
    return {"batch": len(SRC_IDS), "src_len": SRC_LEN, "tgt_len": TGT_LEN, "src": src,
            "src_lengths": src_lengths, "tgt_in": tgt_in, "tgt_out": tgt_out}


def label_smoothed_loss(logits, targets, vocab, eps):
    """logits [T, V], targets [T] (no pad) -> (summed smoothed loss, summed nll)."""
    logp = torch.log_softmax(logits, dim=-1)
    off = eps / (vocab - 1)
    q = torch.full_like(logp, off)
    q[:, PAD] = 0.0
    q[torch.arange(len(targets)), targets] = 1.0 - eps + off
    assert torch.allclose(q.sum(-1), torch.ones(len(targets)))
    loss = -(q * logp).sum()
    nll = -logp[torch.arange(len(targets)), targets].sum()
    return loss, nll


def batch_loss(cfg, W, batch):
    """Summed loss over the batch, each sentence computed unpadded."""
    model = make_golden.Model(cfg, W)
    V = cfg["vocab_size"]
    loss = torch.zeros(())
    nll = torch.zeros(())
    tokens = 0
    for b in range(batch["batch"]):
        src = batch["src"][b * SRC_LEN:b * SRC_LEN + batch["src_lengths"][b]]
        tin = batch["tgt_in"][b * TGT_LEN:(b + 1) * TGT_LEN]
        tout = batch["tgt_out"][b * TGT_LEN:(b + 1) * TGT_LEN]
        n = sum(1 for t in tout if t != PAD)
        assert all(t == PAD for t in tout[n:]) and all(t == PAD for t in tin[n:])
        enc = model.encode(src)
        logits = model.decode(enc, torch.tensor([tin[:n]], dtype=torch.long))[0]
        l, nl = label_smoothed_loss(logits, torch.tensor(tout[:n], dtype=torch.long), V,
                                    LABEL_SMOOTHING)
        loss = loss + l
        nll = nll + nl
        tokens += n
    return loss, nll, tokens


def loss_and_grads(cfg, W, batch):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in W.items()}
    loss, nll, tokens = batch_loss(cfg, leaves, batch)
    names = sorted(leaves)
    grads = torch.autograd.grad(loss, [leaves[k] for k in names], allow_unused=True)
    out = {}
    for k, g in zip(names, grads):
        out[k] = torch.zeros_like(W[k]) if g is None else g.detach()
    return loss.item(), nll.item(), tokens, out


def check_gradients(cfg, W, batch, grads, seed=0):
    """Directional finite differences of the float64 loss against autograd, per tensor.
    Returns the largest error as a fraction of the tolerance."""
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    for k in sorted(W):
        u = torch.randn(W[k].shape, generator=gen)
        u /= u.norm()
        h = 1e-5
        Wp = dict(W)
        Wp[k] = W[k] + h * u
        Wm = dict(W)
        Wm[k] = W[k] - h * u
        with torch.no_grad():
            num = (batch_loss(cfg, Wp, batch)[0] - batch_loss(cfg, Wm, batch)[0]).item() / (2 * h)
        ana = (grads[k] * u).sum().item()
        # Absolute floor: rounding of the float64 loss over 2h; k_proj biases have gradient 0
        # (softmax ignores a shift shared by all keys).
        err = abs(num - ana) / (1e-8 + 1e-6 * abs(ana))
        assert err < 1, (k, num, ana)
        worst = max(worst, err)
    return worst


def noam(step, d_model):
    return SCHEDULE_SCALE * d_model ** -0.5 * min(step ** -0.5, step * WARMUP ** -1.5)


# Number formats, chosen to keep each file near 1 MB while staying far below the test's
# tolerances: gradients to 6 significant digits (rounding 5e-7 relative; the test allows 1e-4),
# parameter changes as integers in units of UPDATE_UNIT (rounding 5e-9 absolute, below the
# float32 rounding of the weights themselves; the changes are about 4e-3).
GRAD_DIGITS = 6
UPDATE_UNIT = 1e-8


def grad_values(t):
    return [0 if x == 0 else float(f"{x:.{GRAD_DIGITS - 1}e}") for x in t.reshape(-1).tolist()]


def update_values(t):
    return [int(round(x / UPDATE_UNIT)) for x in t.reshape(-1).tolist()]


def run(name):
    model_dir = os.path.join(ROOT, "tests", "golden", "data", name)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    W, _ = make_golden.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    assert set(W) == set(make_golden.tensor_shapes(cfg))
    batch = make_batch()
    V, d = cfg["vocab_size"], cfg["d_model"]
    assert all(0 <= t < V for t in batch["src"] + batch["tgt_in"] + batch["tgt_out"])

    loss, nll, tokens, grads = loss_and_grads(cfg, W, batch)
    fd = check_gradients(cfg, W, batch, grads)

    # Adam, float64.
    grad_scale = 1.0 / tokens
    Wt = {k: v.clone() for k, v in W.items()}
    m = {k: torch.zeros_like(v) for k, v in W.items()}
    v2 = {k: torch.zeros_like(v) for k, v in W.items()}
    steps = []
    g = grads
    for t in range(1, STEPS + 1):
        if t > 1:
            l_t, n_t, _, g = loss_and_grads(cfg, Wt, batch)
        else:
            l_t, n_t = loss, nll
        lr = noam(t, d)
        bc1, bc2 = 1.0 - BETA1 ** t, 1.0 - BETA2 ** t
        for k in Wt:
            gs = g[k] * grad_scale
            m[k] = BETA1 * m[k] + (1.0 - BETA1) * gs
            v2[k] = BETA2 * v2[k] + (1.0 - BETA2) * gs * gs
            Wt[k] = Wt[k] - lr * (m[k] / bc1) / (torch.sqrt(v2[k] / bc2) + ADAM_EPS)
        steps.append({"step": t, "lr": lr, "loss_sum": l_t, "nll_sum": n_t})
    with torch.no_grad():
        final_loss, final_nll, _ = batch_loss(cfg, Wt, batch)

    golden = {
        "model": name,
        "model_dir": f"tests/golden/data/{name}",
        "dropout": 0.0,
        "label_smoothing": LABEL_SMOOTHING,
        "batch": batch,
        "loss_sum": loss,
        "nll_sum": nll,
        "tokens": tokens,
        "grads": {k: grad_values(grads[k]) for k in sorted(grads)},
        "adam": {
            "beta1": BETA1, "beta2": BETA2, "eps": ADAM_EPS,
            "d_model": d, "warmup_steps": WARMUP, "schedule_scale": SCHEDULE_SCALE,
            "grad_scale": "1/tokens",
            "steps": steps,
            "final_loss_sum": final_loss.item(),
            "final_nll_sum": final_nll.item(),
        },
        "update_unit": UPDATE_UNIT,
        "update": {k: update_values(Wt[k] - W[k]) for k in sorted(W)},
    }
    path = os.path.join(HERE, name + ".json")
    with open(path, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"== {name}: loss {loss:.6f} nll {nll:.6f} tokens {tokens}; autograd vs finite "
          f"differences {fd:.2f} of tolerance; losses {[round(s['loss_sum'], 4) for s in steps]} "
          f"-> {final_loss.item():.4f}; {os.path.getsize(path)} bytes")


def main():
    for name in ("tiny", "tiny_prenorm"):
        run(name)


if __name__ == "__main__":
    main()

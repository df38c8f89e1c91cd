#!/usr/bin/env python3
"""bench/widen_model.py: the Transformer-base-shaped benchmark model made from a trained one.

    widen_test.py --tnmt BIN --work DIR

Widening without added layers is exact up to float rounding: tests/golden/data/tiny widened
to twice its width (same depth) gives each pair of (source, the original's translation) the
same forced-decoding score within 1e-4 per token. With added layers the model has the asked
shape (config and tensors), loads, and translates every sentence; refusals name the problem.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_log import check, summary  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "convert"))
import tnmt_model  # noqa: E402

WIDEN = os.path.join(REPO, "bench", "widen_model.py")
TINY = os.path.join(REPO, "tests", "golden", "data", "tiny")
PRENORM = os.path.join(REPO, "tests", "golden", "data", "tiny_prenorm")
SENTENCES = os.path.join(HERE, "data", "sentences.txt")


def widen(src, out, *extra):
    return subprocess.run([sys.executable, WIDEN, src, out, *extra], capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    tiny_cfg = tnmt_model.load_model(TINY).config
    layers = tiny_cfg["encoder_layers"]

    same = os.path.join(a.work, "same_depth")
    r = widen(TINY, same, "--layers", str(layers), "--dtype", "float32")
    check(r.returncode == 0, "widening tiny at its own depth succeeds", r.stderr)
    hyp = os.path.join(a.work, "hyp.txt")
    with open(hyp, "w") as f:
        subprocess.run([a.tnmt, "translate", "--model", TINY, "--input", SENTENCES, "--threads", "1"],
                       check=True, stdout=f, stderr=subprocess.DEVNULL)
    hyps = open(hyp).read().splitlines()

    def scores(model):
        out = subprocess.run([a.tnmt, "score", "--model", model, "--source", SENTENCES, "--target", hyp,
                              "--token-scores", "--threads", "1"], check=True, capture_output=True, text=True).stdout
        return [[float(x) for x in line.split("|||")[1].split()] for line in out.splitlines()]

    want, got = scores(TINY), scores(same)
    check(len(want) == len(got) == len(hyps) and len(hyps) > 0, "one score line per sentence")
    worst = max((abs(x - y) for w, g in zip(want, got) for x, y in zip(w, g)), default=0.0)
    lengths_ok = all(len(w) == len(g) for w, g in zip(want, got))
    check(lengths_ok and worst <= 1e-4, "the widened model scores every token as the original (1e-4)",
          f"largest difference {worst}")
    cfg = json.load(open(os.path.join(same, "config.json")))
    check(cfg["d_model"] == 2 * tiny_cfg["d_model"] and cfg["num_heads"] == 2 * tiny_cfg["num_heads"]
          and cfg["d_ff"] == 2 * tiny_cfg["d_ff"], "width, heads and d_ff doubled", json.dumps(cfg))

    deep = os.path.join(a.work, "deeper")
    r = widen(TINY, deep, "--layers", str(layers + 2))
    check(r.returncode == 0, "widening and deepening tiny succeeds", r.stderr)
    m = tnmt_model.load_model(deep)  # checks every tensor's presence and shape
    check(m.config["encoder_layers"] == m.config["decoder_layers"] == layers + 2, "layers added")
    check(all(t.dtype == "F16" for t in m.tensors.values()), "float16 by default")
    zero = m.f32(f"decoder.layers.{layers + 1}.fc2.weight")
    check(not zero.any(), "an added layer's second feed-forward matrix is zero")
    out = subprocess.run([a.tnmt, "translate", "--model", deep, "--input", SENTENCES, "--threads", "1"],
                         capture_output=True, text=True)
    check(out.returncode == 0 and len(out.stdout.splitlines()) == len(hyps), "the deeper model translates",
          out.stderr[-500:])

    r = widen(TINY, os.path.join(a.work, "shallow"), "--layers", str(layers - 1))
    check(r.returncode != 0 and "fewer than the model has" in r.stderr, "fewer layers are refused", r.stderr)
    r = widen(PRENORM, os.path.join(a.work, "prenorm"))
    check(r.returncode != 0 and "post-norm model with shared embeddings" in r.stderr,
          "a pre-norm model is refused", r.stderr)
    return summary("widen_test")


if __name__ == "__main__":
    sys.exit(main())

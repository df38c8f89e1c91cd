#!/usr/bin/env python3
"""Writes a Transformer-base-shaped model that still translates: a trained tnmt model (the
earlier demo model, for one: 3+3 layers, d_model 256, 4 heads, d_ff 1024) widened to twice its
width and deepened to 6+6 layers, for benchmarks that need the paper's base shape (512/2048,
8 heads of 64, 6+6 layers) with natural output lengths, which random weights cannot give.

Widening is exact: every activation becomes [x, x] (each weight matrix W becomes the 2 x 2
block matrix of W / 2, biases and layer-norm parameters are repeated, so layer norm over
[x, x] equals [LN(x), LN(x)] and head h + H sees what head h saw). Embeddings are scaled by
1 / sqrt(2) against the larger sqrt(d_model) factor, positions are stored as a learned table
(the sinusoidal table of d_model 256, repeated), and the output projection is untied
([E / 2, E / 2], so the logits are those of the narrow model).

The added layers 3+3 (and up) have zero output projections and zero second feed-forward
matrices, so each only re-normalizes its input; their other weights are copies of the last
original layer's, so they cost the full work. The last added layer's final layer norm takes
the original last layer's parameters. Translations stay close to the original model's (the
benchmark reports BLEU), and sentences stop by themselves.

  bench/widen_model.py MODEL_DIR OUT_DIR [--layers 6] [--dtype float16|float32]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "convert"))
import tnmt_model  # noqa: E402


def widen_matrix(w):
    half = w / 2.0
    return np.block([[half, half], [half, half]])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (>= the model's)")
    ap.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    a = ap.parse_args(argv)

    m = tnmt_model.load_model(a.model_dir)
    cfg = dict(m.config)
    if cfg["normalize_before"] or not cfg["share_embeddings"] or not cfg["share_decoder_input_output_embed"]:
        sys.exit("widen_model: needs a post-norm model with shared embeddings")
    if a.layers < max(cfg["encoder_layers"], cfg["decoder_layers"]):
        sys.exit(f"widen_model: --layers {a.layers} is fewer than the model has")
    d = cfg["d_model"]
    w = {name: m.f32(name) for name in m.tensors}
    out = {}
    st = "F16" if a.dtype == "float16" else "F32"
    np_type = np.float16 if a.dtype == "float16" else np.float32

    def put(name, x):
        out[name] = tnmt_model.Tensor(st, np.ascontiguousarray(x.astype(np_type)))

    emb = w["encoder.embed_tokens.weight"]
    put("encoder.embed_tokens.weight", np.concatenate([emb, emb], axis=1) / np.sqrt(2.0))
    put("decoder.output_projection.weight", np.concatenate([emb, emb], axis=1) / 2.0)
    rows = cfg["max_positions"]
    if cfg["position_encoding"] == "learned":
        pos_e, pos_d = w["encoder.embed_positions.weight"], w["decoder.embed_positions.weight"]
    else:
        pos_e = pos_d = tnmt_model.tnmt_sinusoid(rows, d)
    put("encoder.embed_positions.weight", np.concatenate([pos_e, pos_e], axis=1))
    put("decoder.embed_positions.weight", np.concatenate([pos_d, pos_d], axis=1))

    def widen_layer(src, dst, added, final_ln_from=None):
        for name, x in w.items():
            if not name.startswith(src + "."):
                continue
            tail = name[len(src) + 1:]
            if x.ndim == 2:
                y = widen_matrix(x)
                if added and (tail.endswith("out_proj.weight") or tail == "fc2.weight"):
                    y = np.zeros_like(y)
            else:
                y = np.concatenate([x, x])
                if added and (tail.endswith("out_proj.bias") or tail == "fc2.bias"):
                    y = np.zeros_like(y)
                elif added and tail.endswith("layer_norm.weight"):
                    y = np.ones_like(y)
                elif added and tail.endswith("layer_norm.bias"):
                    y = np.zeros_like(y)
            put(f"{dst}.{tail}", y)
        if final_ln_from is not None:
            for p in ("weight", "bias"):
                x = w[f"{final_ln_from}.final_layer_norm.{p}"]
                put(f"{dst}.final_layer_norm.{p}", np.concatenate([x, x]))

    for side in ("encoder", "decoder"):
        n = cfg[f"{side}_layers"]
        for i in range(a.layers):
            last_added = i == a.layers - 1 and i >= n
            widen_layer(f"{side}.layers.{min(i, n - 1)}", f"{side}.layers.{i}", added=i >= n,
                        final_ln_from=f"{side}.layers.{n - 1}" if last_added else None)

    cfg.update({"d_model": 2 * d, "d_ff": 2 * cfg["d_ff"], "num_heads": 2 * cfg["num_heads"],
                "encoder_layers": a.layers, "decoder_layers": a.layers, "position_encoding": "learned",
                "share_decoder_input_output_embed": False})
    tnmt_model.write_model(a.out_dir, cfg, out, os.path.join(a.model_dir, "spm.model"))
    print(f"widen_model: wrote {a.out_dir}: {a.layers}+{a.layers} layers, d_model {2 * d}, "
          f"d_ff {cfg['d_ff']}, {cfg['num_heads']} heads")


if __name__ == "__main__":
    main()

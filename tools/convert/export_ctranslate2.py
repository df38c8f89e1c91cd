#!/usr/bin/env python3
"""Exports a tnmt model directory as a CTranslate2 model.

    export_ctranslate2.py MODEL_DIR OUT_DIR [--quantization float32|float16|int8|...]
                          [--position-rows N] [--force]

OUT_DIR gets CTranslate2's config.json, model.bin and shared_vocabulary.json, and a copy of
spm.model. Translate with the same SentencePiece model:

    sp = sentencepiece.SentencePieceProcessor(model_file=OUT_DIR + "/spm.model")
    tr = ctranslate2.Translator(OUT_DIR)
    r = tr.translate_batch([sp.encode(line, out_type=str)], beam_size=4, length_penalty=0.6)
    text = sp.decode(r[0].hypotheses[0])

The vocabulary is the SentencePiece pieces in id order (token id i <-> piece i, as in tnmt);
CTranslate2 appends </s> to each source itself. Every tnmt configuration maps onto
CTranslate2's TransformerSpec (docs/model-import-export.md has the mapping and where outputs
can differ). Needs the ctranslate2, numpy and sentencepiece packages (build/py-tools has them).
"""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import tnmt_model  # noqa: E402
from tnmt_model import ModelError  # noqa: E402

QUANTIZATIONS = ("float32", "float16", "bfloat16", "int8", "int8_float32", "int8_float16",
                 "int8_bfloat16", "int16")
DEFAULT_POSITION_ROWS = 1024


def build_spec(model, position_rows=DEFAULT_POSITION_ROWS, vocabulary=None):
    """The CTranslate2 TransformerSpec of a loaded tnmt model (tnmt_model.Model).

    vocabulary: the token strings, default the model's SentencePiece pieces in id order
    (bench/ct2_peer.py passes its placeholder strings for a model without a real spm.model).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.config
    w = model.f32
    d = cfg["d_model"]
    activation = {"relu": common_spec.Activation.RELU,
                  "gelu": common_spec.Activation.GELUTanh}[cfg["activation"]]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg["encoder_layers"], cfg["decoder_layers"]), cfg["num_heads"],
        pre_norm=cfg["normalize_before"], activation=activation)

    def lin(ls, prefix):
        ls.weight = w(prefix + ".weight")
        ls.bias = w(prefix + ".bias")

    def fused(ls, prefix, parts):
        ls.weight = np.concatenate([w(f"{prefix}.{p}.weight") for p in parts], axis=0)
        ls.bias = np.concatenate([w(f"{prefix}.{p}.bias") for p in parts], axis=0)

    def ln(ls, prefix):
        ls.gamma = w(prefix + ".weight")
        ls.beta = w(prefix + ".bias")

    # Positions: CTranslate2's built-in sinusoid is tensor2tensor's ([sin | cos] halves, another
    # frequency scale), not tnmt's interleaved formula, so the table is always given explicitly
    # (row p = position p, as in tnmt). Learned positions are the table itself.
    if cfg["position_encoding"] == "learned":
        spec.encoder.position_encodings.encodings = w("encoder.embed_positions.weight")
        spec.decoder.position_encodings.encodings = w("decoder.embed_positions.weight")
    else:
        table = tnmt_model.tnmt_sinusoid(position_rows, d)
        spec.encoder.position_encodings.encodings = table
        spec.decoder.position_encodings.encodings = table  # one array: saved once
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = bool(cfg["scale_embedding"])

    enc_emb = w("encoder.embed_tokens.weight")
    dec_emb = enc_emb if cfg["share_embeddings"] else w("decoder.embed_tokens.weight")
    proj = dec_emb if cfg["share_decoder_input_output_embed"] else w(
        "decoder.output_projection.weight")
    spec.encoder.embeddings[0].weight = enc_emb
    spec.decoder.embeddings.weight = dec_emb
    spec.decoder.projection.weight = proj  # no bias (optional in the spec)

    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder.layers.{i}"
        fused(layer.self_attention.linear[0], p + ".self_attn", ["q_proj", "k_proj", "v_proj"])
        lin(layer.self_attention.linear[1], p + ".self_attn.out_proj")
        ln(layer.self_attention.layer_norm, p + ".self_attn_layer_norm")
        lin(layer.ffn.linear_0, p + ".fc1")
        lin(layer.ffn.linear_1, p + ".fc2")
        ln(layer.ffn.layer_norm, p + ".final_layer_norm")
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder.layers.{i}"
        fused(layer.self_attention.linear[0], p + ".self_attn", ["q_proj", "k_proj", "v_proj"])
        lin(layer.self_attention.linear[1], p + ".self_attn.out_proj")
        ln(layer.self_attention.layer_norm, p + ".self_attn_layer_norm")
        lin(layer.attention.linear[0], p + ".encoder_attn.q_proj")
        fused(layer.attention.linear[1], p + ".encoder_attn", ["k_proj", "v_proj"])
        lin(layer.attention.linear[2], p + ".encoder_attn.out_proj")
        ln(layer.attention.layer_norm, p + ".encoder_attn_layer_norm")
        lin(layer.ffn.linear_0, p + ".fc1")
        lin(layer.ffn.linear_1, p + ".fc2")
        ln(layer.ffn.layer_norm, p + ".final_layer_norm")
    if cfg["normalize_before"]:
        ln(spec.encoder.layer_norm, "encoder.layer_norm")
        ln(spec.decoder.layer_norm, "decoder.layer_norm")

    tokens = list(vocabulary) if vocabulary is not None else list(model.vocab.pieces)
    if len(tokens) != cfg["vocab_size"]:
        raise ModelError(f"{len(tokens)} vocabulary strings for vocab_size {cfg['vocab_size']}")
    if len(set(tokens)) != len(tokens):
        raise ModelError("the vocabulary has duplicate pieces; CTranslate2 needs unique tokens")
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.unk_token = tokens[cfg["unk_id"]]
    spec.config.bos_token = tokens[cfg["bos_id"]]
    spec.config.eos_token = tokens[cfg["eos_id"]]
    spec.config.decoder_start_token = tokens[cfg["bos_id"]]  # tnmt's first decoder input
    spec.config.add_source_bos = False
    # tnmt's source is the pieces followed by </s>; CTranslate2 appends it when this is set.
    spec.config.add_source_eos = True
    # CTranslate2's default epsilon is 1e-5; tnmt's is in config.json (1e-6 by default).
    spec.config.layer_norm_epsilon = float(cfg["layer_norm_epsilon"])
    return spec


def export(model_dir, out_dir, quantization="float32", position_rows=DEFAULT_POSITION_ROWS,
           force=False):
    try:
        import ctranslate2
    except ImportError:
        raise ModelError("the Python package ctranslate2 is needed (deploy/install-py-tools.sh "
                         "installs it into build/py-tools)") from None
    if quantization not in QUANTIZATIONS:
        raise ModelError(f"--quantization {quantization}: one of {', '.join(QUANTIZATIONS)}")
    model = tnmt_model.load_model(model_dir)
    if model.config["position_encoding"] == "sinusoidal" and not (
            1 <= position_rows <= tnmt_model.TNMT_SINUSOID_ROWS):
        raise ModelError(f"--position-rows {position_rows}: between 1 and "
                         f"{tnmt_model.TNMT_SINUSOID_ROWS} (tnmt's own limit)")
    if os.path.exists(out_dir):
        if not force and os.listdir(out_dir):
            raise ModelError(f"{out_dir}: exists and is not empty (use --force to overwrite)")
    spec = build_spec(model, position_rows)
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    shutil.copyfile(os.path.join(model_dir, "spm.model"), os.path.join(out_dir, "spm.model"))
    cfg = model.config
    rows = (cfg["max_positions"] if cfg["position_encoding"] == "learned" else position_rows)
    print(f"export_ctranslate2: wrote {out_dir} (CTranslate2 {ctranslate2.__version__}, "
          f"{quantization}, {cfg['encoder_layers']}+{cfg['decoder_layers']} layers, d_model "
          f"{cfg['d_model']}, vocabulary {cfg['vocab_size']}, {rows} position rows: sources and "
          f"outputs up to {rows} tokens including </s>)")
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Export a tnmt model directory (config.json, model.safetensors, spm.model) "
                    "as a CTranslate2 model with the SentencePiece vocabulary.")
    ap.add_argument("model_dir", help="tnmt model directory")
    ap.add_argument("out_dir", help="CTranslate2 model directory to write")
    ap.add_argument("--quantization", default="float32", choices=QUANTIZATIONS,
                    help="weight type in model.bin (default float32)")
    ap.add_argument("--position-rows", type=int, default=DEFAULT_POSITION_ROWS,
                    help="sinusoidal models: rows of the position table written (the longest "
                         f"source or output CTranslate2 then accepts; default "
                         f"{DEFAULT_POSITION_ROWS}, at most {tnmt_model.TNMT_SINUSOID_ROWS})")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    args = ap.parse_args(argv)
    try:
        export(args.model_dir, args.out_dir, args.quantization, args.position_rows, args.force)
    except ModelError as e:
        print(f"export_ctranslate2: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""tools/convert/import_fairseq.py: round trips through fairseq's layout, and refusals.

    fairseq_test.py --compare-models BIN --tnmt BIN --work DIR

`to_fairseq` below writes a tnmt model the way a fairseq `transformer` state dict holds it
(fairseq names, fairseq's dictionary order with <s> <pad> </s> <unk> first and the pieces in a
shuffled order, position tables with fairseq's padding offset or no table at all when they are
fairseq's sinusoid, the decoder's start row under </s>, args in the safetensors metadata). It is
written from the fairseq side, independently of the importer; import_fairseq must turn it back
into the same model bit for bit (tests/tools/compare_models DIR_A DIR_B 0, the same config.json
keys and values, the same spm.model).

Models: fairseq fixes layer norm epsilon at 1e-5 and has no tnmt-style sinusoid, so the tnmt
models that fairseq can hold are those with epsilon 1e-5 and position tables:
  tiny_fs   tests/golden/data/tiny (post-norm, relu, every embedding shared) with epsilon 1e-5
            and position tables equal to fairseq's sinusoid: what importing a standard fairseq
            transformer (sinusoidal positions, share_all_embeddings) gives;
  prenorm   tests/golden/data/tiny_prenorm (pre-norm, gelu, learned positions, unshared
            embeddings, BF16, epsilon 1e-5) with its two rows no input ever uses (the encoder's
            <s>, the decoder input's </s>) set as the importer sets them; tnmt's translations
            are checked unchanged by that.
Also: fairseq's sinusoid against values computed by torch (data/fairseq_sinusoid_d32.json),
a share_all_embeddings model, the madeupword padding, and refused settings.

Real fairseq checkpoints: both models saved with torch.save as fairseq does (the "args" layout
of older fairseq and the "cfg" layout of newer) must import bit for bit too; a file that is
not a checkpoint and a .pt without torch (its import blocked) are refused. The test runs in
build/py-hf (Debian's python3-torch; deploy/install-py-tools.sh) and fails without torch.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, summary  # noqa: E402

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "convert"))
import tnmt_model  # noqa: E402
from tnmt_model import Tensor  # noqa: E402

IMPORT = os.path.join(REPO, "tools", "convert", "import_fairseq.py")
TINY = os.path.join(REPO, "tests", "golden", "data", "tiny")
PRENORM = os.path.join(REPO, "tests", "golden", "data", "tiny_prenorm")
SENTENCES = os.path.join(HERE, "data", "sentences.txt")





# ------------------------------------------------------------------------------------------
# tnmt -> fairseq layout (the test's own inverse of the documented mapping)

FS_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def to_fairseq(model_dir, out_path, dict_path, seed=7, args_update=None, share_all=False,
               extra_tensors=None, drop_tensors=(), dict_extra=(), padding=0):
    m = tnmt_model.load_model(model_dir)
    cfg, v = m.config, m.vocab
    assert cfg["layer_norm_epsilon"] == 1e-5 and cfg["position_encoding"] == "learned"
    special = {v.bos_id: 0, v.pad_id: 1, v.eos_id: 2, v.unk_id: 3}
    normal = [j for j in range(len(v)) if j not in special]
    random.Random(seed).shuffle(normal)
    fs_of = np.zeros(len(v), dtype=np.int64)
    for j, k in special.items():
        fs_of[j] = k
    for pos, j in enumerate(normal):
        fs_of[j] = 4 + pos
    symbols = FS_SPECIALS + [v.pieces[j] for j in normal] + list(dict_extra) + [
        f"madeupword{i:04d}" for i in range(padding)]
    n_rows = len(symbols)
    with open(dict_path, "w", encoding="utf-8") as f:
        for i, s in enumerate(symbols[4:]):
            f.write(f"{s} {1000 - i}\n")

    rng = np.random.default_rng(seed)

    def to_fs(t):
        data = np.zeros((n_rows,) + t.shape[1:], dtype=t.data.dtype)
        data[len(v):] = rng.integers(0, 2 ** 14, size=data[len(v):].shape).astype(
            data.dtype) if t.dtype == "BF16" else rng.standard_normal(
            data[len(v):].shape).astype(data.dtype)
        data[fs_of] = t.data
        return Tensor(t.dtype, data)

    enc = m.tensors["encoder.embed_tokens.weight"]
    dec = m.tensors[m.decoder_embed_name()]
    out = m.tensors[m.output_projection_name()]
    state = {}
    fs_enc = to_fs(enc)
    if share_all:
        fs_dec = fs_out = fs_enc
    else:
        fs_dec = to_fs(dec)
        # fairseq feeds </s> as the decoder's first input; tnmt feeds <s>: fairseq's </s>
        # input row is tnmt's <s> row (its <s> row, fed only after generating <s>, too).
        fs_dec.data[2] = dec.data[v.bos_id]
        fs_out = to_fs(out)
    state["encoder.embed_tokens.weight"] = fs_enc
    state["decoder.embed_tokens.weight"] = fs_dec
    state["decoder.output_projection.weight"] = fs_out
    rows = cfg["max_positions"]
    d = cfg["d_model"]
    args = {
        "arch": "transformer", "encoder_embed_dim": d, "decoder_embed_dim": d,
        "decoder_output_dim": d, "decoder_input_dim": d,
        "encoder_ffn_embed_dim": cfg["d_ff"], "decoder_ffn_embed_dim": cfg["d_ff"],
        "encoder_layers": cfg["encoder_layers"], "decoder_layers": cfg["decoder_layers"],
        "encoder_attention_heads": cfg["num_heads"], "decoder_attention_heads": cfg["num_heads"],
        "encoder_normalize_before": cfg["normalize_before"],
        "decoder_normalize_before": cfg["normalize_before"],
        "activation_fn": {"relu": "relu", "gelu": "gelu_accurate"}[cfg["activation"]],
        "no_scale_embedding": not cfg["scale_embedding"],
        "share_all_embeddings": fs_enc.same_bits(fs_dec),
        "share_decoder_input_output_embed": fs_dec.same_bits(fs_out),
        "layernorm_embedding": False, "no_token_positional_embeddings": False,
        "adaptive_softmax_cutoff": None, "cross_self_attention": False,
        "max_source_positions": rows, "max_target_positions": rows,
        "label_smoothing": cfg["label_smoothing"], "dropout": 0.3,
    }
    fs_sin = tnmt_model.fairseq_sinusoid(rows + 2, d, 1)[2:]
    for side in ("encoder", "decoder"):
        table = m.tensors[f"{side}.embed_positions.weight"]
        if table.dtype == "F32" and np.array_equal(table.data.view(np.uint32),
                                                   fs_sin.view(np.uint32)):
            args[f"{side}_learned_pos"] = False
            state[f"{side}.embed_positions._float_tensor"] = Tensor("F32", np.zeros(1))
        else:
            args[f"{side}_learned_pos"] = True
            full = np.zeros((rows + 2, d), dtype=table.data.dtype)
            full[2:] = table.data
            state[f"{side}.embed_positions.weight"] = Tensor(table.dtype, full)
        state[f"{side}.version"] = Tensor("F32", np.array([3.0]))
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
            "decoder.output_projection.weight", "encoder.embed_positions.weight",
            "decoder.embed_positions.weight"}
    for name, t in m.tensors.items():
        if name not in skip:
            state[name] = t
    for name in drop_tensors:
        del state[name]
    state.update(extra_tensors or {})
    args.update(args_update or {})
    tnmt_model.write_safetensors(out_path, state, {"fairseq_args": json.dumps(args)})
    return args


def write_pt(torch, safetensors_path, pt_path, layout):
    """The state dict written by to_fairseq, saved as fairseq saves a checkpoint."""
    tensors, meta = tnmt_model.read_safetensors(safetensors_path)
    args = json.loads(meta["fairseq_args"])
    state = {}
    for name, t in tensors.items():
        if t.dtype == "BF16":
            state[name] = torch.from_numpy(t.data.view(np.int16).copy()).view(torch.bfloat16)
        else:
            state[name] = torch.from_numpy(t.data.copy())
    if layout == "args":
        ckpt = {"args": argparse.Namespace(**args), "model": state}
    else:
        smoothing = args.pop("label_smoothing")
        ckpt = {"args": None, "cfg": {"model": argparse.Namespace(**args),
                                      "criterion": {"label_smoothing": smoothing}},
                "model": state}
    torch.save(ckpt, pt_path)


# ------------------------------------------------------------------------------------------

def run_import(ckpt, out, dict_path, *extra):
    if os.path.exists(out):
        shutil.rmtree(out)
    return subprocess.run([sys.executable, IMPORT, ckpt, out, "--spm",
                           os.path.join(TINY, "spm.model"), "--dict", dict_path, *extra],
                          capture_output=True, text=True)


def same_model(a, b, compare_models):
    r = subprocess.run([compare_models, a, b, "0"], capture_output=True, text=True)
    with open(os.path.join(a, "config.json")) as f:
        ca = json.load(f)
    with open(os.path.join(b, "config.json")) as f:
        cb = json.load(f)
    with open(os.path.join(a, "spm.model"), "rb") as f:
        sa = f.read()
    with open(os.path.join(b, "spm.model"), "rb") as f:
        sb = f.read()
    diff = {k: (ca.get(k), cb.get(k)) for k in set(ca) | set(cb) if ca.get(k) != cb.get(k)}
    ok = r.returncode == 0 and not diff and sa == sb
    return ok, f"compare_models: {r.stdout.strip()} {r.stderr.strip()}; config differences " \
               f"{diff}; spm.model {'same' if sa == sb else 'differs'}"


def dtypes(model_dir):
    tensors, _ = tnmt_model.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return {n: t.dtype for n, t in tensors.items()}


def translate(tnmt, model_dir):
    return subprocess.run([tnmt, "translate", "--model", model_dir, "--input", SENTENCES,
                           "--scores", "--n-best", "2", "--threads", "1"],
                          check=True, capture_output=True, text=True).stdout


def write_variant(src, dst, cfg_update, tensor_fn):
    m = tnmt_model.load_model(src)
    cfg = dict(m.config)
    cfg.update(cfg_update)
    tensors = dict(m.tensors)
    tensor_fn(cfg, tensors, m)
    tnmt_model.write_model(dst, cfg, tensors, os.path.join(src, "spm.model"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare-models", required=True)
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    w = a.work
    os.makedirs(w, exist_ok=True)

    # fairseq's sinusoid vs torch's (values made by data/make_fairseq_sinusoid.py with torch).
    with open(os.path.join(HERE, "data", "fairseq_sinusoid_d32.json")) as f:
        ref = json.load(f)
    table = tnmt_model.fairseq_sinusoid(ref["num_embeddings"], ref["embedding_dim"],
                                        ref["padding_idx"])
    worst = max(float(np.max(np.abs(table[int(r)] - np.array(vals, dtype=np.float32))))
                for r, vals in ref["rows"].items())
    check(worst <= 1e-4, f"fairseq sinusoid vs torch {ref['torch']}: max |diff| {worst:.2e} over "
          f"rows {sorted(int(r) for r in ref['rows'])} (float32 exp/sin last-bit differences)")

    # tiny_fs: tiny with epsilon 1e-5 and fairseq's sinusoid as position tables.
    tiny_fs = os.path.join(w, "tiny_fs")

    def fs_positions(cfg, tensors, m):
        rows, d = cfg["max_positions"], cfg["d_model"]
        t = Tensor.from_f32(tnmt_model.fairseq_sinusoid(rows + 2, d, 1)[2:])
        tensors["encoder.embed_positions.weight"] = t
        tensors["decoder.embed_positions.weight"] = t
    write_variant(TINY, tiny_fs, {"layer_norm_epsilon": 1e-5, "position_encoding": "learned"},
                  fs_positions)

    # prenorm: tiny_prenorm with the importer's values in the two rows no input uses.
    prenorm = os.path.join(w, "prenorm")

    def canonical_rows(cfg, tensors, m):
        bos, eos = m.vocab.bos_id, m.vocab.eos_id
        enc = tensors["encoder.embed_tokens.weight"].rows(slice(None))
        dec = tensors["decoder.embed_tokens.weight"].rows(slice(None))
        enc.data = enc.data.copy()
        dec.data = dec.data.copy()
        dec.data[eos] = enc.data[eos]
        enc.data[bos] = dec.data[bos]
        tensors["encoder.embed_tokens.weight"] = enc
        tensors["decoder.embed_tokens.weight"] = dec
    write_variant(PRENORM, prenorm, {}, canonical_rows)
    same_out = translate(a.tnmt, PRENORM) == translate(a.tnmt, prenorm)
    check(same_out, "tiny_prenorm with the unused <s>/</s> input rows replaced translates "
          "the same (n-best 2, scores)")

    for name, src in (("tiny_fs", tiny_fs), ("prenorm", prenorm)):
        ckpt = os.path.join(w, f"{name}.fairseq.safetensors")
        dict_path = os.path.join(w, f"{name}.dict.txt")
        args = to_fairseq(src, ckpt, dict_path)
        out = os.path.join(w, f"{name}.imported")
        r = run_import(ckpt, out, dict_path)
        check(r.returncode == 0, f"{name}: import_fairseq (fairseq side: share_all_embeddings "
              f"{args['share_all_embeddings']}, learned_pos {args['encoder_learned_pos']}, "
              f"activation_fn {args['activation_fn']}, normalize_before "
              f"{args['encoder_normalize_before']})", r.stderr.strip())
        if r.returncode != 0:
            continue
        print("      " + r.stdout.strip().replace("\n", "\n      "))
        ok, detail = same_model(src, out, a.compare_models)
        check(ok, f"{name}: tnmt -> fairseq -> tnmt is bit-identical (weights, config.json, "
              "spm.model)", detail)
        check(dtypes(src) == dtypes(out), f"{name}: stored dtypes kept "
              f"({sorted(set(dtypes(src).values()))})")
        if name == "tiny_fs":
            check(translate(a.tnmt, src) == translate(a.tnmt, out),
                  f"{name}: the imported model translates the same")
            # The same with fairseq's madeupword padding rows, dropped on request.
            ckpt_p = os.path.join(w, "padded.safetensors")
            dict_p = os.path.join(w, "padded.dict.txt")
            to_fairseq(src, ckpt_p, dict_p, padding=4)
            r = run_import(ckpt_p, os.path.join(w, "padded"), dict_p)
            check(r.returncode == 1 and "madeupword" in r.stderr and "--drop-madeupwords"
                  in r.stderr, "madeupword padding refused by default", r.stderr.strip())
            r = run_import(ckpt_p, os.path.join(w, "padded"), dict_p, "--drop-madeupwords")
            ok, detail = (same_model(src, os.path.join(w, "padded"), a.compare_models)
                          if r.returncode == 0 else (False, r.stderr))
            check(ok, "--drop-madeupwords: the padding rows dropped, the rest bit-identical",
                  detail)

    # A fairseq model with share_all_embeddings (one matrix, decoder starting from </s>).
    ckpt = os.path.join(w, "shared.safetensors")
    dict_path = os.path.join(w, "shared.dict.txt")
    args = to_fairseq(tiny_fs, ckpt, dict_path, share_all=True)
    out = os.path.join(w, "shared.imported")
    r = run_import(ckpt, out, dict_path)
    if r.returncode != 0:
        check(False, "share_all_embeddings model imports", r.stderr.strip())
    else:
        m = tnmt_model.load_model(out)
        e = tnmt_model.load_model(tiny_fs).f32("encoder.embed_tokens.weight")
        bos, eos = m.vocab.bos_id, m.vocab.eos_id
        want_in = e.copy()
        want_in[bos] = e[eos]  # fairseq's start row: </s>
        ok = (args["share_all_embeddings"] and m.config["share_embeddings"]
              and not m.config["share_decoder_input_output_embed"]
              and np.array_equal(m.f32("encoder.embed_tokens.weight"), want_in)
              and np.array_equal(m.f32("decoder.output_projection.weight"), e))
        check(ok, "share_all_embeddings: one input embedding whose <s> row is fairseq's </s> "
              "row, the output projection stored apart (the fairseq matrix unchanged)",
              r.stdout.strip())

    # Refusals: each names the setting.
    ckpt = os.path.join(w, "base.safetensors")
    dict_path = os.path.join(w, "base.dict.txt")
    d = 32
    cases = [
        ("activation_fn gelu (erf)", {"args_update": {"activation_fn": "gelu"}},
         "activation_fn='gelu'"),
        ("activation_fn swish", {"args_update": {"activation_fn": "swish"}},
         "activation_fn='swish' is not supported"),
        ("layernorm_embedding", {"args_update": {"layernorm_embedding": True}},
         "layernorm_embedding=True"),
        ("no_token_positional_embeddings", {"args_update": {"no_token_positional_embeddings":
                                                            True}},
         "no_token_positional_embeddings=True"),
        ("cross_self_attention", {"args_update": {"cross_self_attention": True}},
         "cross_self_attention=True"),
        ("adaptive softmax", {"args_update": {"adaptive_softmax_cutoff": "2000,6000"}},
         "adaptive_softmax_cutoff="),
        ("normalize_before differs", {"args_update": {"decoder_normalize_before": True}},
         "encoder_normalize_before=False but decoder_normalize_before=True"),
        ("heads differ", {"args_update": {"decoder_attention_heads": 2}},
         "encoder_attention_heads 4 != decoder_attention_heads 2"),
        ("decoder_output_dim", {"args_update": {"decoder_output_dim": 64}},
         "decoder_output_dim=64 differs"),
        ("arch", {"args_update": {"arch": "lstm"}}, "arch 'lstm'"),
        ("decoder-only arch", {"args_update": {"arch": "transformer_lm"}},
         "arch 'transformer_lm'"),
        ("NormFormer tensor", {"extra_tensors": {"decoder.layers.0.ffn_layernorm.weight":
                                                Tensor.from_f32(np.ones(64))}},
         "unexpected tensor(s) decoder.layers.0.ffn_layernorm.weight"),
        ("legacy names", {"extra_tensors": {"encoder.layers.0.self_attn.in_proj_weight":
                                            Tensor.from_f32(np.ones((3 * d, d)))}},
         "legacy fairseq tensor names"),
        ("missing tensor", {"drop_tensors": ["decoder.layers.1.encoder_attn.k_proj.bias"]},
         "missing tensor decoder.layers.1.encoder_attn.k_proj.bias"),
        ("symbol not in SentencePiece", {"dict_extra": ["<mask>"]},
         "1 fairseq symbol(s) are not pieces"),
    ]
    for what, kw, expect in cases:
        to_fairseq(tiny_fs, ckpt, dict_path, **kw)
        r = run_import(ckpt, os.path.join(w, "refused"), dict_path)
        check(r.returncode == 1 and expect in r.stderr, f"refuses {what}: "
              f"{r.stderr.strip().removeprefix('import_fairseq: error: ')[:150]}",
              f"exit {r.returncode}, want 1 and {expect!r} in: {r.stderr.strip()}")

    # Dictionary problems, missing inputs.
    to_fairseq(tiny_fs, ckpt, dict_path)
    with open(dict_path, encoding="utf-8") as f:
        lines = f.readlines()
    short = os.path.join(w, "short.dict.txt")
    with open(short, "w", encoding="utf-8") as f:
        f.writelines(lines[:-1])
    r = run_import(ckpt, os.path.join(w, "refused"), short)
    check(r.returncode == 1 and "gives 255 symbols" in r.stderr,
          f"refuses a dictionary of the wrong size: {r.stderr.strip()[:150]}", r.stderr)
    swapped = os.path.join(w, "swapped.dict.txt")
    with open(swapped, "w", encoding="utf-8") as f:
        f.writelines(lines[:-1] + ["notapiece 1\n"])
    r = run_import(ckpt, os.path.join(w, "refused"), swapped)
    check(r.returncode == 1 and "1 SentencePiece piece(s)" in r.stderr,
          f"refuses a dictionary without every piece: {r.stderr.strip()[:150]}", r.stderr)
    r = subprocess.run([sys.executable, IMPORT, ckpt, os.path.join(w, "refused"), "--spm",
                        os.path.join(TINY, "spm.model")], capture_output=True, text=True)
    check(r.returncode == 1 and "pass --dict" in r.stderr,
          f"refuses to guess the dictionary: {r.stderr.strip()[:150]}", r.stderr)
    no_args = os.path.join(w, "noargs.safetensors")
    tensors, _ = tnmt_model.read_safetensors(ckpt)
    tnmt_model.write_safetensors(no_args, tensors)
    r = run_import(no_args, os.path.join(w, "refused"), dict_path)
    check(r.returncode == 1 and "no model arguments" in r.stderr,
          f"refuses a state dict without arguments: {r.stderr.strip()[:150]}", r.stderr)
    args_json = os.path.join(w, "args.json")
    with open(args_json, "w") as f:
        json.dump(json.loads(tnmt_model.read_safetensors(ckpt)[1]["fairseq_args"]), f)
    r = run_import(no_args, os.path.join(w, "from_args"), dict_path, "--args", args_json)
    ok, detail = (same_model(tiny_fs, os.path.join(w, "from_args"), a.compare_models)
                  if r.returncode == 0 else (False, r.stderr))
    check(ok, "--args FILE.json stands in for the metadata", detail)
    # fairseq checkpoints as fairseq writes them (torch.save): the older layout with
    # "args" (an argparse.Namespace) and the newer with "cfg" (model settings under "model",
    # label smoothing under "criterion"); each must import bit for bit like the state dict.
    try:
        import torch
    except ImportError as e:
        torch = None
        check(False, "torch imports (the .pt checks need it: run the test in build/py-hf, "
              "deploy/install-py-tools.sh)", str(e))
    if torch is not None:
        for name, src in (("tiny_fs", tiny_fs), ("prenorm", prenorm)):
            ckpt = os.path.join(w, f"{name}.fairseq.safetensors")
            dict_path = os.path.join(w, f"{name}.dict.txt")
            to_fairseq(src, ckpt, dict_path)
            for layout in ("args", "cfg"):
                pt = os.path.join(w, f"{name}.{layout}.pt")
                write_pt(torch, ckpt, pt, layout)
                out = os.path.join(w, f"{name}.{layout}.imported")
                r = run_import(pt, out, dict_path)
                ok, detail = (same_model(src, out, a.compare_models) if r.returncode == 0
                              else (False, r.stderr.strip()))
                ok = ok and dtypes(src) == dtypes(out)
                check(ok, f"{name}: fairseq .pt checkpoint (torch {torch.__version__}, "
                      f"\"{layout}\" layout) imports bit-identical, dtypes kept", detail)
    fake_pt = os.path.join(w, "model.pt")
    with open(fake_pt, "wb") as f:
        f.write(b"not a checkpoint")
    r = run_import(fake_pt, os.path.join(w, "refused"), dict_path)
    check(r.returncode == 1 and "cannot load with torch" in r.stderr,
          f".pt that is not a checkpoint: {r.stderr.strip()[:150]}", r.stderr)
    # Without torch (its import blocked), a .pt is refused with the way out.
    blocked = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", blocked, IMPORT, os.path.join(w, "tiny_fs.args.pt"),
                        os.path.join(w, "refused"), "--spm", os.path.join(TINY, "spm.model"),
                        "--dict", os.path.join(w, "tiny_fs.dict.txt")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "needs torch" in r.stderr and ".safetensors" in r.stderr,
          f".pt without torch: {r.stderr.strip()[:150]}", r.stderr)

    return summary("fairseq_test")


if __name__ == "__main__":
    sys.exit(main())

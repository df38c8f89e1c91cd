#!/usr/bin/env python3
"""Imports a fairseq `transformer` translation model as a tnmt model directory.

    import_fairseq.py CHECKPOINT OUT_DIR --spm SPM_MODEL --dict DICT_TXT
                      [--src-dict DICT_TXT --tgt-dict DICT_TXT] [--args ARGS_JSON]
                      [--max-positions N] [--drop-madeupwords] [--force]

CHECKPOINT is either
  * a fairseq checkpoint (.pt): its "model" state dict and its "args" (older fairseq) or
    "cfg"["model"] (newer); reading it needs torch (and omegaconf for some newer checkpoints),
    which this script imports only for .pt files; or
  * a .safetensors file holding the same state dict under fairseq's names, with the model's
    args as JSON in its metadata under "fairseq_args" (or given with --args FILE.json).
DICT_TXT is the fairseq dictionary the model was trained with (dict.txt: "SYMBOL COUNT" per
line; fairseq puts <s> <pad> </s> <unk> at ids 0-3 before it), SPM_MODEL the SentencePiece
model whose pieces fairseq's data was encoded with. OUT_DIR gets config.json,
model.safetensors and a copy of SPM_MODEL.

The conversion is exact or refused: docs/model-import-export.md lists what is supported, how
each part maps (vocabulary order, positions, the decoder's first input) and what is refused.
Needs numpy and sentencepiece (build/py-tools has them).
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import tnmt_model  # noqa: E402
from tnmt_model import ModelError, Tensor  # noqa: E402

# fairseq's Dictionary: <s>=0 <pad>=1 </s>=2 <unk>=3, then dict.txt in file order.
FS_BOS, FS_PAD, FS_EOS, FS_UNK = 0, 1, 2, 3
FS_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
FAIRSEQ_LAYER_NORM_EPS = 1e-5  # fairseq's LayerNorm is torch's default
MADEUPWORD = re.compile(r"^madeupword\d{4}$")

# Buffers in a fairseq state dict that carry no weights.
IGNORED = re.compile(r"^(encoder|decoder)\.(version|embed_positions\._float_tensor)$")

# Boolean settings tnmt cannot express: refused when true, named in the message.
REFUSED_FLAGS = {
    "layernorm_embedding": "a layer norm after the embeddings",
    "no_token_positional_embeddings": "no position embeddings",
    "cross_self_attention": "cross+self attention",
    "no_cross_attention": "a decoder without cross-attention",
    "adaptive_input": "adaptive input embeddings",
    "tie_adaptive_weights": "adaptive softmax",
    "char_inputs": "character inputs",
    "no_decoder_final_norm": "a pre-norm decoder without its final layer norm",
    "scale_attn": "NormFormer attention layer norms",
    "scale_fc": "NormFormer feed-forward layer norms",
    "scale_heads": "NormFormer head scaling",
    "scale_resids": "NormFormer residual scaling",
    "encoder_layers_to_keep": "pruned encoder layers",
    "decoder_layers_to_keep": "pruned decoder layers",
}


# ------------------------------------------------------------------------------------------
# Reading the checkpoint

def _as_dict(obj):
    if obj is None:
        return None
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "items"):  # omegaconf DictConfig
        return {k: v for k, v in obj.items()}
    if hasattr(obj, "__dict__"):  # argparse.Namespace
        return dict(vars(obj))
    raise ModelError(f"cannot read the model configuration ({type(obj).__name__})")


def _from_torch(value, name):
    import torch
    t = value.detach().cpu().contiguous()
    if t.dtype == torch.float32:
        return Tensor("F32", t.numpy())
    if t.dtype == torch.float16:
        return Tensor("F16", t.numpy())
    if t.dtype == torch.bfloat16:
        return Tensor("BF16", t.view(torch.int16).numpy().view(np.uint16))
    if t.dtype == torch.float64:
        return Tensor("F64", t.numpy())
    raise ModelError(f"tensor {name}: unsupported dtype {t.dtype}")


def read_checkpoint(path, args_path=None):
    """Returns ({fairseq name: Tensor}, args dict)."""
    if not os.path.isfile(path):
        raise ModelError(f"{path}: no such file")
    args = None
    if path.endswith(".safetensors"):
        tensors, meta = tnmt_model.read_safetensors(path)
        if "fairseq_args" in meta:
            try:
                args = json.loads(meta["fairseq_args"])
            except json.JSONDecodeError as e:
                raise ModelError(f"{path}: metadata fairseq_args is not JSON ({e})") from None
    else:
        try:
            import torch
        except ImportError:
            raise ModelError(f"{path}: reading a fairseq .pt checkpoint needs torch; without it, "
                             "save its state dict as .safetensors (docs/model-import-export.md)"
                             ) from None
        try:
            try:
                ckpt = torch.load(path, map_location="cpu", weights_only=False)
            except TypeError:  # torch < 1.13 has no weights_only
                ckpt = torch.load(path, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - torch raises many kinds
            raise ModelError(f"{path}: cannot load with torch ({type(e).__name__}: {e})") from None
        if not isinstance(ckpt, dict) or "model" not in ckpt:
            raise ModelError(f"{path}: not a fairseq checkpoint (no \"model\" state dict)")
        tensors = {k: _from_torch(v, k) for k, v in ckpt["model"].items()
                   if hasattr(v, "detach")}
        cfg = ckpt.get("cfg")
        model_cfg = None
        if cfg is not None:
            model_cfg = cfg.get("model") if hasattr(cfg, "get") else getattr(cfg, "model", None)
        args = _as_dict(model_cfg) if model_cfg is not None else _as_dict(ckpt.get("args"))
        if args is not None and "label_smoothing" not in args and cfg is not None:
            crit = cfg.get("criterion") if hasattr(cfg, "get") else None
            crit = _as_dict(crit) if crit is not None else None
            if crit and "label_smoothing" in crit:
                args["label_smoothing"] = crit["label_smoothing"]
    if args_path:
        with open(args_path, encoding="utf-8") as f:
            args = json.load(f)
    if args is None:
        raise ModelError(f"{path}: no model arguments (a .pt needs \"args\" or \"cfg\"; a "
                         ".safetensors needs metadata \"fairseq_args\"; or pass --args FILE.json)")
    if not isinstance(args, dict):
        raise ModelError("the model arguments must be a JSON object")
    return tensors, args


def read_fairseq_dict(path):
    """fairseq Dictionary.load: the 4 specials, then one symbol per line ("SYMBOL COUNT")."""
    symbols = list(FS_SPECIALS)
    seen = {s: i for i, s in enumerate(symbols)}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    with f:
        for n, line in enumerate(f, 1):
            line = line.rstrip()
            try:
                word, count = line.rsplit(" ", 1)
                if count == "#fairseq:overwrite":
                    raise ModelError(f"{path}:{n}: \"#fairseq:overwrite\" entries are not "
                                     "supported (they make two rows for one symbol)")
                int(count)
            except ValueError:
                raise ModelError(f"{path}:{n}: not a fairseq dictionary line (\"SYMBOL COUNT\"): "
                                 f"{line!r}") from None
            if word in seen:
                raise ModelError(f"{path}:{n}: duplicate symbol {word!r}")
            seen[word] = len(symbols)
            symbols.append(word)
    return symbols


# ------------------------------------------------------------------------------------------
# Vocabulary

def vocabulary_map(vocab, symbols, dict_path, drop_madeupwords):
    """index[j] = fairseq id of SentencePiece id j, for every j. Refuses unless the mapping is a
    bijection (apart from fairseq's madeupword padding with --drop-madeupwords)."""
    for name, i in (("pad", vocab.pad_id), ("unk", vocab.unk_id), ("bos", vocab.bos_id),
                    ("eos", vocab.eos_id)):
        if i < 0:
            raise ModelError(f"{vocab.path}: has no {name} piece ({name}_id -1); fairseq's "
                             f"dictionary has <{name}> and tnmt needs a piece for it: retrain "
                             f"SentencePiece with --{name}_id set")
    special = {vocab.bos_id: FS_BOS, vocab.pad_id: FS_PAD, vocab.eos_id: FS_EOS,
               vocab.unk_id: FS_UNK}
    where = {s: i for i, s in enumerate(symbols)}
    index, missing = [], []
    for j, piece in enumerate(vocab.pieces):
        if j in special:
            index.append(special[j])
        elif piece in where and where[piece] >= len(FS_SPECIALS):
            index.append(where[piece])
        else:
            missing.append(piece)
            index.append(-1)
    if missing:
        raise ModelError(f"{dict_path}: {len(missing)} SentencePiece piece(s) of {vocab.path} "
                         f"are not in the fairseq dictionary, e.g. {missing[:5]}; tnmt needs a "
                         "row for every piece: use a dictionary made from the SentencePiece "
                         "vocabulary (docs/model-import-export.md)")
    used = set(index)
    extra = [s for i, s in enumerate(symbols) if i not in used]
    padding = [s for s in extra if MADEUPWORD.match(s)]
    other = [s for s in extra if not MADEUPWORD.match(s)]
    if other:
        raise ModelError(f"{dict_path}: {len(other)} fairseq symbol(s) are not pieces of "
                         f"{vocab.path}, e.g. {other[:5]}; the dictionary must hold exactly the "
                         "SentencePiece pieces")
    if padding and not drop_madeupwords:
        raise ModelError(f"{dict_path}: {len(padding)} padding symbol(s) madeupwordNNNN "
                         "(fairseq's --padding-factor) have no SentencePiece piece; tnmt can "
                         "only drop their rows, which removes their (normally negligible) "
                         "probability from the softmax: pass --drop-madeupwords to accept")
    return np.array(index, dtype=np.int64), len(padding)


# ------------------------------------------------------------------------------------------
# Conversion

def _get(args, key, default=None):
    v = args.get(key, default)
    return default if v is None else v


def _layers(tensors, prefix):
    n = 0
    while f"{prefix}.layers.{n}.fc1.weight" in tensors:
        n += 1
    return n


def convert(tensors, args, vocab, src_symbols, tgt_symbols, src_dict, tgt_dict,
            max_positions=None, drop_madeupwords=False):
    """Returns (tnmt config dict, {tnmt name: Tensor}, notes)."""
    notes = []
    arch = _get(args, "arch", _get(args, "_name", ""))
    if arch and (not arch.startswith("transformer") or arch.startswith("transformer_lm")):
        raise ModelError(f"arch {arch!r}: only fairseq's encoder-decoder \"transformer\" "
                         "architectures (transformer, transformer_wmt_en_de, "
                         "transformer_iwslt_de_en, transformer_vaswani_wmt_en_de_big, ...) are "
                         "supported")
    for key, what in REFUSED_FLAGS.items():
        if _get(args, key, False):
            raise ModelError(f"{key}={_get(args, key)!r} ({what}) is not supported by tnmt")
    if _get(args, "adaptive_softmax_cutoff", None):
        raise ModelError(f"adaptive_softmax_cutoff={args['adaptive_softmax_cutoff']!r} "
                         "(adaptive softmax) is not supported by tnmt")
    legacy = [k for k in tensors if k.endswith("in_proj_weight") or ".layer_norms." in k]
    if legacy:
        raise ModelError(f"legacy fairseq tensor names ({legacy[0]}, ...): load and save the "
                         "checkpoint with a current fairseq first (its upgrade_state_dict "
                         "renames them)")

    used = set()

    def take(name, shape=None):
        if name not in tensors:
            raise ModelError(f"missing tensor {name} (not a fairseq transformer state dict?)")
        t = tensors[name]
        if shape is not None and t.shape != tuple(shape):
            raise ModelError(f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
        used.add(name)
        if t.dtype == "F64":
            return Tensor("F32", t.data.astype(np.float32))
        return t

    enc_emb = take("encoder.embed_tokens.weight")
    dec_emb = take("decoder.embed_tokens.weight")
    d = enc_emb.shape[1]
    if dec_emb.shape[1] != d:
        raise ModelError(f"encoder_embed_dim {d} != decoder_embed_dim {dec_emb.shape[1]}: tnmt "
                         "has one d_model")
    for key in ("decoder_output_dim", "decoder_input_dim", "encoder_embed_dim",
                "decoder_embed_dim"):
        if _get(args, key, d) != d:
            raise ModelError(f"{key}={args[key]} differs from the embedding width {d} "
                             "(projections between widths are not supported by tnmt)")
    if enc_emb.shape[0] != len(src_symbols):
        raise ModelError(f"encoder.embed_tokens.weight has {enc_emb.shape[0]} rows but "
                         f"{src_dict} gives {len(src_symbols)} symbols (4 specials + lines): "
                         "not the model's dictionary")
    if dec_emb.shape[0] != len(tgt_symbols):
        raise ModelError(f"decoder.embed_tokens.weight has {dec_emb.shape[0]} rows but "
                         f"{tgt_dict} gives {len(tgt_symbols)} symbols (4 specials + lines): "
                         "not the model's dictionary")
    heads = _get(args, "encoder_attention_heads")
    dec_heads = _get(args, "decoder_attention_heads", heads)
    if heads is None:
        raise ModelError("the model arguments lack encoder_attention_heads (it cannot be read "
                         "from the weights)")
    if heads != dec_heads:
        raise ModelError(f"encoder_attention_heads {heads} != decoder_attention_heads "
                         f"{dec_heads}: tnmt has one num_heads")
    if d % heads:
        raise ModelError(f"embedding width {d} is not divisible by {heads} heads")
    n_enc, n_dec = _layers(tensors, "encoder"), _layers(tensors, "decoder")
    if n_enc == 0 or n_dec == 0:
        raise ModelError("no encoder.layers.N / decoder.layers.N tensors (not a fairseq "
                         "transformer state dict?)")
    for key, n in (("encoder_layers", n_enc), ("decoder_layers", n_dec)):
        if _get(args, key, n) != n:
            raise ModelError(f"{key}={args[key]} but the state dict has {n} layers")
    ff = take("encoder.layers.0.fc1.weight").shape[0]
    dec_ff = take("decoder.layers.0.fc1.weight").shape[0]
    if ff != dec_ff:
        raise ModelError(f"encoder_ffn_embed_dim {ff} != decoder_ffn_embed_dim {dec_ff}: tnmt "
                         "has one d_ff")
    enc_pre = bool(_get(args, "encoder_normalize_before", False))
    dec_pre = bool(_get(args, "decoder_normalize_before", False))
    if enc_pre != dec_pre:
        raise ModelError(f"encoder_normalize_before={enc_pre} but decoder_normalize_before="
                         f"{dec_pre}: tnmt has one normalize_before")
    for side in ("encoder", "decoder"):
        if (f"{side}.layer_norm.weight" in tensors) != enc_pre:
            raise ModelError(f"{side}.layer_norm {'missing' if enc_pre else 'present'} but "
                             f"{side}_normalize_before={enc_pre}")
    act = _get(args, "activation_fn", "relu")
    if act == "relu":
        activation = "relu"
    elif act in ("gelu_accurate", "gelu_fast"):
        activation = "gelu"  # tanh approximation, as tnmt's gelu
    elif act == "gelu":
        raise ModelError("activation_fn='gelu' (fairseq's exact erf gelu) is not supported: "
                         "tnmt's gelu is the tanh approximation (fairseq's 'gelu_accurate')")
    else:
        raise ModelError(f"activation_fn={act!r} is not supported (relu or gelu_accurate)")

    # Vocabulary: fairseq ids -> SentencePiece ids.
    src_index, n_pad_src = vocabulary_map(vocab, src_symbols, src_dict, drop_madeupwords)
    tgt_index, n_pad_tgt = vocabulary_map(vocab, tgt_symbols, tgt_dict, drop_madeupwords)
    if n_pad_src or n_pad_tgt:
        notes.append(f"dropped the rows of {max(n_pad_src, n_pad_tgt)} madeupword padding "
                     "symbol(s)")
    if "decoder.output_projection.weight" in tensors:
        out_fs = take("decoder.output_projection.weight", dec_emb.shape)
    elif "decoder.embed_out" in tensors:
        out_fs = take("decoder.embed_out", dec_emb.shape)
    elif _get(args, "share_decoder_input_output_embed", False) or _get(
            args, "share_all_embeddings", False):
        out_fs = dec_emb
    else:
        raise ModelError("missing tensor decoder.output_projection.weight (and the arguments "
                         "do not share it with decoder.embed_tokens)")
    dtypes = {enc_emb.dtype, dec_emb.dtype, out_fs.dtype}
    if len(dtypes) > 1:  # rows move between these three: widen to one type (exact)
        enc_emb, dec_emb, out_fs = (Tensor.from_f32(t.f32()) for t in (enc_emb, dec_emb, out_fs))
    bos, eos = vocab.bos_id, vocab.eos_id
    enc = enc_emb.rows(src_index)
    dec = dec_emb.rows(tgt_index)
    out = out_fs.rows(tgt_index)
    # fairseq's decoder starts from </s>, tnmt's from <s> (bos_id): tnmt's decoder input row
    # for <s> is fairseq's row for </s>. The rows no tnmt input ever uses are filled so that
    # equal matrices can be shared: the encoder's <s> (SentencePiece never encodes <s> from
    # text) and the decoder input's </s> (a hypothesis ends at </s>).
    dec.data[bos] = dec_emb.data[FS_EOS]
    dec.data[eos] = enc.data[eos]
    enc.data[bos] = dec.data[bos]
    share_embeddings = enc.same_bits(dec)
    share_io = dec.same_bits(out)
    out_t = {"encoder.embed_tokens.weight": enc}
    if not share_embeddings:
        out_t["decoder.embed_tokens.weight"] = dec
    if not share_io:
        out_t["decoder.output_projection.weight"] = out
        if _get(args, "share_decoder_input_output_embed", False) or _get(
                args, "share_all_embeddings", False):
            notes.append("the output projection is stored apart from the decoder input "
                         "embedding: they differ in the <s> row (fairseq's decoder starts "
                         "from </s>, tnmt's from <s>)")

    # Positions: always written as tables (tnmt's "learned"), row p = position p. fairseq's
    # position of the k-th token is padding_idx + 1 + k.
    offset = FS_PAD + 1
    tables, limits = {}, []
    for side, max_key in (("encoder", "max_source_positions"), ("decoder", "max_target_positions")):
        learned = bool(_get(args, f"{side}_learned_pos", False))
        name = f"{side}.embed_positions.weight"
        if learned:
            t = take(name)
            if t.shape[1] != d or t.shape[0] <= offset:
                raise ModelError(f"tensor {name} has shape {list(t.shape)}")
            tables[side] = ("learned", t)
            limits.append(t.shape[0] - offset)
        else:
            if name in tensors:
                raise ModelError(f"tensor {name} present but {side}_learned_pos is false")
            tables[side] = ("sinusoidal", None)
            limits.append(None)
    sinusoid_default = max(int(_get(args, "max_source_positions", 1024)),
                           int(_get(args, "max_target_positions", 1024)))
    learned_limits = [n for n in limits if n is not None]
    rows = min(learned_limits) if learned_limits else sinusoid_default
    if learned_limits and len(set(learned_limits)) > 1:
        notes.append(f"learned position tables cut to the shorter one's {rows} rows")
    if max_positions is not None:
        if learned_limits and max_positions > rows:
            raise ModelError(f"--max-positions {max_positions}: the learned position tables "
                             f"have {rows} rows")
        rows = max_positions
    for side, (kind, t) in tables.items():
        if kind == "learned":
            table = t.rows(slice(offset, offset + rows))
            if table.dtype == "F64":
                table = Tensor("F32", table.data.astype(np.float32))
        else:
            table = Tensor.from_f32(
                tnmt_model.fairseq_sinusoid(rows + offset, d, FS_PAD)[offset:])
        out_t[f"{side}.embed_positions.weight"] = table
    kinds = sorted({k for k, _ in tables.values()})
    notes.append(f"positions: fairseq {' and '.join(kinds)} -> tnmt learned tables of {rows} "
                 "rows")

    # Layers: tnmt uses fairseq's names.
    layer_names = tnmt_model.expected_tensors({
        "d_model": d, "vocab_size": len(vocab), "d_ff": ff, "encoder_layers": n_enc,
        "decoder_layers": n_dec, "normalize_before": enc_pre, "share_embeddings": True,
        "share_decoder_input_output_embed": True, "position_encoding": "sinusoidal"})
    for name, shape in layer_names.items():
        if name == "encoder.embed_tokens.weight":
            continue
        out_t[name] = take(name, shape)
    unused = sorted(k for k in tensors if k not in used and not IGNORED.match(k))
    if unused:
        raise ModelError(f"unexpected tensor(s) {', '.join(unused[:5])}"
                         f"{', ...' if len(unused) > 5 else ''}: a setting tnmt does not support "
                         "(or the arguments do not match the weights)")

    cfg = {
        "format": tnmt_model.FORMAT, "format_version": tnmt_model.FORMAT_VERSION,
        "vocab_size": len(vocab), "d_model": d, "num_heads": int(heads), "d_ff": ff,
        "encoder_layers": n_enc, "decoder_layers": n_dec, "normalize_before": enc_pre,
        "activation": activation, "position_encoding": "learned", "max_positions": rows,
        "share_embeddings": share_embeddings, "share_decoder_input_output_embed": share_io,
        "scale_embedding": not bool(_get(args, "no_scale_embedding", False)),
        "layer_norm_epsilon": FAIRSEQ_LAYER_NORM_EPS,
        "pad_id": vocab.pad_id, "unk_id": vocab.unk_id, "bos_id": vocab.bos_id,
        "eos_id": vocab.eos_id,
        "label_smoothing": float(_get(args, "label_smoothing", 0.1)),
        "decoding": dict(tnmt_model.DECODING_DEFAULTS),
    }
    return cfg, out_t, notes


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Import a fairseq transformer checkpoint as a tnmt model directory.")
    ap.add_argument("checkpoint", help="fairseq checkpoint (.pt) or state dict (.safetensors)")
    ap.add_argument("out_dir", help="tnmt model directory to write")
    ap.add_argument("--spm", required=True, help="the SentencePiece model of the data")
    ap.add_argument("--dict", help="fairseq dictionary (dict.txt), source and target")
    ap.add_argument("--src-dict", help="fairseq source dictionary (default --dict)")
    ap.add_argument("--tgt-dict", help="fairseq target dictionary (default --dict)")
    ap.add_argument("--args", help="model arguments as a JSON object (overrides the checkpoint's)")
    ap.add_argument("--max-positions", type=int,
                    help="rows of the position tables written (default: the model's "
                         "max_source/target_positions, or the learned tables' rows)")
    ap.add_argument("--drop-madeupwords", action="store_true",
                    help="drop fairseq's madeupwordNNNN padding symbols")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    a = ap.parse_args(argv)
    src_dict = a.src_dict or a.dict
    tgt_dict = a.tgt_dict or a.dict
    try:
        if not src_dict or not tgt_dict:
            raise ModelError("the fairseq dictionary is needed to map its ids to SentencePiece "
                             "ids: pass --dict dict.txt (or --src-dict and --tgt-dict)")
        if a.max_positions is not None and a.max_positions < 1:
            raise ModelError("--max-positions must be positive")
        if os.path.isdir(a.out_dir) and os.listdir(a.out_dir) and not a.force:
            raise ModelError(f"{a.out_dir}: exists and is not empty (use --force to overwrite)")
        vocab = tnmt_model.Vocabulary(a.spm)
        tensors, args = read_checkpoint(a.checkpoint, a.args)
        cfg, out, notes = convert(tensors, args, vocab, read_fairseq_dict(src_dict),
                                  read_fairseq_dict(tgt_dict), src_dict, tgt_dict,
                                  a.max_positions, a.drop_madeupwords)
        tnmt_model.write_model(a.out_dir, cfg, out, a.spm)
    except ModelError as e:
        print(f"import_fairseq: error: {e}", file=sys.stderr)
        return 1
    print(f"import_fairseq: wrote {a.out_dir}: {cfg['encoder_layers']}+{cfg['decoder_layers']} "
          f"layers, d_model {cfg['d_model']}, {cfg['num_heads']} heads, d_ff {cfg['d_ff']}, "
          f"{'pre' if cfg['normalize_before'] else 'post'}-norm, {cfg['activation']}, "
          f"vocabulary {cfg['vocab_size']}, share_embeddings {cfg['share_embeddings']}, "
          f"share_decoder_input_output_embed {cfg['share_decoder_input_output_embed']}")
    for n in notes:
        print(f"import_fairseq: note: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

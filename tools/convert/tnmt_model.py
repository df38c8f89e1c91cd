"""Reading and writing tnmt model directories (docs/model-format.md) with numpy only.

Shared by the converters in tools/convert/. A model directory is config.json, model.safetensors
and spm.model; `load_model` checks all three as strictly as the engine does (missing or
unexpected tensors, shapes, vocabulary size, special token ids) so a converter never writes a
model the engine would refuse, and never reads a directory that is not a tnmt model.

Tensors keep their stored dtype (F32, F16 or BF16) so a conversion that only moves rows around
is bit-exact; `Tensor.f32()` widens to float32 (exactly, as the engine does on load).
"""

import json
import math
import os
import struct

import numpy as np

FORMAT = "tnmt-transformer"
FORMAT_VERSION = 1

# docs/model-format.md, config.json table. vocab_size has no default (required).
DEFAULTS = {
    "d_model": 512,
    "num_heads": 8,
    "d_ff": 2048,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "normalize_before": False,
    "activation": "relu",
    "position_encoding": "sinusoidal",
    "max_positions": 1024,
    "share_embeddings": True,
    "share_decoder_input_output_embed": True,
    "scale_embedding": True,
    "layer_norm_epsilon": 1e-6,
    "pad_id": 0,
    "unk_id": 1,
    "bos_id": 2,
    "eos_id": 3,
    "label_smoothing": 0.1,
}
DECODING_DEFAULTS = {"beam_size": 4, "length_penalty": 0.6, "max_length_offset": 50}
# Key order of the config.json the engine writes (ModelConfig::ToJson), for tidy output.
CONFIG_ORDER = ["format", "format_version", "vocab_size"] + list(DEFAULTS) + ["decoding"]

# The engine precomputes this many sinusoid rows (engine/model/weights.h kSinusoidRows): the
# longest sequence a sinusoidal model accepts.
TNMT_SINUSOID_ROWS = 4096


class ModelError(Exception):
    """A model directory or checkpoint that cannot be read or converted; the message says why."""


# ------------------------------------------------------------------------------------------
# Tensors and safetensors

_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}


class Tensor:
    """A tensor as stored: dtype "F32" / "F16" / "BF16" (or "F64" when read) and a numpy array
    of the raw storage type (<f4, <f2, <u2 bit patterns for BF16, <f8)."""

    __slots__ = ("dtype", "data")

    def __init__(self, dtype, data):
        if dtype not in _NP:
            raise ModelError(f"unsupported tensor dtype {dtype}")
        self.dtype = dtype
        self.data = np.ascontiguousarray(data, dtype=_NP[dtype])

    @staticmethod
    def from_f32(array):
        return Tensor("F32", np.asarray(array, dtype=np.float32))

    @property
    def shape(self):
        return tuple(self.data.shape)

    def f32(self):
        """float32 values (BF16 and F16 widen exactly)."""
        if self.dtype == "BF16":
            return (self.data.astype(np.uint32) << 16).view(np.float32)
        return self.data.astype(np.float32)

    def rows(self, index):
        """A new tensor of the same dtype with rows self[index] (fancy indexing on axis 0)."""
        return Tensor(self.dtype, self.data[index])

    def same_bits(self, other):
        return (self.dtype == other.dtype and self.shape == other.shape
                and np.array_equal(self.data.view(np.uint8), other.data.view(np.uint8)))

    def __repr__(self):
        return f"Tensor({self.dtype}, {list(self.shape)})"


def read_safetensors(path):
    """Returns ({name: Tensor}, metadata dict). Raises ModelError naming the file."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    if len(blob) < 8:
        raise ModelError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ModelError(f"{path}: not a safetensors file (header length {n} past the end)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: not a safetensors file (bad JSON header: {e})") from None
    if not isinstance(header, dict):
        raise ModelError(f"{path}: not a safetensors file (header is not an object)")
    meta = header.pop("__metadata__", None) or {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        dtype = info.get("dtype")
        if dtype not in _NP:
            raise ModelError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        begin, end = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        raw = blob[base + begin: base + end]
        count = int(np.prod(shape)) if shape else 1
        if len(raw) != count * np.dtype(_NP[dtype]).itemsize:
            raise ModelError(f"{path}: tensor {name}: {len(raw)} bytes for shape {shape} {dtype}")
        tensors[name] = Tensor(dtype, np.frombuffer(raw, dtype=_NP[dtype]).reshape(shape))
    return tensors, meta


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: Tensor}. Names sorted, header padded with spaces to 8 bytes."""
    meta = {"format": "pt"}
    meta.update(metadata or {})
    header = {"__metadata__": meta}
    offset = 0
    order = sorted(tensors)
    for name in order:
        t = tensors[name]
        if t.dtype == "F64":
            raise ModelError(f"tensor {name}: F64 is not a tnmt dtype")
        nbytes = t.data.nbytes
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name in order:
            f.write(tensors[name].data.tobytes())
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------
# Position tables

def tnmt_sinusoid(rows, d):
    """tnmt's sinusoidal table (kernels/cpu SinusoidalPositions): interleaved,
    P[p, 2i] = sin(p * 10000^(-2i/d)), P[p, 2i+1] = cos(...), in double, stored as float32."""
    table = np.zeros((rows, d), dtype=np.float64)
    pos = np.arange(rows, dtype=np.float64)[:, None]
    i = np.arange(0, (d + 1) // 2, dtype=np.float64)[None, :]
    freq = np.power(10000.0, -2.0 * i / d)
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq)[:, : d // 2]
    return table.astype(np.float32)


def fairseq_sinusoid(rows, d, padding_idx):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding(rows, d, padding_idx), i.e.
        half = d // 2; c = log(10000) / (half - 1)
        freq = exp(arange(half, float32) * -c)          (float32)
        arg  = arange(rows, float32)[:, None] * freq     (float32)
        table = [sin(arg) | cos(arg)] (halves, not interleaved), a zero column if d is odd,
        row padding_idx zeroed.
    Each float32 step is reproduced exactly (products of two float32 are exact in float64,
    then rounded to float32), exp/sin/cos are computed in float64 and rounded once, so every
    entry is the correctly rounded float32 of fairseq's formula; torch's float32 exp/sin/cos may
    differ from it in the last bit (tests/convert measures it against torch)."""
    half = d // 2
    if half < 2:
        raise ModelError(f"embedding dim {d} is too small for fairseq's sinusoid")
    c = np.float32(math.log(10000.0) / (half - 1))
    scaled = (np.arange(half, dtype=np.float32).astype(np.float64)
              * np.float64(-c)).astype(np.float32)
    freq = np.exp(scaled.astype(np.float64)).astype(np.float32)
    arg = (np.arange(rows, dtype=np.float32).astype(np.float64)[:, None]
           * freq.astype(np.float64)[None, :]).astype(np.float32).astype(np.float64)
    table = np.concatenate([np.sin(arg), np.cos(arg)], axis=1).astype(np.float32)
    if d % 2 == 1:
        table = np.concatenate([table, np.zeros((rows, 1), dtype=np.float32)], axis=1)
    if padding_idx is not None and 0 <= padding_idx < rows:
        table[padding_idx, :] = 0
    return table


# ------------------------------------------------------------------------------------------
# SentencePiece

class Vocabulary:
    """The pieces of an spm.model in id order and its special ids (-1: not defined)."""

    def __init__(self, path):
        try:
            import sentencepiece
        except ImportError:
            raise ModelError("the Python package sentencepiece is needed to read spm.model "
                             "(deploy/install-py-tools.sh installs it into build/py-tools)") from None
        sp = sentencepiece.SentencePieceProcessor()
        try:
            ok = sp.Load(path)
        except (OSError, RuntimeError) as e:
            raise ModelError(f"{path}: not a SentencePiece model ({e})") from None
        if not ok:
            raise ModelError(f"{path}: not a SentencePiece model")
        self.path = path
        self.processor = sp
        self.pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
        self.pad_id, self.unk_id = sp.pad_id(), sp.unk_id()
        self.bos_id, self.eos_id = sp.bos_id(), sp.eos_id()

    def __len__(self):
        return len(self.pieces)

    def is_control(self, i):
        return self.processor.IsControl(i)


# ------------------------------------------------------------------------------------------
# Model directory

def full_config(raw, source="config.json"):
    """Checks a parsed config.json like the engine (engine/model/config.cc) and returns it with
    every default filled in, keys in the engine's order."""
    if not isinstance(raw, dict):
        raise ModelError(f"{source}: not a JSON object")
    if raw.get("format") != FORMAT:
        raise ModelError(f"{source}: \"format\" is {raw.get('format')!r}, not \"{FORMAT}\" "
                         "(not a tnmt model directory)")
    if raw.get("format_version") != FORMAT_VERSION:
        raise ModelError(f"{source}: unsupported format_version {raw.get('format_version')!r} "
                         f"(this converter reads {FORMAT_VERSION})")
    if "vocab_size" not in raw:
        raise ModelError(f"{source}: missing \"vocab_size\"")
    cfg = {"format": FORMAT, "format_version": FORMAT_VERSION, "vocab_size": raw["vocab_size"]}
    for key, default in DEFAULTS.items():
        cfg[key] = raw.get(key, default)
    decoding = raw.get("decoding", {})
    if not isinstance(decoding, dict):
        raise ModelError(f"{source}: \"decoding\" must be an object")
    cfg["decoding"] = {k: decoding.get(k, v) for k, v in DECODING_DEFAULTS.items()}
    if cfg["activation"] not in ("relu", "gelu"):
        raise ModelError(f"{source}: \"activation\" must be \"relu\" or \"gelu\", got "
                         f"{cfg['activation']!r}")
    if cfg["position_encoding"] not in ("sinusoidal", "learned"):
        raise ModelError(f"{source}: \"position_encoding\" must be \"sinusoidal\" or "
                         f"\"learned\", got {cfg['position_encoding']!r}")
    for key in ("vocab_size", "d_model", "num_heads", "d_ff", "encoder_layers",
                "decoder_layers", "max_positions"):
        if not isinstance(cfg[key], int) or cfg[key] <= 0:
            raise ModelError(f"{source}: \"{key}\" must be a positive integer, got {cfg[key]!r}")
    if cfg["d_model"] % cfg["num_heads"]:
        raise ModelError(f"{source}: \"d_model\" {cfg['d_model']} is not divisible by "
                         f"\"num_heads\" {cfg['num_heads']}")
    for key in ("pad_id", "unk_id", "bos_id", "eos_id"):
        if not isinstance(cfg[key], int) or not 0 <= cfg[key] < cfg["vocab_size"]:
            raise ModelError(f"{source}: \"{key}\" {cfg[key]!r} is outside the vocabulary")
    if not cfg["layer_norm_epsilon"] > 0:
        raise ModelError(f"{source}: \"layer_norm_epsilon\" must be positive")
    return cfg


def config_json(cfg):
    """config.json text in the engine's key order."""
    ordered = {k: cfg[k] for k in CONFIG_ORDER if k in cfg}
    return json.dumps(ordered, indent=2) + "\n"


def expected_tensors(cfg):
    """{name: shape} of every tensor a model with this config has."""
    d, v, ff = cfg["d_model"], cfg["vocab_size"], cfg["d_ff"]
    out = {"encoder.embed_tokens.weight": (v, d)}
    if not cfg["share_embeddings"]:
        out["decoder.embed_tokens.weight"] = (v, d)
    if not cfg["share_decoder_input_output_embed"]:
        out["decoder.output_projection.weight"] = (v, d)
    if cfg["position_encoding"] == "learned":
        out["encoder.embed_positions.weight"] = (cfg["max_positions"], d)
        out["decoder.embed_positions.weight"] = (cfg["max_positions"], d)

    def attn(p):
        for x in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{p}.{x}.weight"] = (d, d)
            out[f"{p}.{x}.bias"] = (d,)

    def ln(p):
        out[p + ".weight"] = (d,)
        out[p + ".bias"] = (d,)

    def ffn(p):
        out[p + ".fc1.weight"] = (ff, d)
        out[p + ".fc1.bias"] = (ff,)
        out[p + ".fc2.weight"] = (d, ff)
        out[p + ".fc2.bias"] = (d,)
        ln(p + ".final_layer_norm")

    for i in range(cfg["encoder_layers"]):
        p = f"encoder.layers.{i}"
        attn(p + ".self_attn")
        ln(p + ".self_attn_layer_norm")
        ffn(p)
    for i in range(cfg["decoder_layers"]):
        p = f"decoder.layers.{i}"
        attn(p + ".self_attn")
        ln(p + ".self_attn_layer_norm")
        attn(p + ".encoder_attn")
        ln(p + ".encoder_attn_layer_norm")
        ffn(p)
    if cfg["normalize_before"]:
        ln("encoder.layer_norm")
        ln("decoder.layer_norm")
    return out


def check_tensors(cfg, tensors, source):
    want = expected_tensors(cfg)
    missing = sorted(set(want) - set(tensors))
    if missing:
        raise ModelError(f"{source}: missing tensor(s) {', '.join(missing[:5])}"
                         f"{', ...' if len(missing) > 5 else ''}")
    unexpected = sorted(set(tensors) - set(want))
    if unexpected:
        raise ModelError(f"{source}: unexpected tensor(s) {', '.join(unexpected[:5])}"
                         f"{', ...' if len(unexpected) > 5 else ''} (config.json does not match "
                         "the weights?)")
    for name, shape in want.items():
        t = tensors[name]
        if t.shape != tuple(shape):
            raise ModelError(f"{source}: tensor {name} has shape {list(t.shape)}, expected "
                             f"{list(shape)}")
        if t.dtype not in ("F32", "F16", "BF16"):
            raise ModelError(f"{source}: tensor {name} has dtype {t.dtype} (F32, F16 or BF16)")


def check_vocabulary(cfg, vocab, source):
    if len(vocab) != cfg["vocab_size"]:
        raise ModelError(f"{vocab.path}: vocabulary has {len(vocab)} pieces but {source} says "
                         f"vocab_size {cfg['vocab_size']}")
    for key, spm_id in (("eos_id", vocab.eos_id), ("bos_id", vocab.bos_id),
                        ("unk_id", vocab.unk_id)):
        if spm_id >= 0 and spm_id != cfg[key]:
            raise ModelError(f"{vocab.path}: {key} is {spm_id} but {source} says {cfg[key]}")


class Model:
    """A loaded, checked tnmt model directory: .config (all keys), .tensors ({name: Tensor}),
    .vocab (Vocabulary), .dir."""

    def __init__(self, directory, config, tensors, vocab):
        self.dir = directory
        self.config = config
        self.tensors = tensors
        self.vocab = vocab

    def f32(self, name):
        return self.tensors[name].f32()

    def decoder_embed_name(self):
        return ("encoder.embed_tokens.weight" if self.config["share_embeddings"]
                else "decoder.embed_tokens.weight")

    def output_projection_name(self):
        return (self.decoder_embed_name() if self.config["share_decoder_input_output_embed"]
                else "decoder.output_projection.weight")


def load_model(directory, vocabulary=True):
    """vocabulary=False: no spm.model needed (.vocab is None), for a directory of weights
    without a tokenizer such as bench/translate_bench's export."""
    if not os.path.isdir(directory):
        raise ModelError(f"{directory}: model directory does not exist")
    files = ("config.json", "model.safetensors") + (("spm.model",) if vocabulary else ())
    paths = {f: os.path.join(directory, f) for f in files}
    for f, p in paths.items():
        if not os.path.isfile(p):
            raise ModelError(f"{p}: missing (a tnmt model directory holds config.json, "
                             "model.safetensors and spm.model)")
    try:
        with open(paths["config.json"], encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{paths['config.json']}: cannot parse ({e})") from None
    cfg = full_config(raw, paths["config.json"])
    vocab = None
    if vocabulary:
        vocab = Vocabulary(paths["spm.model"])
        check_vocabulary(cfg, vocab, paths["config.json"])
    tensors, _ = read_safetensors(paths["model.safetensors"])
    check_tensors(cfg, tensors, paths["model.safetensors"])
    return Model(directory, cfg, tensors, vocab)


def write_model(directory, cfg, tensors, spm_path):
    """Writes config.json, model.safetensors and a copy of spm_path; checks first."""
    cfg = full_config(cfg, "config")
    check_tensors(cfg, tensors, "converted weights")
    os.makedirs(directory, exist_ok=True)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        f.write(config_json(cfg))
    copy_file(spm_path, os.path.join(directory, "spm.model"))


def copy_file(src, dst):
    if os.path.abspath(src) == os.path.abspath(dst):
        return
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)

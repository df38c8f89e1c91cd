#!/usr/bin/env python3
"""Decoding peer: Hugging Face transformers `generate` (beam search) on the same weights and the
same sources as tnmt, timed for tests/gpu/check.sh's table beside translate_bench and
`tnmt translate`.

    hf_decode_peer.py prepare --tnmt BIN --model DIR --output HF_DIR
    hf_decode_peer.py run --model HF_DIR (--ids FILE | --text FILE) [flags]
    hf_decode_peer.py count --model HF_DIR --text FILE [--side source|target]

prepare: `BIN export --to hf-marian DIR --output HF_DIR --force` (docs/model-import-export.md).
  A model without a SentencePiece model, as `translate_bench --export DIR` writes its random
  Transformer-base (config.json, model.safetensors, sources.txt), first gets DIR/spm.model
  whose piece i is named after its id: "<pad>" 0, "<unk>" 1, "<s>" 2, "</s>" 3, "t4" ... "tV-1"
  (the pieces the exporter's vocab.json needs; it never tokenizes anything). The exported
  network computes the same function as tnmt's (the exporter permutes the residual width for
  Marian's sinusoid layout); Hugging Face's layer norm epsilon is 1e-5 where these models have
  1e-6 (the exporter warns), which changes no speed.

run: loads HF_DIR with MarianMTModel, moves it to --device in --dtype (float16 on cuda, the
  default; float32 on cpu), and translates:
  --ids FILE   one source per line as token ids with its final </s> (translate_bench's
               sources.txt), in file order;
  --text FILE  sentences, tokenized as tnmt tokenizes an exported model (source.spm pieces
               mapped through vocab.json, a missing piece <unk>, </s> appended); empty lines
               are left out (tnmt answers them without decoding); the first --sentences of
               them sorted by length, as tnmt batches them (--no-sort keeps file order).
  For each --batch-sizes B (1,32,256): consecutive batches of B sources (--ids: from the
  first source on; --text: the sorted sources' batches in a fixed random order, so that a run
  cut short is a fair sample of the lengths); one warm-up batch (the first; untimed, it also
  loads the CUDA kernels), then batches timed until --seconds have passed (at least one).
  Search: generate(num_beams=--beam, do_sample=False, early_stopping=--early-stopping
  ("never" by default: tnmt's rule, go on while a live hypothesis can still win), length
  penalty the model's (generation defaults from config.json), use_cache=True).
  Lengths: --out-len N forces every output to N tokens counting the final </s>, as
  translate_bench --out-len N does (min_new_tokens N-1, max_new_tokens N, the config's
  forced_eos_token_id ends the hypotheses at N): N decoder steps per sentence on both engines.
  Without it, natural lengths: max_new_tokens = the batch's longest source (with </s>) +
  --max-length-offset (50, tnmt's default limit: source length + offset).
  Tokens: per sentence, the best hypothesis's generated tokens up to and including its first
  </s> (all of them if it has none), as translate_bench counts (tokens + 1 for </s>).
  Timing: wall clock around the generate calls and the copy of their outputs to the host,
  synchronized with the device before and after (tokenization and the warm-up outside).
  --compare FILE (translate_bench --outputs' tnmt_greedy.txt or tnmt_beam.txt: "SCORE<TAB>ids"
  per source, ids without </s>): the best hypotheses of the timed sources against tnmt's,
  token for token (meaningful in float32; half precision and Hugging Face's beam rules,
  docs/model-import-export.md, can change a few).

count: tokens of a file, per non-empty line its pieces + 1 for </s>: --side target (the
  default; target.spm) for a file of translations (tnmt's output, for its tokens/s at natural
  lengths: tnmt's own pieces can differ where the best segmentation of the detokenized text is
  not the one decoded, so it is an estimate, marked "~" in check.sh's table); --side source
  (source.spm, as `run --text` and tnmt tokenize sources) for the mean source length.

Result lines (one per batch size; check.sh reads the key=value fields):
  PEER decode engine=transformers label=L device=D dtype=T beam=K batch=B lengths=forced30|natural
       sentences=N tokens=X seconds=S tokens_per_s=R sentences_per_s=Q
  PEER count side=S lines=N tokens=X
"""

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never try the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(msg):
    print(f"hf_decode_peer: {msg}", flush=True)


# ------------------------------------------------------------------------------------------
# prepare

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, wire, payload):
    return _varint(num << 3 | wire) + payload


def _bytes(num, data):
    return _field(num, 2, _varint(len(data)) + data)


def _int(num, n):
    return _field(num, 0, _varint(n))


def id_named_spm(config):
    """A SentencePiece ModelProto (sentencepiece_model.proto, written field by field) whose
    piece i is named after id i: the special ids of `config` get their usual names."""
    V = config["vocab_size"]
    special = {config.get("pad_id", 0): ("<pad>", 3), config.get("unk_id", 1): ("<unk>", 2),
               config.get("bos_id", 2): ("<s>", 3), config.get("eos_id", 3): ("</s>", 3)}
    out = bytearray()
    for i in range(V):
        name, kind = special.get(i, (f"t{i}", 1))  # 1 NORMAL, 2 UNKNOWN, 3 CONTROL
        score = 0.0 if kind != 1 else -float(i)
        out += _bytes(1, _bytes(1, name.encode()) + _field(2, 5, struct.pack("<f", score)) + _int(3, kind))
    # TrainerSpec: unigram, vocab size, the special ids.
    out += _bytes(2, _int(3, 1) + _int(4, V) + _int(40, config.get("unk_id", 1)) +
                  _int(41, config.get("bos_id", 2)) + _int(42, config.get("eos_id", 3)) +
                  _int(43, config.get("pad_id", 0)))
    # NormalizerSpec: identity, no dummy prefix, whitespace kept.
    out += _bytes(3, _bytes(1, b"identity") + _int(3, 0) + _int(4, 0) + _int(5, 1))
    return bytes(out)


def prepare(a):
    with open(os.path.join(a.model, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    has_spm = "vocabulary" in config or os.path.exists(os.path.join(a.model, "spm.model"))
    if not has_spm:
        with open(os.path.join(a.model, "spm.model"), "wb") as f:
            f.write(id_named_spm(config))
        log(f"wrote {a.model}/spm.model: {config['vocab_size']} pieces named after their ids")
    r = subprocess.run([a.tnmt, "export", "--to", "hf-marian", a.model, "--output", a.output, "--force"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        log(f"tnmt export failed (exit {r.returncode})")
    return r.returncode


# ------------------------------------------------------------------------------------------
# sources and counting

def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


class Vocabulary:
    """An exported model's tokenization, as tnmt does it for vocab.json + source/target.spm."""

    def __init__(self, model_dir):
        import sentencepiece as spm
        with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
            self.ids = json.load(f)
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        self.eos = c["eos_token_id"]
        self.unk = self.ids.get("<unk>", 1)
        self.source = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "source.spm"))
        self.target = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "target.spm"))

    def encode(self, line):
        return [self.ids.get(p, self.unk) for p in self.source.encode(line, out_type=str)] + [self.eos]



def count(a):
    v = Vocabulary(a.model)
    sp = v.source if a.side == "source" else v.target
    lines = [line for line in read_lines(a.text) if line.strip()]
    tokens = sum(len(sp.encode(line, out_type=str)) + 1 for line in lines)
    print(f"PEER count side={a.side} lines={len(lines)} tokens={tokens}", flush=True)
    return 0


# ------------------------------------------------------------------------------------------
# run

def generated_tokens(row, eos, pad):
    """Tokens of one output row after the decoder start: up to and including the first </s>,
    else every token up to the padding."""
    ids = []
    for t in row:
        ids.append(t)
        if t == eos:
            return ids
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def run(a):
    import torch
    import transformers
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log("SKIPPED: no CUDA device")
        return 0
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[
        a.dtype or ("float16" if device.type == "cuda" else "float32")]
    if a.threads:
        torch.set_num_threads(a.threads)
    t = time.time()
    model = MarianMTModel.from_pretrained(a.model)
    model.eval()
    model.to(device=device, dtype=dtype)
    cfg = model.config
    eos, pad = cfg.eos_token_id, cfg.pad_token_id
    attn = getattr(cfg, "_attn_implementation", None) or "default"
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    params = sum(p.numel() for p in model.parameters())
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {where}; model {a.model}: "
        f"{cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, vocab {cfg.vocab_size}, "
        f"{params / 1e6:.1f}M parameters, {str(dtype).replace('torch.', '')}, attention {attn}; "
        f"loaded in {time.time() - t:.1f} s")

    if a.ids:
        sources = [[int(x) for x in line.split()] for line in read_lines(a.ids) if line.strip()]
    else:
        vocab = Vocabulary(a.model)
        sources = [vocab.encode(line) for line in read_lines(a.text) if line.strip()]
    if a.sentences:
        sources = sources[:a.sentences]
    if a.text and not a.no_sort:
        sources.sort(key=len)  # stable: equal lengths keep their order
    want = None
    if a.compare:
        want = [[int(x) for x in line.split("\t", 1)[1].split()] if "\t" in line else []
                for line in read_lines(a.compare)]
    lengths = f"forced{a.out_len}" if a.out_len else "natural"
    mean_src = sum(map(len, sources)) / max(1, len(sources))
    log(f"{len(sources)} sources ({mean_src:.1f} tokens on average, </s> included), beam {a.beam}, "
        f"lengths {lengths}, early_stopping {a.early_stopping}, batch sizes {a.batch_sizes}, "
        f"{a.seconds:g} s each")

    early = {"never": "never", "true": True, "false": False}[a.early_stopping]

    def generate(batch):
        longest = max(map(len, batch))
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for i, s in enumerate(batch):  # right-padded, as MarianTokenizer pads
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
        kw = dict(num_beams=a.beam, do_sample=False, num_return_sequences=1, use_cache=True)
        if a.beam > 1:
            kw.update(early_stopping=early)
        if a.out_len:
            kw.update(min_new_tokens=a.out_len - 1, max_new_tokens=a.out_len)
        else:
            kw.update(max_new_tokens=longest + a.max_length_offset)
        with torch.inference_mode():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kw)
        return [generated_tokens(row[1:], eos, pad) for row in out.tolist()]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    status = 0
    for B in a.batch_sizes:
        if not sources:
            break
        # Consecutive batches of B; sorted sources are visited in a fixed random order of their
        # batches, so that a run cut short by --seconds is a fair sample of the lengths.
        batches = [list(range(i, min(i + B, len(sources)))) for i in range(0, len(sources), B)]
        if a.text and not a.no_sort:
            random.Random(1).shuffle(batches)
        t = time.time()
        generate([sources[i] for i in batches[0]])
        sync()
        warm = time.time() - t
        done = {}  # source index -> output
        sync()
        t0 = time.perf_counter()
        for rows in batches:
            done.update(zip(rows, generate([sources[i] for i in rows])))
            if time.perf_counter() - t0 >= a.seconds:
                break
        sync()
        secs = time.perf_counter() - t0
        outputs = [done[i] for i in sorted(done)]
        tokens = sum(map(len, outputs))
        if a.out_len:
            off = sum(len(o) != a.out_len for o in outputs)
            if off:
                log(f"warning: {off} of {len(outputs)} outputs are not {a.out_len} tokens long")
        print(f"PEER decode engine=transformers label={a.label} device={device.type} "
              f"dtype={str(dtype).replace('torch.', '')} beam={a.beam} batch={B} lengths={lengths} "
              f"sentences={len(outputs)} tokens={tokens} seconds={secs:.3f} "
              f"tokens_per_s={tokens / secs:.1f} sentences_per_s={len(outputs) / secs:.2f} "
              f"warmup_s={warm:.2f}", flush=True)
        if want is not None:  # --ids: file order, so done holds sources 0 .. len(done) - 1
            n = min(len(outputs), len(want))
            got = [o[:-1] if o and o[-1] == eos else o for o in outputs[:n]]
            same = sum(g == w for g, w in zip(got, want[:n]))
            log(f"batch {B}: {same}/{n} best hypotheses identical to {a.compare}")
            for i in range(n):
                if got[i] != want[i] and i < 3:
                    log(f"  [{i}] transformers {got[i][:12]}... tnmt {want[i][:12]}...")
            if same != n:
                status = 1
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export a tnmt model directory for transformers")
    p.add_argument("--tnmt", required=True, help="the tnmt binary")
    p.add_argument("--model", required=True, help="tnmt model directory (translate_bench --export DIR too)")
    p.add_argument("--output", required=True, help="Hugging Face Marian directory to write")
    c = sub.add_parser("count", help="target tokens of a file of translations")
    c.add_argument("--model", required=True, help="the exported Hugging Face Marian directory")
    c.add_argument("--text", required=True)
    c.add_argument("--side", default="target", choices=["source", "target"])
    r = sub.add_parser("run", help="time generate() at several batch sizes")
    r.add_argument("--model", required=True, help="the exported Hugging Face Marian directory")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="sources as token-id lines with </s> (translate_bench's sources.txt)")
    src.add_argument("--text", help="sources as sentences, one a line")
    r.add_argument("--batch-sizes", default="1,32,256", type=lambda s: [int(x) for x in s.split(",")])
    r.add_argument("--beam", type=int, default=4)
    r.add_argument("--out-len", type=int, default=0,
                   help="force every output to this many tokens, </s> included (0: natural lengths)")
    r.add_argument("--max-length-offset", type=int, default=50,
                   help="natural lengths: at most the longest source of the batch + this")
    r.add_argument("--early-stopping", default="never", choices=["never", "true", "false"])
    r.add_argument("--sentences", type=int, default=0, help="use the first N sources (0: all)")
    r.add_argument("--seconds", type=float, default=10.0, help="timed seconds per batch size (at least one batch)")
    r.add_argument("--no-sort", action="store_true", help="--text: keep file order")
    r.add_argument("--device", default="cuda")
    r.add_argument("--dtype", choices=["float16", "bfloat16", "float32"],
                   help="default: float16 on cuda, float32 on cpu")
    r.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    r.add_argument("--label", default="model", help="names the workload in the result lines")
    r.add_argument("--compare", help="translate_bench --outputs' tnmt_greedy.txt / tnmt_beam.txt")
    a = ap.parse_args()
    if a.command == "run" and a.compare and not a.ids:
        ap.error("--compare needs --ids (sources in translate_bench's order)")
    if a.command == "prepare":
        return prepare(a)
    if a.command == "count":
        return count(a)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())

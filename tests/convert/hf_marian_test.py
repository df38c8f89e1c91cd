#!/usr/bin/env python3
"""`tnmt import --from hf-marian` and `tnmt export --to hf-marian` against Hugging Face
transformers' own MarianMTModel and MarianTokenizer.

    hf_marian_test.py --tnmt BIN --work DIR [--hf-only]

Runs in build/py-hf (transformers 4.38.2 over Debian's torch 1.13; deploy/install-py-tools.sh).
--hf-only runs the Hugging Face side alone (training, generation, the reference beam search),
for working on it without a tnmt binary.

Data: tests/convert/data/multi30k_600.{en,de} (the first 600 pairs of Multi30k's training set).

a. Two SentencePiece unigram models trained here, source.spm on the English lines and
   target.spm on the German ones, and a joint vocab.json as OPUS-MT has: `</s>` 0, `<unk>` 1,
   the pieces of both (spm's own <s> </s> <unk> left out), `<pad>` last (the decoder's start).
b. Two small Marian models (d_model 64, 4 heads, d_ff 128), trained here with Adam so that
   they translate in varied ways: A (swish, 2+2 layers, 300 steps) and B (relu, 3+2 layers,
   a random final_logits_bias; A's weights and 100 steps more), saved with save_pretrained as
   safetensors with the tokenizer files.
c. Each is imported with `tnmt import --from hf-marian`; 100 sentences translated greedily by
   `tnmt translate --beam-size 1` and by HF `generate(num_beams=1)` under the same length limit
   give the same text, and tnmt's score equals HF's forced-decoding log-probability of that
   output (log-softmax over the whole vocabulary, final_logits_bias included, the final </s>
   counted) within 1e-4. HF's ids become text by tnmt's rule for a separate vocabulary
   (docs/model-format.md: leave out </s>, <pad>, <unk>, join with target.spm, U+2581 to a
   space, trim spaces), checked equal to MarianTokenizer.decode on every greedy output.
   The same for 4 sources with >>xx<< language codes (MarianTokenizer keeps a leading code as
   one token and cuts the span from the first >> to the last <<), and for model A's weights
   with activation_function "gelu" (exact, erf) and "gelu_new" (tanh approximation) on 30.
d. Beam 4, `--length-penalty 1.0 --length-penalty-style length`:
   - tnmt equals, on every sentence (text, score within 1e-4), a reference beam search written
     here from docs/model-format.md ("Beam search") over HF's own log-probabilities;
   - tnmt is compared with HF `generate(num_beams=4, length_penalty=1.0, early_stopping=True)`;
     wherever the two differ, tnmt must equal the reference and HF must equal the reference
     with HF's three rules (HF_RULES) switched on; each difference is printed with both scores
     and the HF rules that, each alone, change tnmt's result.
   Both sides divide by the same length: HF 4.38's BeamHypotheses.add divides the sum of
   log-probabilities by generated_len ** length_penalty, generated_len = cur_len -
   decoder_prompt_len = the generated tokens including the final </s>, not the decoder start:
   tnmt's output length n. HF's three rules, where tnmt differs by design:
   - stop_at_k: early_stopping=True stops as soon as K hypotheses are finished; tnmt goes on
     until no live hypothesis can beat the K-th finished one (best live score / lp(max_len)),
     and so finds longer hypotheses with better normalized scores. (early_stopping="never" is
     tnmt's stopping rule.)
   - eos_top_k: HF finishes an </s> candidate only if it ranks within the top K of the 2K
     candidates (BeamSearchScorer.process skips beam_token_rank >= num_beams); tnmt finishes
     every </s> candidate met before K live hypotheses are taken.
   - forced_eos_zero: at the length limit HF's ForcedEOSTokenLogitsProcessor runs after
     log_softmax and sets the </s> score to 0, so a hypothesis that reaches the limit gets its
     forced </s> for free and is ranked higher than its log-probability says; tnmt counts the
     forced </s>'s log-probability, in beam search and greedy alike.
   With these small, repetitive models a tenth or more of the sentences differ this way.
e. Export: a copy of tests/golden/data/tiny with layer_norm_epsilon 1e-5 (HF Marian's LayerNorm
   is nn.LayerNorm's default eps 1e-5, not configurable; tiny has 1e-6) is exported with
   `tnmt export --to hf-marian`, loads in MarianMTModel and MarianTokenizer, and HF translates
   the non-empty lines of tests/convert/data/sentences.txt greedily as `tnmt translate` does
   (text, decoded by tiny's version 1 rule; score within 1e-4). tnmt gives an empty line an
   empty translation without running the model, HF would translate [</s>]: not compared.
   Imported back with `tnmt import --from hf-marian`, it translates as the original (greedy
   and beam 4 with gnmt 0.6 named on both: text, scores within 1e-4; the import's default
   length penalty style is Hugging Face's "length").
f. Refusals, each exiting non-zero with a message naming the problem (printed): no config.json,
   model_type bart, pytorch_model.bin without model.safetensors (the message says how to
   convert), a truncated model.safetensors, activation tanh, normalize_before true, an
   existing non-empty output directory (without --force); exporting the pre-norm
   tests/golden/data/tiny_prenorm. Also accepted: the legacy keys older OPUS-MT configs carry
   (normalize_before false, static_position_embeddings true, ...), and --dtype float16.

Length limit: tnmt's outputs have at most input_length + max_length_offset tokens (input length
with the source's </s>, output length with the final </s>, which is forced at the last step).
HF's max_length counts the decoder start token: generation stops when the sequence has
max_length tokens (MaxLengthCriteria: cur_len >= max_length) and ForcedEOSTokenLogitsProcessor
forces </s> when cur_len == max_length - 1, i.e. for the (max_length - 1)-th generated token.
So HF max_length = len(input_ids with </s>) + K + 1 is tnmt's limit with --max-length-offset K.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, summary  # noqa: E402
import time
import warnings

import numpy as np
import sentencepiece as spm
import torch

warnings.filterwarnings("ignore")  # MarianTokenizer recommends sacremoses; generate() chats
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never try the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
torch.set_num_threads(1)
torch.set_num_interop_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA_EN = os.path.join(HERE, "data", "multi30k_600.en")
DATA_DE = os.path.join(HERE, "data", "multi30k_600.de")
SENTENCES = os.path.join(HERE, "data", "sentences.txt")
TINY = os.path.join(REPO, "tests", "golden", "data", "tiny")
PRENORM = os.path.join(REPO, "tests", "golden", "data", "tiny_prenorm")

OFFSET = 20  # --max-length-offset for tnmt; HF max_length = input length + OFFSET + 1
N_TRANSLATE = 100  # sentences translated per model (the first lines of the data)
BEAM = 4
SCORE_TOL = 1e-4

T0 = time.time()




def info(msg):
    print(f"      {msg}".replace("\n", "\n      "))
    sys.stdout.flush()


def stage(name):
    print(f"---- {name} ({time.time() - T0:.0f} s)")
    sys.stdout.flush()


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# ------------------------------------------------------------------------------------------
# a. SentencePiece models and the joint vocabulary

def train_spm(lines, prefix, vocab_size):
    path = prefix + ".txt"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(
        input=path, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, num_threads=1, minloglevel=2, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1)
    return prefix + ".model"


def make_tokenizer_dir(w, en, de):
    """source.spm, target.spm, vocab.json, tokenizer_config.json as OPUS-MT ships them."""
    d = os.path.join(w, "tokenizer")
    os.makedirs(d, exist_ok=True)
    src_model = train_spm(en, os.path.join(w, "spm_en"), 600)
    tgt_model = train_spm(de, os.path.join(w, "spm_de"), 600)
    shutil.copy(src_model, os.path.join(d, "source.spm"))
    shutil.copy(tgt_model, os.path.join(d, "target.spm"))
    vocab = {"</s>": 0, "<unk>": 1}
    for model in (src_model, tgt_model):
        sp = spm.SentencePieceProcessor(model_file=model)
        for i in range(sp.get_piece_size()):
            if sp.is_control(i) or sp.is_unknown(i):
                continue
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"source_lang": "en", "target_lang": "de", "separate_vocabs": False,
                   "model_max_length": 512, "tokenizer_class": "MarianTokenizer"}, f, indent=2)
    return d, vocab


# ------------------------------------------------------------------------------------------
# b. Marian models

def marian_config(V, **kw):
    args = dict(
        vocab_size=V, decoder_vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, activation_function="swish", scale_embedding=True,
        pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1, forced_eos_token_id=0,
        bad_words_ids=[[V - 1]], max_position_embeddings=256,
        share_encoder_decoder_embeddings=True, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, num_beams=4, max_length=256)
    args.update(kw)
    return MarianConfig(**args)


def train_model(model, src_ids, tgt_ids, seed, steps, batch=32, lr=3e-3):
    """Adam on batches of `batch` random pairs; labels are the target ids with </s> (Marian
    shifts them right behind the decoder start), padding ignored."""
    cfg = model.config
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    pad = cfg.pad_token_id
    loss = None
    for _ in range(steps):
        idx = rng.choice(len(src_ids), batch, replace=False)
        xs = [src_ids[i] for i in idx]
        ys = [tgt_ids[i] for i in idx]
        x = torch.full((batch, max(map(len, xs))), pad, dtype=torch.long)
        y = torch.full((batch, max(map(len, ys))), -100, dtype=torch.long)
        for i, (a, b) in enumerate(zip(xs, ys)):
            x[i, :len(a)] = torch.tensor(a)
            y[i, :len(b)] = torch.tensor(b)
        out = model(input_ids=x, attention_mask=(x != pad).long(), labels=y)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        loss = out.loss.item()
    model.eval()
    return model, loss


def safetensors_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


# ------------------------------------------------------------------------------------------
# HF-side decoding and scoring

# The three places where HF's beam search (transformers 4.38.2) departs from tnmt's rule; the
# reference beam search below applies any of them, so that it reproduces HF's generate() too.
HF_RULES = {
    "stop_at_k": "early_stopping=True: stop as soon as K hypotheses are finished "
                 "(BeamHypotheses.is_done)",
    "eos_top_k": "an </s> candidate ranked K or lower among the 2K is dropped, not finished "
                 "(BeamSearchScorer.process: beam_token_rank >= num_beams)",
    "forced_eos_zero": "the </s> forced at the length limit scores log-probability 0 "
                       "(ForcedEOSTokenLogitsProcessor sets it to 0 after log_softmax)",
}


class HfSide:
    """A Marian directory seen through transformers. `rule` says how output ids become text:
    "separate" (tnmt's rule for a model with vocab.json, source.spm, target.spm: leave out
    </s>, <pad>, <unk>, join the pieces with target.spm, trim spaces) or "joint" (tnmt's rule
    for a version 1 model: its spm.model decodes every id but the final </s>)."""

    def __init__(self, model_dir, rule="separate"):
        self.dir = model_dir
        self.rule = rule
        self.model = MarianMTModel.from_pretrained(model_dir)
        self.model.eval()
        self.tok = MarianTokenizer.from_pretrained(model_dir)
        with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
            self.id_to_piece = {i: p for p, i in json.load(f).items()}
        self.tgt_sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "target.spm"))
        c = self.model.config
        self.start, self.eos, self.pad = c.decoder_start_token_id, c.eos_token_id, c.pad_token_id
        self.unk = self.tok.unk_token_id

    def encode(self, line):
        return self.tok(line)["input_ids"]

    def text(self, gen):
        """Output ids (after the start token, with the final </s>) as tnmt prints them."""
        ids = list(gen)
        if ids and ids[-1] == self.eos:
            ids = ids[:-1]
        if self.rule == "joint":
            return self.tgt_sp.decode_pieces([self.id_to_piece[i] for i in ids])
        ids = [i for i in ids if i not in (self.eos, self.pad, self.unk)]
        # target.spm passes a piece it lacks (vocab.json also holds the source side's pieces)
        # through with its U+2581; MarianTokenizer then turns every U+2581 into a space.
        return self.tgt_sp.decode_pieces([self.id_to_piece[i] for i in ids]).replace("\u2581", " ").strip(" ")

    def hf_text(self, gen):
        """The same ids as MarianTokenizer.decode gives them (whitespace stripped as it does)."""
        return self.tok.decode(list(gen), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def generate(self, src, **kw):
        with torch.no_grad():
            out = self.model.generate(input_ids=torch.tensor([src]),
                                      attention_mask=torch.ones(1, len(src), dtype=torch.long),
                                      max_length=len(src) + OFFSET + 1, do_sample=False,
                                      num_return_sequences=1, return_dict_in_generate=True,
                                      output_scores=True, **kw)
        seq = out.sequences[0].tolist()
        assert seq[0] == self.start, seq
        gen = seq[1:]
        while gen and gen[-1] == self.pad:  # a finished beam hypothesis shorter than the rest
            gen.pop()
        score = float(out.sequences_scores[0]) if kw.get("num_beams", 1) > 1 else None
        return gen, score

    def hf_beam(self, src):
        return self.generate(src, num_beams=BEAM, length_penalty=1.0, early_stopping=True)

    def forced_logprob(self, src, gen):
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([src]),
                                decoder_input_ids=torch.tensor([[self.start] + gen[:-1]])).logits
        lp = torch.log_softmax(logits[0].float(), dim=-1)
        return float(lp[torch.arange(len(gen)), torch.tensor(gen)].sum())

    def reference_beam(self, src, k, alpha, hf_rules=()):
        """docs/model-format.md "Beam search", style "length" (lp(n) = n^alpha), over HF's
        log-probabilities (incremental decoding with HF's cache); with `hf_rules` (keys of
        HF_RULES) changed where HF's generate() differs. Returns (ids, normalized score)."""
        max_len = len(src) + OFFSET
        lp = lambda n: float(n) ** alpha  # noqa: E731
        model = self.model
        with torch.no_grad():
            enc = model.get_encoder()(input_ids=torch.tensor([src])).last_hidden_state
            live = [([], 0.0)]
            finished = []  # (normalized, order, tokens, score)
            past, last = None, [self.start]
            for t in range(1, max_len + 1):
                out = model(encoder_outputs=(enc.expand(len(live), -1, -1),),
                            decoder_input_ids=torch.tensor(last)[:, None],
                            past_key_values=past, use_cache=True)
                logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1).double().numpy()
                cand = np.array([sc for _, sc in live])[:, None] + logp
                cand[:, self.pad] = -np.inf
                if t == max_len:
                    keep = cand[:, self.eos].copy()
                    if "forced_eos_zero" in hf_rules:
                        keep = np.array([sc for _, sc in live])
                    cand[:] = -np.inf
                    cand[:, self.eos] = keep
                flat = cand.reshape(-1)
                V = cand.shape[1]
                order = np.argsort(-flat, kind="stable")[:2 * k]  # ties: hyp index, token id
                new_live, origin = [], []
                for rank, j in enumerate(order):
                    if not np.isfinite(flat[j]):
                        break
                    h, tokid = divmod(int(j), V)
                    toks = live[h][0] + [tokid]
                    if tokid == self.eos:
                        if "eos_top_k" in hf_rules and rank >= k:
                            continue
                        finished.append((flat[j] / lp(t), len(finished), toks, flat[j]))
                    else:
                        new_live.append((toks, float(flat[j])))
                        origin.append(h)
                        if len(new_live) == k:
                            break
                live = new_live
                if not live:
                    break
                if len(finished) >= k:
                    if "stop_at_k" in hf_rules:
                        break
                    kth = sorted((f[0] for f in finished), reverse=True)[k - 1]
                    best_live = max(sc for _, sc in live)
                    if kth >= best_live / (lp(max_len) if alpha >= 0 else lp(t)):
                        break
                idx = torch.tensor(origin)
                past = tuple(tuple(x.index_select(0, idx) for x in layer)
                             for layer in out.past_key_values)
                last = [toks[-1] for toks, _ in live]
        best = sorted(finished, key=lambda f: (-f[0], f[1]))[0]
        return best[2], float(best[0])


# ------------------------------------------------------------------------------------------
# tnmt

def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def tnmt_translate(tnmt, model_dir, lines, w, name, *flags):
    inp = os.path.join(w, f"{name}.in")
    out = os.path.join(w, f"{name}.out")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    r = run([tnmt, "translate", "--model", model_dir, "--input", inp, "--output", out,
             "--scores", "--threads", "1", "--max-length-offset", str(OFFSET), *flags])
    if r.returncode != 0:
        return None, r.stderr.strip()
    res = []
    for line in read_lines(out):
        score, _, text = line.partition(" |||")
        res.append((float(score), text[1:] if text.startswith(" ") else text))
    if len(res) != len(lines):
        return None, f"{len(res)} output lines for {len(lines)} inputs"
    return res, ""


def tnmt_import(tnmt, src, out, *extra, fresh=True):
    if fresh and os.path.exists(out):
        shutil.rmtree(out)
    return run([tnmt, "import", "--from", "hf-marian", src, "--output", out, *extra])


GREEDY = ("--beam-size", "1")
BEAM_FLAGS = ("--beam-size", str(BEAM), "--length-penalty", "1.0",
              "--length-penalty-style", "length")


def show_diff(i, line, items):
    info(f"[{i}] {line}")
    for name, text, score in items:
        shown = "" if score is None else f"{score:.6f}"
        info(f"    {name:12s} {shown:>11}  {text!r}")


# ------------------------------------------------------------------------------------------

def which_rules(hf, src, tnmt_rule_gen):
    """The HF rules that, each alone added to tnmt's rule, change its result."""
    return [r for r in HF_RULES
            if hf.reference_beam(src, BEAM, 1.0, hf_rules=(r,))[0] != tnmt_rule_gen]


def hf_text_ws(text):
    """MarianTokenizer strips every whitespace character at the ends; tnmt trims spaces."""
    return text.strip(" ")


def compare_model(a, w, name, hf_dir, lines):
    hf = HfSide(hf_dir)
    srcs = [hf.encode(line) for line in lines]
    stage(f"{name}: HF greedy, beam and reference beam on {len(lines)} sentences")
    greedy = [hf.generate(s, num_beams=1) for s in srcs]
    g_text = [hf.text(g) for g, _ in greedy]
    g_score = [hf.forced_logprob(s, g) for s, (g, _) in zip(srcs, greedy)]
    # The text rule tnmt is held to is MarianTokenizer's own, also for pieces that target.spm
    # lacks (they once kept a literal U+2581: 'mit\u2581stand' for 'mit stand').
    odd = [i for i, (g, _) in enumerate(greedy)
           if any(hf.tgt_sp.piece_to_id(hf.id_to_piece[t]) == hf.tgt_sp.unk_id() and hf.id_to_piece[t] != "<unk>"
                  for t in g if t not in (hf.eos, hf.pad, hf.unk))]
    differ = [i for i, (g, _) in enumerate(greedy) if hf.text(g) != hf_text_ws(hf.hf_text(g))]
    check(not differ, f"{name}: the text rule equals MarianTokenizer.decode on every greedy output "
          f"({len(odd)} with pieces target.spm lacks)",
          "; ".join(f"{lines[i]!r}: {g_text[i]!r} vs {hf.hf_text(greedy[i][0])!r}" for i in differ[:3]))
    at_limit = sum(len(g) == len(s) + OFFSET for s, (g, _) in zip(srcs, greedy))
    info(f"HF greedy: {len(set(g_text))} distinct outputs, {at_limit} at the length limit "
         f"(</s> forced), e.g. {lines[0]!r} -> {g_text[0]!r}")
    beam = [hf.hf_beam(s) for s in srcs]
    b_text = [hf.text(g) for g, _ in beam]
    ref = [hf.reference_beam(s, BEAM, 1.0) for s in srcs]
    ref_text = [hf.text(g) for g, _ in ref]
    hf_diff = [i for i in range(len(srcs)) if beam[i][0] != ref[i][0]]
    info(f"HF generate vs tnmt's rule (the reference beam search, both over HF's "
         f"log-probabilities): {len(srcs) - len(hf_diff)}/{len(srcs)} the same")
    # Where they differ, the reference with HF's three rules must give HF's result.
    ref_hf = {i: hf.reference_beam(srcs[i], BEAM, 1.0, hf_rules=tuple(HF_RULES))
              for i in hf_diff}
    bad = [i for i in hf_diff if ref_hf[i][0] != beam[i][0]
           or abs(ref_hf[i][1] - beam[i][1]) > SCORE_TOL]
    check(not bad, f"{name}: where HF generate(num_beams={BEAM}, length_penalty=1.0, "
          f"early_stopping=True) departs from tnmt's rule, the reference beam search with HF's "
          f"three rules gives HF's result ({len(hf_diff) - len(bad)}/{len(hf_diff)}, ids and "
          f"score)")
    for i in bad:
        show_diff(i, lines[i], [("HF", b_text[i], beam[i][1]),
                                ("ref+HF rules", hf.text(ref_hf[i][0]), ref_hf[i][1])])
    causes = {i: which_rules(hf, srcs[i], ref[i][0]) for i in hf_diff}
    counts = {r: sum(r in c for c in causes.values()) for r in HF_RULES}
    info("sentences whose result each HF rule alone changes: " +
         ", ".join(f"{r} {n}" for r, n in counts.items()))
    if a.hf_only:
        for i in hf_diff:
            show_diff(i, lines[i], [("HF", b_text[i], beam[i][1]),
                                    ("reference", ref_text[i], ref[i][1])])
            info(f"    HF rules that change it: {', '.join(causes[i]) or 'only together'}")
        return
    tnmt_dir = os.path.join(w, f"{name}.tnmt")
    stage(f"{name}: tnmt import and translate")
    r = tnmt_import(a.tnmt, hf_dir, tnmt_dir)
    check(r.returncode == 0, f"{name}: tnmt import --from hf-marian", r.stderr.strip())
    if r.returncode != 0:
        return
    info((r.stdout.strip() or r.stderr.strip())[:600])
    t_greedy, err = tnmt_translate(a.tnmt, tnmt_dir, lines, w, f"{name}.greedy", *GREEDY)
    check(t_greedy is not None, f"{name}: tnmt translate --beam-size 1", err)
    if t_greedy is not None:
        diff = [i for i in range(len(lines)) if t_greedy[i][1] != g_text[i]]
        check(not diff, f"{name}: greedy, tnmt and HF generate(num_beams=1) give the same text "
              f"({len(lines) - len(diff)}/{len(lines)})")
        for i in diff:
            show_diff(i, lines[i], [("tnmt", t_greedy[i][1], t_greedy[i][0]),
                                    ("HF", g_text[i], g_score[i])])
        for clean in (True, False):
            dec = [hf.tok.decode(g, skip_special_tokens=True, clean_up_tokenization_spaces=clean)
                   for g, _ in greedy]
            info(f"MarianTokenizer.decode(skip_special_tokens=True, clean_up_tokenization_spaces="
                 f"{clean}) gives tnmt's text on "
                 f"{sum(x == y[1] for x, y in zip(dec, t_greedy))}/{len(lines)}")
        errs = [abs(t_greedy[i][0] - g_score[i]) for i in range(len(lines)) if i not in diff]
        worst = max(errs) if errs else float("nan")
        check(bool(errs) and worst <= SCORE_TOL, f"{name}: greedy score = HF forced-decoding "
              f"log-probability (sum over the output with </s>), max |diff| {worst:.2e} "
              f"<= {SCORE_TOL}")
    # Language codes as MarianTokenizer reads them: a leading >>xx<< is one token (here <unk>:
    # the vocabulary has none); the span from the first >> to the last << is cut from the text.
    code_lines = [">>deu<< A dog runs on the beach.", ">>de<<Two men are talking.",
                  "A woman >>fr<< is reading a book.", ">>de<< A girl >>x<< sings."]
    code_srcs = [hf.encode(line) for line in code_lines]
    code_hf = [hf.generate(s, num_beams=1)[0] for s in code_srcs]
    t_code, err = tnmt_translate(a.tnmt, tnmt_dir, code_lines, w, f"{name}.codes", *GREEDY)
    ok = t_code is not None and all(
        t_code[i][1] == hf.text(code_hf[i]) and
        abs(t_code[i][0] - hf.forced_logprob(code_srcs[i], code_hf[i])) <= SCORE_TOL
        for i in range(len(code_lines)))
    check(ok, f"{name}: sources with >>xx<< language codes are read as MarianTokenizer reads "
          f"them (greedy text and score, {len(code_lines)} lines)", err)
    if t_code is not None and not ok:
        for i in range(len(code_lines)):
            show_diff(i, code_lines[i], [("tnmt", t_code[i][1], t_code[i][0]),
                                         ("HF", hf.text(code_hf[i]),
                                          hf.forced_logprob(code_srcs[i], code_hf[i]))])
            info(f"    HF source ids {code_srcs[i]}")
    # Not checked: MarianTokenizer also reads a special token's text inside a line ("</s>",
    # "<pad>", "<unk>") as that token.
    special = "A man </s> sleeps."
    t_sp, _ = tnmt_translate(a.tnmt, tnmt_dir, [special], w, f"{name}.special", *GREEDY)
    if t_sp is not None:
        hf_sp = hf.text(hf.generate(hf.encode(special), num_beams=1)[0])
        info(f"{special!r} (HF source ids {hf.encode(special)}): tnmt {t_sp[0][1]!r}, HF "
             f"{hf_sp!r}: {'the same' if t_sp[0][1] == hf_sp else 'different'}")
    t_beam, err = tnmt_translate(a.tnmt, tnmt_dir, lines, w, f"{name}.beam", *BEAM_FLAGS)
    check(t_beam is not None, f"{name}: tnmt translate {' '.join(BEAM_FLAGS)}", err)
    if t_beam is None:
        return
    diff = [i for i in range(len(lines)) if t_beam[i][1] != ref_text[i]]
    errs = [abs(t_beam[i][0] - ref[i][1]) for i in range(len(lines)) if i not in diff]
    worst = max(errs) if errs else float("nan")
    check(not diff and worst <= SCORE_TOL, f"{name}: beam {BEAM}, tnmt = the reference beam "
          f"search over HF's log-probabilities ({len(lines) - len(diff)}/{len(lines)} the same "
          f"text, max |score diff| {worst:.2e})")
    for i in diff:
        show_diff(i, lines[i], [("tnmt", t_beam[i][1], t_beam[i][0]),
                                ("reference", ref_text[i], ref[i][1])])
    diff = [i for i in range(len(lines)) if t_beam[i][1] != b_text[i]]
    explained = [i for i in diff if t_beam[i][1] == ref_text[i] and i not in bad]
    check(len(explained) == len(diff), f"{name}: beam {BEAM}, tnmt vs HF generate(num_beams="
          f"{BEAM}, length_penalty=1.0, early_stopping=True): {len(lines) - len(diff)}/"
          f"{len(lines)} the same text; each of the {len(diff)} differences is HF's rules at work "
          f"(tnmt = the reference, HF = the reference with HF's rules)")
    for i in diff:
        show_diff(i, lines[i], [("tnmt", t_beam[i][1], t_beam[i][0]),
                                ("HF", b_text[i], beam[i][1]),
                                ("reference", ref_text[i], ref[i][1])])
        if len(beam[i][0]) == len(srcs[i]) + OFFSET:
            info(f"    HF's hypothesis is at the length limit; with its forced </s> counted its "
                 f"normalized score is {hf.forced_logprob(srcs[i], beam[i][0]) / len(beam[i][0]):.6f}")
        info(f"    HF rules that change it: {', '.join(causes.get(i, [])) or 'only together'}")
    return tnmt_dir, t_greedy


# ------------------------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def copy_with_config(src, dst, update=None, remove=()):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    cfg_path = os.path.join(dst, "config.json")
    cfg = load_json(cfg_path)
    cfg.update(update or {})
    for k in remove:
        cfg.pop(k, None)
    write_json(cfg_path, cfg)
    return dst


def refused(r, words):
    err = r.stderr.strip()
    return r.returncode != 0 and any(wd.lower() in err.lower() for wd in words), \
        f"exit {r.returncode}; stderr: {err[:400]}"


def activation_checks(a, w, hf_a, lines):
    """Model A's weights under HF's other activations tnmt runs: "gelu" is torch's exact (erf)
    GELU, "gelu_new" the tanh approximation (transformers/activations.py)."""
    for act in ("gelu", "gelu_new"):
        stage(f"activation_function {act}: greedy on {len(lines)} sentences")
        d = copy_with_config(hf_a, os.path.join(w, f"A_{act}.hf"), {"activation_function": act})
        hf = HfSide(d)
        srcs = [hf.encode(line) for line in lines]
        gen = [hf.generate(s, num_beams=1)[0] for s in srcs]
        r = tnmt_import(a.tnmt, d, os.path.join(w, f"A_{act}.tnmt"))
        got, err = (tnmt_translate(a.tnmt, os.path.join(w, f"A_{act}.tnmt"), lines, w,
                                   f"A_{act}", *GREEDY) if r.returncode == 0
                    else (None, r.stderr.strip()))
        if got is None:
            check(False, f"activation_function {act}: import and translate", err)
            continue
        same = sum(got[i][1] == hf.text(gen[i]) for i in range(len(lines)))
        worst = max(abs(got[i][0] - hf.forced_logprob(srcs[i], gen[i])) for i in range(len(lines))
                    if got[i][1] == hf.text(gen[i])) if same else float("nan")
        check(same == len(lines) and worst <= SCORE_TOL, f"activation_function {act}: greedy, "
              f"tnmt = HF ({same}/{len(lines)} the same text, max |score diff| {worst:.2e})")


def export_checks(a, w):
    stage("export: tiny (layer_norm_epsilon 1e-5) -> HF Marian -> HF and back")
    tiny5 = copy_with_config(TINY, os.path.join(w, "tiny_eps1e-5"), {"layer_norm_epsilon": 1e-5})
    r = run([a.tnmt, "export", "--to", "hf-marian", TINY, "--output", os.path.join(w, "tiny6.hf")])
    info(f"export of tiny as it is (layer_norm_epsilon 1e-6): exit {r.returncode}; "
         f"{(r.stderr.strip() or r.stdout.strip())[:300]}")
    hf_out = os.path.join(w, "tiny.hf")
    r = run([a.tnmt, "export", "--to", "hf-marian", tiny5, "--output", hf_out])
    check(r.returncode == 0, "tnmt export --to hf-marian (tiny, epsilon 1e-5)", r.stderr.strip())
    if r.returncode != 0:
        return
    info(r.stdout.strip() or r.stderr.strip())
    info(f"files: {sorted(os.listdir(hf_out))}")
    try:
        model, loading = MarianMTModel.from_pretrained(hf_out, output_loading_info=True)
        MarianTokenizer.from_pretrained(hf_out)
        ok, detail = True, f"loading info {loading}"
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
    check(ok and not loading["unexpected_keys"] and not loading["mismatched_keys"],
          "the export loads in MarianMTModel and MarianTokenizer (no unexpected or mismatched "
          "tensors)", detail)
    if not ok:
        return
    info(f"missing tensors (HF fills them): {loading['missing_keys']}")
    st = safetensors_header(os.path.join(hf_out, "model.safetensors"))
    info(f"model.safetensors holds {len(st)} tensors: {sorted(st)[:6]} ...")
    tcfg, hcfg = load_json(os.path.join(tiny5, "config.json")), model.config
    ids = (hcfg.decoder_start_token_id, hcfg.eos_token_id, hcfg.pad_token_id)
    check(ids == (tcfg["bos_id"], tcfg["eos_id"], tcfg["pad_id"]),
          f"exported config: decoder_start_token_id, eos_token_id, pad_token_id {ids} = tnmt's "
          f"bos, eos, pad")
    info(f"exported generation settings: bad_words_ids {hcfg.bad_words_ids}, forced_eos_token_id "
         f"{hcfg.forced_eos_token_id}, activation {hcfg.activation_function}, "
         f"max_position_embeddings {hcfg.max_position_embeddings}")
    all_lines = read_lines(SENTENCES)
    # tnmt gives an empty line an empty translation without running the model; HF would
    # translate [</s>]. Only non-empty lines are compared with HF.
    lines = [line for line in all_lines if line.strip()]
    hf = HfSide(hf_out, rule="joint")  # tiny is a version 1 model: spm.model decodes every id
    t_orig, err = tnmt_translate(a.tnmt, tiny5, lines, w, "tiny5.greedy", *GREEDY)
    check(t_orig is not None, "tnmt translate tiny (epsilon 1e-5)", err)
    if t_orig is None:
        return
    srcs = [hf.encode(line) for line in lines]
    gen = [hf.generate(s, num_beams=1)[0] for s in srcs]
    texts = [hf.text(g) for g in gen]
    diff = [i for i in range(len(lines)) if texts[i] != t_orig[i][1]]
    check(not diff, f"exported model: HF greedy = tnmt greedy on the {len(lines)} non-empty "
          f"lines of sentences.txt ({len(lines) - len(diff)}/{len(lines)})")
    for i in diff:
        show_diff(i, lines[i], [("tnmt", t_orig[i][1], t_orig[i][0]), ("HF", texts[i], None)])
    errs = [abs(hf.forced_logprob(s, g) - t_orig[i][0])
            for i, (s, g) in enumerate(zip(srcs, gen)) if i not in diff]
    worst = max(errs) if errs else float("nan")
    check(bool(errs) and worst <= SCORE_TOL, f"exported model: HF forced-decoding "
          f"log-probability = tnmt's greedy score, max |diff| {worst:.2e}")
    tok_texts = [hf.tok.decode(g, skip_special_tokens=True) for g in gen]
    info(f"MarianTokenizer.decode(skip_special_tokens=True) gives tnmt's text on "
         f"{sum(x == y[1] for x, y in zip(tok_texts, t_orig))}/{len(lines)}")
    for i, (x, y) in enumerate(zip(tok_texts, t_orig)):
        if x != y[1]:
            info(f"    [{i}] tnmt {y[1]!r}, MarianTokenizer.decode {x!r}")

    rt = os.path.join(w, "tiny.roundtrip")
    r = tnmt_import(a.tnmt, hf_out, rt)
    check(r.returncode == 0, "the export imports back (tnmt import --from hf-marian)",
          r.stderr.strip())
    if r.returncode != 0:
        return
    # The import is a version 2 model with vocab.json, whose decoding leaves out <unk> and
    # trims spaces: the original's text is compared after the same (HF's ids decoded both ways).
    sep = HfSide(hf_out, rule="separate")
    # The import takes Hugging Face's length penalty style ("length") as its default, so the
    # beam run names the original's (gnmt 0.6) for both.
    beam_flags = ("--beam-size", "4", "--length-penalty", "0.6", "--length-penalty-style", "gnmt")
    info(f"the round trip's decoding defaults: {load_json(os.path.join(rt, 'config.json'))['decoding']}"
         f" (the original's: {tcfg['decoding']})")
    for label, flags in (("greedy", GREEDY), ("beam 4, gnmt 0.6", beam_flags)):
        t1, e1 = tnmt_translate(a.tnmt, tiny5, all_lines, w, "tiny5.rt1", *flags)
        t2, e2 = tnmt_translate(a.tnmt, rt, all_lines, w, "tiny5.rt2", *flags)
        ok = t1 is not None and t2 is not None
        if ok:
            want = [x[1] for x in t1]
            if label == "greedy":
                by_line = dict(zip(lines, gen))
                want = [sep.text(by_line[line]) if line in by_line else x[1]
                        for line, x in zip(all_lines, t1)]
            diff = [i for i in range(len(all_lines)) if t2[i][1] != want[i]]
            worst = max(abs(x[0] - y[0]) for x, y in zip(t1, t2))
            for i in diff:
                show_diff(i, all_lines[i], [("original", t1[i][1], t1[i][0]),
                                            ("round trip", t2[i][1], t2[i][0])])
            ok = (label != "greedy" or not diff) and worst <= SCORE_TOL
            what = (f"tnmt -> HF Marian -> tnmt translates as the original ({label}: "
                    f"{len(all_lines) - len(diff)}/{len(all_lines)} the same text, max |score "
                    f"diff| {worst:.2e})")
        else:
            what = f"tnmt -> HF Marian -> tnmt translates ({label})"
        check(ok, what, f"{e1} {e2}")


def refusal_checks(a, w, hf_a, vocab):
    stage("refusals")
    lines = read_lines(DATA_EN)[:20]
    base, err = None, ""
    cases = []
    d = os.path.join(w, "r_noconfig")
    copy_with_config(hf_a, d)
    os.remove(os.path.join(d, "config.json"))
    cases.append(("no config.json", d, ["config.json"]))
    cases.append(("model_type bart", copy_with_config(hf_a, os.path.join(w, "r_bart"),
                                                      {"model_type": "bart"}),
                  ["bart", "model_type"]))
    d = copy_with_config(hf_a, os.path.join(w, "r_bin"))
    os.remove(os.path.join(d, "model.safetensors"))
    MarianMTModel.from_pretrained(hf_a).save_pretrained(d, safe_serialization=False)
    if os.path.exists(os.path.join(d, "model.safetensors")):
        os.remove(os.path.join(d, "model.safetensors"))
    cases.append(("pytorch_model.bin only", d, ["pytorch_model.bin"]))
    d = copy_with_config(hf_a, os.path.join(w, "r_truncated"))
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)
    cases.append(("truncated model.safetensors", d, ["model.safetensors", "truncat", "size"]))
    cases.append(("activation_function tanh",
                  copy_with_config(hf_a, os.path.join(w, "r_tanh"), {"activation_function": "tanh"}),
                  ["tanh"]))
    cases.append(("normalize_before true",
                  copy_with_config(hf_a, os.path.join(w, "r_prenorm"), {"normalize_before": True}),
                  ["normalize_before"]))
    for what, d, words in cases:
        r = tnmt_import(a.tnmt, d, os.path.join(w, "refused"))
        ok, detail = refused(r, words)
        if what == "pytorch_model.bin only":
            ok = ok and "safetensors" in r.stderr
        check(ok, f"import refuses {what}", detail)
        info(f"stderr: {r.stderr.strip()}")
    out = os.path.join(w, "nonempty")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "keep.txt"), "w") as f:
        f.write("x\n")
    r = tnmt_import(a.tnmt, hf_a, out, fresh=False)
    ok, detail = refused(r, ["exist", "empty", "--force"])
    check(ok and os.path.exists(os.path.join(out, "keep.txt")),
          "import refuses an existing non-empty output directory", detail)
    info(f"stderr: {r.stderr.strip()}")
    r = tnmt_import(a.tnmt, hf_a, out, "--force", fresh=False)
    check(r.returncode == 0, "... and writes it with --force", r.stderr.strip())
    r = run([a.tnmt, "export", "--to", "hf-marian", PRENORM, "--output",
             os.path.join(w, "prenorm.hf")])
    ok, detail = refused(r, ["normalize_before", "pre-norm", "prenorm", "post-norm"])
    check(ok, "export refuses a pre-norm model (HF Marian is post-norm only)", detail)
    info(f"stderr: {r.stderr.strip()}")

    stage("legacy OPUS-MT config keys, --dtype float16")
    base, err = tnmt_translate(a.tnmt, out, lines, w, "legacy.base", *GREEDY)
    legacy = copy_with_config(hf_a, os.path.join(w, "legacy"), {
        "normalize_before": False, "normalize_embedding": False,
        "static_position_embeddings": True, "add_bias_logits": False, "add_final_layer_norm":
        False, "extra_pos_embeddings": len(vocab), "architectures": ["MarianMTModel"]})
    r = tnmt_import(a.tnmt, legacy, os.path.join(w, "legacy.tnmt"))
    got, err2 = (tnmt_translate(a.tnmt, os.path.join(w, "legacy.tnmt"), lines, w, "legacy",
                                *GREEDY) if r.returncode == 0 else (None, r.stderr.strip()))
    check(base is not None and got == base, "import accepts the legacy keys of older OPUS-MT "
          "configs (normalize_before false, normalize_embedding false, "
          "static_position_embeddings true, add_bias_logits false, ...) and translates the same",
          f"{err} {err2}")
    f16 = os.path.join(w, "a.f16")
    r = tnmt_import(a.tnmt, hf_a, f16, "--dtype", "float16")
    dts = sorted({t["dtype"] for t in safetensors_header(
        os.path.join(f16, "model.safetensors")).values()}) if r.returncode == 0 else []
    got, err2 = (tnmt_translate(a.tnmt, f16, lines, w, "f16", *GREEDY) if r.returncode == 0
                 else (None, r.stderr.strip()))
    check(got is not None and "F16" in dts, f"import --dtype float16 stores {dts} and translates",
          err2)
    if got is not None and base is not None:
        info(f"float16 vs float32 greedy: {sum(x[1] == y[1] for x, y in zip(got, base))}/"
             f"{len(lines)} the same text")


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_checks(a, w, tnmt_dir, lines):
    """`tnmt serve` on the imported model: ListModels reports its languages, and a translation
    through the server equals the local one."""
    stage("serving the imported model")
    port, http_port = free_port(), free_port()
    log = open(os.path.join(w, "serve.log"), "w")
    server = subprocess.Popen([a.tnmt, "serve", "--model", f"en-de={tnmt_dir}", "--port", str(port),
                               "--http-port", str(http_port), "--threads", "1"],
                              stdout=log, stderr=subprocess.STDOUT)
    target = f"127.0.0.1:{port}"
    try:
        ready = False
        for _ in range(120):  # at most 60 s
            if run([a.tnmt, "health", "--server", target, "--timeout-seconds", "2"]).returncode == 0:
                ready = True
                break
            if server.poll() is not None:
                break
            time.sleep(0.5)
        check(ready, "tnmt serve --model en-de=IMPORTED becomes SERVING")
        if not ready:
            return
        r = run([a.tnmt, "models", "--server", target, "--json"])
        models = json.loads(r.stdout) if r.returncode == 0 else []
        got = [(m.get("name"), m.get("source_language"), m.get("target_language")) for m in models]
        check(got == [("en-de", "en", "de")], f"ListModels reports the languages: {got}")
        inp = os.path.join(w, "serve.in")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        remote = run([a.tnmt, "translate", "--server", target, "--input", inp, "--beam-size", "1",
                      "--scores"])
        local = run([a.tnmt, "translate", "--model", tnmt_dir, "--input", inp, "--beam-size", "1",
                     "--scores", "--threads", "1"])
        check(remote.returncode == 0 and remote.stdout == local.stdout and remote.stdout,
              f"a translation through the server equals the local one ({len(lines)} lines)",
              remote.stderr.strip()[:300])
    finally:
        server.terminate()
        try:
            code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = server.wait()
        log.close()
        check(code == 0, f"the server exits 0 on SIGTERM (exit {code})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--hf-only", action="store_true")
    a = ap.parse_args()
    w = a.work
    os.makedirs(w, exist_ok=True)
    import transformers
    print(f"hf_marian_test: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"sentencepiece {spm.__version__}")

    stage("a. SentencePiece models and vocab.json")
    en, de = read_lines(DATA_EN), read_lines(DATA_DE)
    check(len(en) == len(de) == 600, f"data: {len(en)} English, {len(de)} German lines")
    tok_dir, vocab = make_tokenizer_dir(w, en, de)
    V = len(vocab)
    tok = MarianTokenizer.from_pretrained(tok_dir)
    check(tok.pad_token_id == V - 1 and tok.eos_token_id == 0 and tok.unk_token_id == 1,
          f"MarianTokenizer loads the vocabulary: {V} entries, </s> 0, <unk> 1, <pad> {V - 1}")
    src_ids = tok(en)["input_ids"]
    tgt_ids = tok(text_target=de)["input_ids"]
    info(f"{en[0]!r} -> {src_ids[0]}")

    stage("b. training the Marian models")
    # A: 300 steps from scratch. B: A's weights (its third encoder layer a copy of the second),
    # relu, a random final_logits_bias (a buffer, not trained), then 100 steps more.
    models = {}
    t = time.time()
    torch.manual_seed(1)
    model_a = MarianMTModel(marian_config(V))
    model_a, loss = train_model(model_a, src_ids, tgt_ids, seed=1, steps=300)
    torch.manual_seed(2)
    model_b = MarianMTModel(marian_config(V, activation_function="relu", encoder_layers=3))
    state = dict(model_a.state_dict())
    for k in list(state):
        if k.startswith("model.encoder.layers.1."):
            state[k.replace(".layers.1.", ".layers.2.")] = state[k].clone()
    state["final_logits_bias"] = torch.randn(
        model_b.final_logits_bias.shape, generator=torch.Generator().manual_seed(3)) * 0.5
    model_b.load_state_dict(state, strict=True)
    info(f"model A: 300 steps, last loss {loss:.3f}, {time.time() - t:.1f} s")
    t = time.time()
    model_b, loss = train_model(model_b, src_ids, tgt_ids, seed=2, steps=100)
    info(f"model B: 100 steps more, last loss {loss:.3f}, {time.time() - t:.1f} s")
    for name, model in (("A", model_a), ("B", model_b)):
        d = os.path.join(w, f"{name}.hf")
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
        st = safetensors_header(os.path.join(d, "model.safetensors"))
        info(f"model {name} ({model.config.activation_function}, {model.config.encoder_layers}+"
             f"{model.config.decoder_layers} layers): {len(st)} tensors in model.safetensors; "
             f"files {sorted(os.listdir(d))}")
        if name == "A":
            info("tensor names: " + ", ".join(
                n for n in sorted(st) if ".layers." not in n or ".layers.0." in n) + ", ...")
        if name == "B":
            from safetensors import safe_open
            with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
                stored = f.get_tensor("final_logits_bias") if "final_logits_bias" in f.keys() \
                    else None
            check(stored is not None and torch.equal(stored, model.final_logits_bias)
                  and float(stored.abs().max()) > 0,
                  "model B: the nonzero final_logits_bias is in model.safetensors")
        models[name] = d

    lines = en[:N_TRANSLATE]
    for name, d in models.items():
        compare_model(a, w, name, d, lines)
    if not a.hf_only:
        serve_checks(a, w, os.path.join(w, "A.tnmt"), lines[:20])
        activation_checks(a, w, models["A"], lines[:30])
        export_checks(a, w)
        refusal_checks(a, w, models["A"], vocab)

    return summary("hf_marian_test", f", {time.time() - T0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())

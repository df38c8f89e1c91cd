#!/usr/bin/env python3
"""Makes an OPUS-MT-shaped Hugging Face Marian model with random weights, and benchmark sources,
for bench/run_opus_bench.sh. Runs in build/py-hf (deploy/install-py-tools.sh: transformers over
Debian's torch and sentencepiece).

    make_opus_model.py OUT_DIR [--seed 1] [--sources 100] [--source-pieces 15]

Writes (the corpus, the SentencePiece models and the model only when not there yet; the same
seed gives the same files on every machine):
  OUT_DIR/corpus.src, corpus.tgt  a synthetic corpus of each side (not parallel; below)
  OUT_DIR/hf/                     the model as MarianMTModel.save_pretrained and
                                  MarianTokenizer.save_pretrained write it: config.json,
                                  model.safetensors, source.spm, target.spm, vocab.json,
                                  tokenizer_config.json, ...
  OUT_DIR/sources-NxP.txt         N (--sources) new sentences of the source language, each
                                  exactly P (--source-pieces) pieces under source.spm (the model's
                                  input is those pieces and </s>)
  OUT_DIR/model_info.json         the model's shape and vocabulary size, what the data is

The shape is OPUS-MT's (e.g. Helsinki-NLP/opus-mt-en-de): 6+6 layers, d_model 512, d_ff 2048, 8
heads, activation swish, post-norm, sinusoidal positions, scaled embeddings shared by encoder,
decoder and output projection, a joint vocab.json of about 58,000 entries built from a source
and a target SentencePiece unigram model of 29,000 pieces each. Weights are transformers' own
random initialization (normal; the <pad> row zero) under torch.manual_seed(seed), with
init_std 0.1 instead of its default 0.02: at 0.02 the source barely moves the decoder and
every source gets the same output; at 0.1 the output depends on the source (its first piece;
then, the embeddings being tied, mostly that piece repeated), so comparing the engines'
outputs sentence by sentence means something.

The text: the repository ships no corpus large enough to train 29,000-piece SentencePiece
models (a real vocabulary of that size needs millions of words), so each side is a synthetic
language generated here from the seed: 60,000 word types made of random syllables (the source
side in Latin letters, the target side in Cyrillic ones, so the two piece sets share little and
the joint vocabulary is close to twice 29,000: 57,994 with seed 1, where opus-mt-en-de has
58,101), drawn with Zipf frequencies into 200,000 sentences of 4 to 24 words. SentencePiece
trains real unigram models on that text: frequent words become single pieces, rare ones split
into syllable-sized pieces. The benchmark's sources are further sentences of the source
language, chosen for their length in pieces.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

PIECES_PER_SIDE = 29000
WORD_TYPES = 60000
CORPUS_SENTENCES = 200000
ALPHABETS = {  # onsets, vowels, codas of each synthetic language
    "src": (["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
             "br", "ch", "st", "tr", "sh", "pl", "gr"],
            ["a", "e", "i", "o", "u", "ee", "ou", "ai"],
            ["", "", "", "n", "r", "s", "t", "l", "nd", "ck"]),
    "tgt": (["", "б", "в", "г", "д", "ж", "з", "к", "л", "м", "н", "п", "р", "с", "т", "ф", "х",
             "ш", "ч", "ст", "пр", "шт", "кр"],
            ["а", "е", "и", "о", "у", "ы", "я", "ю", "ё"],
            ["", "", "", "н", "р", "с", "т", "л", "й", "нг"]),
}


def word_types(rng, side):
    """WORD_TYPES distinct words of 1 to 4 syllables, in the order of their Zipf rank."""
    onsets, vowels, codas = ALPHABETS[side]
    words, seen = [], set()
    while len(words) < WORD_TYPES:
        n = int(rng.choice([1, 2, 2, 3, 3, 4]))
        w = "".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] +
                    codas[rng.integers(len(codas))] for _ in range(n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def sentences(rng, words, count):
    """count sentences of 4 to 24 Zipf-drawn words (s = 1.1), with occasional commas and a
    final full stop."""
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    p /= p.sum()
    lengths = rng.integers(4, 25, size=count)
    ids = rng.choice(len(words), size=int(lengths.sum()), p=p)
    out, at = [], 0
    for n in lengths:
        ws = [words[i] for i in ids[at:at + n]]
        at += n
        if n > 8:
            ws[int(rng.integers(2, n - 2))] += ","
        out.append(" ".join(ws).capitalize() + ".")
    return out


def write_lines(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def train_spm(corpus, prefix):
    """A unigram model of PIECES_PER_SIDE pieces with OPUS-MT's ids (<unk> 0, <s> 1, </s> 2, no
    <pad>), trained with one thread in the corpus's directory under relative names, so that
    the same corpus gives the same file on every machine and in every directory."""
    import sentencepiece as spm
    if not os.path.exists(prefix + ".model"):
        cwd = os.getcwd()
        os.chdir(os.path.dirname(os.path.abspath(corpus)))
        try:
            spm.SentencePieceTrainer.train(
                input=os.path.basename(corpus), model_prefix=os.path.basename(prefix),
                vocab_size=PIECES_PER_SIDE, model_type="unigram", character_coverage=1.0,
                num_threads=1, minloglevel=2, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
        finally:
            os.chdir(cwd)
    return prefix + ".model"


def joint_vocab(src_model, tgt_model):
    """vocab.json as OPUS-MT's: </s> 0, <unk> 1, the source then the target pieces (each once;
    spm's own control pieces left out), <pad> last (the decoder's start token)."""
    import sentencepiece as spm
    vocab = {"</s>": 0, "<unk>": 1}
    for model in (src_model, tgt_model):
        sp = spm.SentencePieceProcessor(model_file=model)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def marian_config(vocab_size, init_std=0.1):
    from transformers import MarianConfig
    pad = vocab_size - 1
    return MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=512, encoder_layers=6,
        decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        scale_embedding=True, max_position_embeddings=512, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        forced_eos_token_id=0, bad_words_ids=[[pad]], num_beams=4, max_length=512,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, architectures=["MarianMTModel"], init_std=init_std)


def make_model(out, seed):
    """The tokenizer files, then the model, in OUT/hf (written to OUT/hf.tmp, then renamed)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    hf = os.path.join(out, "hf")
    if os.path.exists(os.path.join(hf, "model.safetensors")):
        return hf
    tmp = hf + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    src_model = train_spm(os.path.join(out, "corpus.src"), os.path.join(out, "spm_src"))
    tgt_model = train_spm(os.path.join(out, "corpus.tgt"), os.path.join(out, "spm_tgt"))
    vocab = joint_vocab(src_model, tgt_model)
    shutil.copy(src_model, os.path.join(tmp, "source.spm"))
    shutil.copy(tgt_model, os.path.join(tmp, "target.spm"))
    with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"source_lang": "xs", "target_lang": "xt", "separate_vocabs": False,
                   "model_max_length": 512, "tokenizer_class": "MarianTokenizer"}, f, indent=2)
    tok = MarianTokenizer.from_pretrained(tmp)
    torch.manual_seed(seed)
    model = MarianMTModel(marian_config(len(vocab))).eval()
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    os.replace(tmp, hf)
    return hf


def pick_sources(out, gen, words, count, pieces):
    """count new sentences of the source language that source.spm cuts into exactly `pieces`
    pieces, none of them <unk>."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "hf", "source.spm"))
    chosen = []
    while len(chosen) < count:
        for line in sentences(gen, words, 2000):
            ids = sp.encode(line)
            if len(ids) == pieces and sp.unk_id() not in ids:
                chosen.append(line)
                if len(chosen) == count:
                    break
    return chosen


def generator(seed, side, use):
    """The generator of one side ("src" 0, "tgt" 1) and one use (0 words, 1 corpus, 2 sources)."""
    return np.random.default_rng([seed, {"src": 0, "tgt": 1}[side], use])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sources", type=int, default=100)
    ap.add_argument("--source-pieces", type=int, default=15)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import warnings
    warnings.filterwarnings("ignore")  # MarianTokenizer recommends sacremoses
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # OPUS-MT's generation keys in config.json

    words = {side: word_types(generator(a.seed, side, 0), side) for side in ("src", "tgt")}
    for side in ("src", "tgt"):
        path = os.path.join(a.out, "corpus." + side)
        if not os.path.exists(path):
            write_lines(path, sentences(generator(a.seed, side, 1), words[side], CORPUS_SENTENCES))
    hf = make_model(a.out, a.seed)
    sources = pick_sources(a.out, generator(a.seed, "src", 2), words["src"], a.sources,
                           a.source_pieces)
    write_lines(os.path.join(a.out, f"sources-{a.sources}x{a.source_pieces}.txt"), sources)

    with open(os.path.join(hf, "vocab.json"), encoding="utf-8") as f:
        vocab_size = len(json.load(f))
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    info = {
        "vocab_size": vocab_size, "pieces_per_side": PIECES_PER_SIDE, "seed": a.seed,
        "init_std": cfg["init_std"],
        "layers": f"{cfg['encoder_layers']}+{cfg['decoder_layers']}", "d_model": cfg["d_model"],
        "d_ff": cfg["encoder_ffn_dim"], "heads": cfg["encoder_attention_heads"],
        "activation": cfg["activation_function"],
        "data": f"synthetic languages, {WORD_TYPES} random-syllable words each, "
                f"{CORPUS_SENTENCES} Zipf-drawn sentences per side",
    }
    with open(os.path.join(a.out, "model_info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"make_opus_model: {hf}: vocabulary {vocab_size}, {info['layers']} layers, "
          f"d_model {info['d_model']}, d_ff {info['d_ff']}, {info['heads']} heads, "
          f"{info['activation']}; {len(sources)} sources of {a.source_pieces} pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())

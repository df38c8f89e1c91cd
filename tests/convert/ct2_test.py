#!/usr/bin/env python3
"""tools/convert/export_ctranslate2.py: exported models translate like tnmt; refusals.

    ct2_test.py --tnmt BIN --work DIR

  * tests/golden/data/tiny (post-norm, relu, sinusoidal, shared embeddings) and
    tests/golden/data/tiny_prenorm (pre-norm, gelu, learned positions, unshared embeddings,
    BF16) exported as float32 and compared with `tnmt translate` by ct2_compare.py (beam with
    the config.json defaults, length penalty 0, greedy; texts identical, scores within 1e-4
    relative);
  * tiny exported as float16 and int8: written smaller, loaded and run by CTranslate2; their
    translations' agreement with tnmt is printed (rounding changes the random tiny model's
    choices; docs/model-import-export.md has the numbers for a trained model), and tnmt's
    translations forced through them must score within per-token bounds (below);
  * refusals: not a model directory, another format, a newer format_version, a vocabulary that
    does not match spm.model, an unexpected tensor, a non-empty output directory.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_log import check, summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXPORT = os.path.join(REPO, "tools", "convert", "export_ctranslate2.py")
COMPARE = os.path.join(HERE, "ct2_compare.py")
SENTENCES = os.path.join(HERE, "data", "sentences.txt")
GOLDEN = os.path.join(REPO, "tests", "golden", "data")





def run(*cmd):
    return subprocess.run([sys.executable, *cmd], capture_output=True, text=True)


def export(model, out, *extra):
    if os.path.exists(out):
        shutil.rmtree(out)
    return run(EXPORT, model, out, *extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    w = a.work
    os.makedirs(w, exist_ok=True)

    sizes = {}
    for name in ("tiny", "tiny_prenorm"):
        model = os.path.join(GOLDEN, name)
        out = os.path.join(w, name + ".ct2")
        r = export(model, out)
        check(r.returncode == 0 and os.path.isfile(os.path.join(out, "model.bin"))
              and os.path.isfile(os.path.join(out, "spm.model")),
              f"{name}: exported ({r.stdout.strip()})", r.stderr.strip())
        if r.returncode != 0:
            continue
        sizes[name] = os.path.getsize(os.path.join(out, "model.bin"))
        with open(os.path.join(out, "config.json")) as f:
            ct2_cfg = json.load(f)
        with open(os.path.join(model, "config.json")) as f:
            eps = json.load(f)["layer_norm_epsilon"]
        check(ct2_cfg.get("layer_norm_epsilon") == eps and ct2_cfg.get("add_source_eos") is True
              and ct2_cfg.get("decoder_start_token") == "<s>",
              f"{name}: CTranslate2 config: epsilon {eps}, </s> appended to sources, decoding "
              "starts from <s>", json.dumps(ct2_cfg))
        r = run(COMPARE, "--tnmt", a.tnmt, "--model", model, "--ct2", out,
                "--sentences", SENTENCES)
        print("      " + r.stdout.strip().replace("\n", "\n      "))
        check(r.returncode == 0, f"{name}: CTranslate2 translates like tnmt", r.stderr.strip())

    # Quantized exports, bounded by forced decoding along tnmt's own translations (ct2_compare
    # --max-token-diff/--mean-token-diff): the per-token log-probability difference from
    # float32 tnmt. The translations themselves are only reported: this random model has
    # near-ties (margins down to 2.4e-4, tests/golden/README.md) that any rounding may flip.
    #   float16 weights, float32 compute: the error comes from rounding each weight to float16
    #     (relative 2^-11), fixed by the export; machines differ only in float32 summation
    #     order (1e-5 here: the float32 export's forced scores agree within 1e-5). Bounds:
    #     mean 0.01, max 0.1 nats (measured: mean 3.0e-3, max 3.7e-2).
    #   int8 weights and activations (CTranslate2 quantizes each input row at run time): a
    #     step of 1/127 of each row's largest value, and the int8 GEMM backend (oneDNN, ruy,
    #     with or without VNNI) may round differently; this model's scaled embeddings (x5.7)
    #     and large logits make it coarse. Bound: mean 1.5 nats (measured 0.63; an unrelated
    #     model differs by several nats per token); no bound on single tokens.
    bounds = {"float16": ["--max-token-diff", "0.1", "--mean-token-diff", "0.01"],
              "int8": ["--mean-token-diff", "1.5"]}
    for q, compute in (("float16", "float32"), ("int8", "int8")):
        out = os.path.join(w, f"tiny.{q}.ct2")
        r = export(os.path.join(GOLDEN, "tiny"), out, "--quantization", q)
        if r.returncode != 0:
            check(False, f"tiny: exported as {q}", r.stderr.strip())
            continue
        size = os.path.getsize(os.path.join(out, "model.bin"))
        check(size < 0.65 * sizes.get("tiny", 0), f"tiny: exported as {q}, model.bin {size} "
              f"bytes (float32: {sizes.get('tiny')})")
        r = run(COMPARE, "--tnmt", a.tnmt, "--model", os.path.join(GOLDEN, "tiny"), "--ct2", out,
                "--sentences", SENTENCES, "--compute-type", compute, "--report-only",
                *bounds[q])
        print("      " + r.stdout.strip().replace("\n", "\n      "))
        check(r.returncode == 0 and "16 lines" in r.stdout and "forced decoding along" in r.stdout,
              f"tiny {q}: CTranslate2 ({compute}) translates it; tnmt's translations forced "
              f"through it score within the bounds of float32 tnmt per token ({' '.join(bounds[q])})",
              r.stderr.strip())

    # Refusals.
    def broken(name, edit_config=None, edit_dir=None):
        d = os.path.join(w, "broken", name)
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(os.path.join(GOLDEN, "tiny"), d)
        if edit_config:
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            edit_config(cfg)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
        if edit_dir:
            edit_dir(d)
        return d

    def add_tensor(d):
        sys.path.insert(0, os.path.join(REPO, "tools", "convert"))
        import numpy as np
        import tnmt_model
        path = os.path.join(d, "model.safetensors")
        t, _ = tnmt_model.read_safetensors(path)
        t["encoder.layernorm_embedding.weight"] = tnmt_model.Tensor.from_f32(np.ones(32))
        tnmt_model.write_safetensors(path, t)

    cases = [
        ("not a model directory", GOLDEN, [], "config.json: missing"),
        ("another format", broken("format", lambda c: c.update(format="ctranslate2")), [],
         "not a tnmt model directory"),
        ("a newer format_version", broken("version", lambda c: c.update(format_version=2)), [],
         "unsupported format_version 2"),
        ("a vocabulary size that does not match spm.model",
         broken("vocab", lambda c: c.update(vocab_size=300)), [],
         "vocabulary has 256 pieces but"),
        ("an unexpected tensor", broken("tensor", edit_dir=add_tensor), [],
         "unexpected tensor(s) encoder.layernorm_embedding.weight"),
        ("an unknown activation", broken("act", lambda c: c.update(activation="swish")), [],
         "\"activation\" must be"),
        ("a non-empty output directory", os.path.join(GOLDEN, "tiny"), ["--keep"],
         "exists and is not empty"),
    ]
    for what, model, extra, expect in cases:
        out = os.path.join(w, "refused.ct2")
        if extra == ["--keep"]:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "something"), "w") as f:
                f.write("x")
            r = run(EXPORT, model, out)
        else:
            r = export(model, out)
        check(r.returncode == 1 and expect in r.stderr,
              f"refuses {what}: {r.stderr.strip().removeprefix('export_ctranslate2: error: ')}",
              f"exit {r.returncode}, want 1 and {expect!r} in: {r.stderr.strip()}")

    return summary("ct2_test")


if __name__ == "__main__":
    sys.exit(main())

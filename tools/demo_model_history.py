#!/usr/bin/env python3
"""The training history of a demo model, for tools/make-demo-model.sh.

    demo_model_history.py [--recipe NAME] RUN_DIR OUT_DIR FINAL_STEP CHECKPOINT...

--recipe: the file under models/recipes this run was trained with (default multi30k-small.json,
or multi30k-continue.json for a run started with --init-model).

Writes into OUT_DIR (the new model directory):
  train_config.json        RUN_DIR's config, machine paths reduced to file names
  train_config.stageN.json the configs of the stages before it (a run started with
                           --init-model continues that model's history)
  training-log.jsonl       every stage's log, each record tagged with its "stage", this run's up
                           to FINAL_STEP, and one {"event": "averaged"} record per stage
Prints a JSON object: stage (this run's), total_steps, valid_rows and stage_rows (Markdown table
rows for the README), model (the model and its training settings in words, from the config),
recipe, and valid_sentences (dev sentences per validation; 0 = the whole dev set).
"""
import json
import os
import re
import sys

PATH_KEYS = ("train_source", "train_target", "valid_source", "valid_target", "save_dir", "spm_model",
             "metrics_file", "init_model")


def stripped(config):
    config = dict(config)
    for key in PATH_KEYS:
        if config.get(key):
            config[key] = os.path.basename(os.path.normpath(config[key]))
    return config


def write_json(path, value):
    with open(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def number(x):
    """A config float as written in a recipe (0.30000001192092896 -> 0.3)."""
    return f"{round(x, 6):g}"


def describe(c):
    """The model and its regularization in words, from a train_config.json."""
    words = [f"d_model {c['d_model']}", f"{c['num_heads']} heads", f"d_ff {c['d_ff']}",
             f"{c['encoder_layers']}+{c['decoder_layers']} layers",
             "pre-norm" if c.get("normalize_before") else "post-norm as in the paper",
             f"joint SentencePiece vocabulary of {c['vocab_size']} pieces"]
    dropout = f"dropout {number(c['dropout'])}"
    inner = [f"{name} {number(c[key])}" for name, key in
             (("attention", "attention_dropout"), ("activation", "activation_dropout")) if c.get(key, 0) > 0]
    words.append(dropout + (f" ({', '.join(inner)})" if inner else ""))
    if c.get("subword_nbest", 1) > 1:
        words.append(f"subword sampling (the {c['subword_nbest']} best segmentations, "
                     f"alpha {number(c['subword_alpha'])})")
    words.append(f"label smoothing {number(c['label_smoothing'])}")
    words.append(f"{c['max_tokens']}-token batches")
    return ", ".join(words)


def default_recipe(config):
    """The recipe a run was trained with when nothing names it: the demo model's staged recipes."""
    return "multi30k-continue.json" if config.get("init_model") else "multi30k-small.json"


def main(run, out, final_step, checkpoints, recipe=None):
    config = json.load(open(os.path.join(run, "train_config.json")))
    init = config.get("init_model", "")
    records = []
    if init:
        log = os.path.join(init, "training-log.jsonl")
        if not os.path.exists(log):
            sys.exit(f"demo_model_history: {log} not found (the init model's history)")
        for line in open(log):
            record = json.loads(line)
            record.setdefault("stage", 1)
            records.append(record)
        prev = max([r["stage"] for r in records] + [1])
        for name in os.listdir(init):
            if re.fullmatch(r"train_config\.stage\d+\.json", name):
                write_json(os.path.join(out, name), json.load(open(os.path.join(init, name))))
        write_json(os.path.join(out, f"train_config.stage{prev}.json"),
                   json.load(open(os.path.join(init, "train_config.json"))))
        if not any(r.get("event") == "averaged" and r["stage"] == prev for r in records):
            # A first-stage model names its averaged checkpoints only in its README.
            found = re.search(r"average of \d+ checkpoints \(([^)]*)\)", open(os.path.join(init, "README.md")).read())
            records.append({"event": "averaged", "stage": prev, "checkpoints": found.group(1).split() if found else []})
        stage = prev + 1
    else:
        stage = 1
    write_json(os.path.join(out, "train_config.json"), stripped(config))
    for line in open(os.path.join(run, "metrics.jsonl")):
        record = json.loads(line)
        if record.get("step", 0) <= final_step:
            record["stage"] = stage
            records.append(record)
    recipe = recipe or default_recipe(config)
    records.append({"event": "averaged", "stage": stage, "checkpoints": checkpoints, "recipe": recipe})
    with open(os.path.join(out, "training-log.jsonl"), "w") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    validations, steps, averaged, recipes = {}, {}, {}, {}
    for r in records:
        s = r["stage"]
        if r.get("event") == "validation":
            validations[(s, r["step"])] = r  # a resumed run's repeat of a step wins
        if r.get("event") == "averaged":
            averaged[s] = r["checkpoints"]
            recipes[s] = r.get("recipe")
        elif "step" in r:
            steps[s] = max(steps.get(s, 0), r["step"])
    valid_rows = [f"| {s} | {step} | {r['dev_ppl']:.2f} | {r.get('dev_bleu', float('nan')):.1f} |"
                  for (s, step), r in sorted(validations.items())]
    stage_rows = []
    for s in range(1, stage + 1):
        name = "train_config.json" if s == stage else f"train_config.stage{s}.json"
        c = json.load(open(os.path.join(out, name)))
        name_s = recipes.get(s) or default_recipe(c)
        if c.get("init_model"):
            how = (f"`{name_s} --max-steps {steps.get(s, 0)}` from stage {s - 1}'s model "
                   f"(seed {c['seed']}, warmup {c['warmup_steps']}, lr_scale {c['lr_scale']:g})")
        else:
            how = f"`{name_s} --max-steps {steps.get(s, 0)}` from random weights (seed {c['seed']})"
        avg = averaged.get(s, [])
        stage_rows.append(f"| {s} | {how} | {steps.get(s, 0)} | {len(avg)}: {' '.join(avg)} | `{name}` |")
    print(json.dumps({"stage": stage, "total_steps": sum(steps.values()), "valid_rows": "\n".join(valid_rows),
                      "stage_rows": "\n".join(stage_rows), "model": describe(config), "recipe": recipe,
                      "valid_sentences": config.get("valid_max_sentences", 0)}))


if __name__ == "__main__":
    args = sys.argv[1:]
    recipe = None
    if args[:1] == ["--recipe"]:
        if len(args) < 2:
            sys.exit(__doc__)
        recipe, args = args[1], args[2:]
    if len(args) < 3:
        sys.exit(__doc__)
    main(args[0], args[1], int(args[2]), args[3:], recipe)

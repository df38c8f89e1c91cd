#!/usr/bin/env python3
"""The Python client (clients/python) against a real `tnmt serve`, installed as its README says:
a fresh virtual environment and the README's `pip install clients/python`, run from a copy laid
out as a checkout, with pip's default resolution (whatever PyPI has newest that the package
admits). The checks then run in that environment: the generated code imports under the
resolved protobuf and grpcio, py.typed is installed and the type hints pass mypy --strict
(a pinned mypy, from PyPI), translate (= `tnmt translate` locally,
with options, prefixes, sampling seeds, token scores and alignments; score None unless asked
for), translate_stream (prefixes too), score (= `tnmt score`), list_models, texts that are not
valid Unicode refused before sending, the structured errors (code, ErrorInfo reason, field
violations, no retry for a refused request), retries (a server that starts late: UNAVAILABLE
is retried until it is up; no server: retries end at the deadline; a full queue: RESOURCE_EXHAUSTED
with RetryInfo is retried and every call succeeds), deadlines (unary calls have the client's,
streams none unless given; timeout=None passes none; a short one expires), the tokens, the jobs
API (submit with a made-up request id, get, list, watch, cancel, refusals), the README's
example run as written, and TLS with client certificates against a Python gRPC server and, when
`tnmt serve --help` lists --tls-cert, against tnmt serve (else reported as skipped).

    python_client_test.py --tnmt TNMT --model DIR --work DIR
"""

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "convert"))
from check_log import check, summary  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXTS = ["Das Haus ist rot.", "Zoë sieht den Hund!", "   ", "Ein Mann fährt Fahrrad."]


README = os.path.join(REPO, "clients", "python", "README.md")
# pip settings that change what gets resolved or how the package is built are not passed on: the
# install is the default one. Where packages come from (index, proxy, certificates) is kept.
PIP_RESOLUTION_SETTINGS = ("PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT", "PIP_NO_BUILD_ISOLATION", "PIP_NO_DEPS",
                           "PIP_PRE", "PIP_REQUIREMENT", "PIP_ONLY_BINARY", "PIP_NO_BINARY", "PIP_UPGRADE_STRATEGY",
                           "PIP_TARGET", "PIP_PREFIX", "PIP_USER", "PIP_CONFIG_FILE")


def readme_blocks(lang):
    """The README's fenced code blocks in `lang`, in order."""
    with open(README, encoding="utf-8") as f:
        return re.findall(r"^```" + lang + r"\n(.*?)^```", f.read(), re.M | re.S)


def install(work):
    """Installs the client as its README says, into the fresh venv WORK/venv: the README's
    `pip install ...` command, run with the venv's pip on PATH from WORK/src, a copy of
    clients/python and proto/ laid out as in a checkout. Returns the venv's python."""
    src = os.path.join(work, "src")
    shutil.copytree(os.path.join(REPO, "clients", "python"), os.path.join(src, "clients", "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "BUILD"))
    for sub in ("tnmt", "google"):
        shutil.copytree(os.path.join(REPO, "proto", sub), os.path.join(src, "proto", sub),
                        ignore=shutil.ignore_patterns("*.cc", "BUILD", "*.bzl"))
    commands = [line.split("#")[0].strip() for block in readme_blocks("sh") for line in block.splitlines()
                if line.strip().startswith("pip install")]
    if len(commands) != 1:
        raise SystemExit(f"FAIL  the README names one pip install command: {commands}")
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in PIP_RESOLUTION_SETTINGS and k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(VIRTUAL_ENV=venv, PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""))
    print(f"install: {commands[0]}  (fresh venv, in a copy of the checkout)", flush=True)
    t0 = time.monotonic()
    r = subprocess.run(shlex.split(commands[0]), cwd=src, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        raise SystemExit(f"FAIL  {commands[0]} failed (exit {r.returncode})")
    print(f"install: done in {time.monotonic() - t0:.0f} s; "
          f"{[l for l in r.stdout.splitlines() if l.startswith('Successfully installed')]}", flush=True)
    return os.path.join(venv, "bin", "python3")


# The type checker of check_types, pinned so that a new release does not change the verdict: mypy in
# a venv of its own, the stubs of grpcio and protobuf (no dependencies, nothing else changes) in the
# client's venv, where mypy looks for them.
TYPE_CHECKER = ["mypy==2.4.1"]
TYPE_STUBS = ["types-protobuf==6.32.1.20260221", "types-grpcio==1.85.0.20261028"]
USER_CODE = """from typing import Iterator, List, Optional, Tuple
from tnmt_client import DEFAULT, Client, TnmtError, Translation, training_pb2, translation_pb2

def use(c: Client) -> None:
    best: List[Translation] = c.translate(["a"], target_prefixes=["b"], timeout=None, beam_size=4)
    score: Optional[float] = best[0].hypotheses[0].score
    stream: Iterator[Tuple[int, Translation]] = c.translate_stream(iter(["a"]), target_prefixes=iter(["b"]), timeout=2.5)
    job: training_pb2.Job = c.submit_job({"name": "x"}, timeout=DEFAULT)
    models: List[translation_pb2.ModelInfo] = c.list_models()
    print(score, stream, job.id, models, [u.job.step for u in c.watch_job(job.id, timeout=None)])

with Client("localhost:1", timeout=None, stream_timeout=60, tls_ca=b"pem", tls_cert="c.pem", tls_key="c.key",
            token="t", jobs_token_file="j") as c:
    try:
        use(c)
    except TnmtError as e:
        print(e.code, e.reason, e.retry_delay, e.field_violations)
"""


def check_types(work):
    """mypy --strict on the installed package and on code that uses it as the README does."""
    checker = os.path.join(work, "mypy-venv")
    subprocess.run([sys.executable, "-m", "venv", checker], check=True)
    r = subprocess.run([os.path.join(checker, "bin", "pip"), "install", "--quiet", *TYPE_CHECKER], capture_output=True,
                       text=True)
    if r.returncode == 0:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *TYPE_STUBS],
                           capture_output=True, text=True)
    if r.returncode != 0:
        check(False, "types: the type checker installs", r.stdout + r.stderr)
        return
    user = os.path.join(work, "typed_use.py")
    with open(user, "w") as f:
        f.write(USER_CODE)
    # The generated gRPC stubs have no annotations (grpcio-tools writes none); the rest must pass --strict.
    mypy = [os.path.join(checker, "bin", "mypy"), "--strict", "--python-executable", sys.executable,
            "--cache-dir", os.path.join(work, "mypy-cache"), "--follow-imports", "silent"]
    for what, args in (("tnmt_client", ["-m", "tnmt_client", "-m", "tnmt_client.client", "-m", "tnmt_client.errors"]),
                       ("code using it", [user])):
        r = subprocess.run(mypy + args, capture_output=True, text=True, cwd=work)
        check(r.returncode == 0, f"types: mypy --strict passes on {what}", r.stdout[-3000:] + r.stderr[-1000:])


class Recorder:
    """Wraps a stub method: records the keyword arguments (timeout, metadata) of each call."""

    def __init__(self, method):
        self.method, self.calls = method, []

    def __call__(self, request, **kwargs):
        self.calls.append(kwargs)
        return self.method(request, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tnmt, args, work, name, port=0, delay=0.0):
    """Starts `tnmt serve` (after `delay` seconds); returns (process, port) once it is ready
    (or at once when delay > 0, with the port given)."""
    ready = os.path.join(work, f"{name}.ready")
    cmd = [tnmt, "serve", "--host", "127.0.0.1", "--port", str(port), "--http-port", "-1", "--threads", "1",
           "--ready-file", ready] + args
    log = open(os.path.join(work, f"{name}.log"), "w")
    if delay > 0:
        cmd = ["bash", "-c", f"sleep {delay}; exec \"$0\" \"$@\""] + cmd
    p = subprocess.Popen(cmd, stderr=log, stdout=log)
    if delay > 0:
        return p, port
    for _ in range(600):
        if os.path.exists(ready) and os.path.getsize(ready) > 0:
            return p, int(open(ready).read().split()[0])
        if p.poll() is not None:
            raise SystemExit(f"tnmt serve exited: {open(os.path.join(work, f'{name}.log')).read()}")
        time.sleep(0.1)
    raise SystemExit("tnmt serve did not become ready")


def stop(p):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def local_translate(tnmt, model, work, texts, *flags):
    path = os.path.join(work, "local.in")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    out = subprocess.run([tnmt, "translate", "--model", model, "--input", path, "--threads", "1", *flags],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--in-venv", action="store_true", help="(the second stage: run the checks)")
    a = ap.parse_args()
    if not a.in_venv:
        python = install(a.work)
        sys.stdout.flush()
        os.execv(python, [python, os.path.abspath(__file__), "--tnmt", a.tnmt, "--model", a.model, "--work", a.work,
                          "--in-venv"])
    tnmt, model, work = os.path.abspath(a.tnmt), os.path.abspath(a.model), a.work
    check_installed(work)
    check_types(work)
    run_checks(tnmt, model, work)
    skipped = run_tls_tests(tnmt, model, work)
    return summary("python_client_test",
                   f", {len(skipped)} skipped ({'; '.join(f'{name}: {why}' for name, why in skipped)})" if skipped else "")


def check_installed(work):
    """The package imported is the installed one, its generated code runs under the protobuf
    and grpcio pip resolved, and it ships py.typed."""
    import google.protobuf
    import grpc
    try:
        import tnmt_client
        from tnmt_client._proto.tnmt.v1 import translation_pb2, translation_pb2_grpc
    except ImportError as e:
        check(False, "install: tnmt_client imports", f"{e!r} (protobuf {google.protobuf.__version__}, grpcio {grpc.__version__})")
        sys.exit(summary("python_client_test"))
    check(True, "install: tnmt_client imports")

    venv = os.path.join(os.path.abspath(work), "venv")
    where = os.path.dirname(os.path.abspath(tnmt_client.__file__))
    check(where.startswith(venv + os.sep), "install: tnmt_client is imported from the fresh venv", where)
    with open(translation_pb2.__file__, encoding="utf-8") as f:
        gencode = re.search(r"^# Protobuf Python Version: (\S+)", f.read(), re.M).group(1)
    ver = lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3])  # noqa: E731
    runtime = google.protobuf.__version__
    check(ver(runtime)[0] == ver(gencode)[0] and ver(runtime) >= ver(gencode),
          "install: the resolved protobuf runs the generated code (same major, not older)",
          f"gencode {gencode}, protobuf {runtime}")
    check(ver(grpc.__version__) >= ver(translation_pb2_grpc.GRPC_GENERATED_VERSION),
          "install: the resolved grpcio runs the generated stubs",
          f"stubs {translation_pb2_grpc.GRPC_GENERATED_VERSION}, grpcio {grpc.__version__}")
    print(f"      protobuf {runtime} (gencode {gencode}), grpcio {grpc.__version__}")
    check(os.path.isfile(os.path.join(where, "py.typed")), "install: py.typed is installed (PEP 561)")
    record = [os.path.join(d, "RECORD") for d in os.listdir(os.path.dirname(where))
              if d.startswith("tnmt_client-") and d.endswith(".dist-info")]
    listed = record and "tnmt_client/py.typed" in open(os.path.join(os.path.dirname(where), record[0])).read()
    check(bool(listed), "install: the wheel lists py.typed in its RECORD")


def start_jobs_server(tnmt, model, work):
    """A server with the jobs service: a data root with a tiny corpus (also at its top, for the
    README's example), the model's spm.model, and a jobs token."""
    data = os.path.join(work, "data")
    os.makedirs(os.path.join(data, "corpus"))
    for side, words in (("en", "the a dog man runs sees house red"), ("de", "der ein Hund Mann läuft sieht Haus rot")):
        w = words.split()
        for path in (os.path.join(data, "corpus", f"train.{side}"), os.path.join(data, f"train.{side}")):
            with open(path, "w") as f:
                for i in range(60):
                    f.write(" ".join(w[(i + j) % len(w)] for j in range(5)) + "\n")
    shutil.copyfile(os.path.join(model, "spm.model"), os.path.join(data, "spm.model"))
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write("client-test-token-0123456789abcdef\n")
    server, port = start_server(tnmt, ["--model", f"tiny={model}", "--state-dir", os.path.join(work, "state"),
                                       "--data-root", data, "--jobs-token-file", token_file], work, "main")
    return server, port, token_file


def expect_error(what, call, code, mention=""):
    """Checks that call() raises TnmtError with `code` (and `mention` in its message)."""
    from tnmt_client import TnmtError
    try:
        call()
        check(False, f"{what}: refused with {code.name}", "the call succeeded")
        return None
    except TnmtError as e:
        check(e.code == code and mention in e.message, f"{what}: {code.name}" + (f" naming {mention}" if mention else ""),
              str(e))
        return e


def expect_value_error(what, call, *mentions, kind=ValueError):
    try:
        call()
        check(False, f"{what}: a {kind.__name__}", "the call succeeded")
    except kind as e:
        check(all(m in str(e) for m in mentions), f"{what}: a {kind.__name__} naming {', '.join(mentions)}", repr(e))
    except Exception as e:  # noqa: BLE001 - the wrong kind of error is the failure
        check(False, f"{what}: a {kind.__name__}", repr(e))


def run_checks(tnmt, model, work):
    import grpc
    from tnmt_client import Client

    server, port, token_file = start_jobs_server(tnmt, model, work)
    target = f"127.0.0.1:{port}"
    try:
        with Client(target, timeout=60) as cl:
            check_translation(cl, tnmt, model, work)
            check_texts(cl)
            check_errors(cl)
            check_deadlines(cl, target)
            # Jobs: the token is required.
            expect_error("jobs without the token", lambda: list(cl.list_jobs()), grpc.StatusCode.UNAUTHENTICATED)
        check_tokens(target, token_file)
        with Client(target, jobs_token_file=token_file, timeout=60) as jc:
            check_jobs(jc, target, token_file)
        check_readme_example(target, token_file, work)
    finally:
        stop(server)
    check_retries(tnmt, model, work)


def check_translation(cl, tnmt, model, work):
    from tnmt_client import translation_pb2

    # translate = local translation, line for line (a blank text stays blank).
    got = cl.translate(TEXTS, beam_size=4, return_scores=True)
    want = local_translate(tnmt, model, work, TEXTS, "--beam-size", "4", "--scores")
    check(len(got) == len(TEXTS), "translate: one Translation per text")
    check([f"{t.hypotheses[0].score:.6f} ||| {t.text}" for t in got] == want, "translate: texts and scores equal tnmt translate's", f"{got} vs {want}")
    check(got[2].text == "" and got[2].source_tokens == 0, "translate: a blank text gets an empty hypothesis")
    plain = cl.translate(TEXTS, beam_size=4)
    check([t.text for t in plain] == [t.text for t in got] and all(h.score is None for t in plain for h in t.hypotheses),
          "translate: the score is None when scores were not asked for", str([h.score for t in plain for h in t.hypotheses]))
    check(all(isinstance(h.score, float) for t in got for h in t.hypotheses), "translate: a float score with return_scores")
    # Options by name, prefixes, token scores and alignments.
    det = cl.translate(TEXTS[:2], target_prefixes=["Der", ""], return_token_scores=True, return_alignments=True,
                       no_repeat_ngram_size=2, return_scores=True)
    h = det[0].hypotheses[0]
    check(h.text.startswith("Der"), "prefix: the translation starts with it", h.text)
    check(len(h.token_scores) == len(h.pieces) + 1 == h.tokens + 1, "token scores: one per piece and </s>")
    check(len(h.alignments) == h.tokens and all(0 <= x <= len(det[0].source_pieces) for x in h.alignments), "alignments: one per piece, into source_pieces")
    with open(os.path.join(work, "prefix.txt"), "w") as f:
        f.write("Der\n\n")
    want_det = local_translate(tnmt, model, work, TEXTS[:2], "--target-prefix", os.path.join(work, "prefix.txt"),
                               "--token-scores", "--alignments", "--no-repeat-ngram-size", "2")
    got_det = [" ||| ".join([str(i + 1), t.text, f"{t.hypotheses[0].score:.6f}", " ".join(t.hypotheses[0].pieces),
                             " ".join(f"{x:.6f}" for x in t.hypotheses[0].token_scores),
                             " ".join(f"{s}-{j}" for j, s in enumerate(t.hypotheses[0].alignments))])
               for i, t in enumerate(det)]
    check(got_det == want_det, "options, prefixes, token scores and alignments equal tnmt translate's", f"{got_det} vs {want_det}")
    # Sampling: a drawn seed is reported; sending it back reproduces the output.
    s1 = cl.translate(TEXTS, sampling_topk=0)
    s2 = cl.translate(TEXTS, sampling_topk=0, seed=s1[0].seed)
    check(s1[0].seed != 0, "sampling: the server reports the seed it drew")
    check([t.text for t in s1] == [t.text for t in s2], "sampling: the same seed gives the same translations")
    # translate_stream: every text once, in any order, as translate.
    streamed = dict(cl.translate_stream(iter(TEXTS * 5), batch_size=3, beam_size=4))
    check(sorted(streamed) == list(range(len(TEXTS) * 5)), "translate_stream: every text answered once")
    check(all(streamed[i].text == got[i % len(TEXTS)].text for i in streamed), "translate_stream: the same translations as translate")
    check(all(h.score is None for t in streamed.values() for h in t.hypotheses), "translate_stream: the score is None when scores were not asked for")
    # translate_stream with target prefixes (iterators of texts and prefixes) = translate's.
    opts = dict(return_token_scores=True, return_alignments=True, no_repeat_ngram_size=2, return_scores=True)
    for batch_size in (1, 2):
        sp = dict(cl.translate_stream(iter(TEXTS[:2]), target_prefixes=iter(["Der", ""]), batch_size=batch_size, **opts))
        check(sorted(sp) == [0, 1] and [(sp[i].text, sp[i].hypotheses[0].score, sp[i].hypotheses[0].token_scores)
                                        for i in (0, 1)] == [(t.text, t.hypotheses[0].score, t.hypotheses[0].token_scores) for t in det],
              f"translate_stream: target prefixes as translate's (batches of {batch_size})", f"{sp} vs {det}")
    expect_value_error("translate_stream: fewer prefixes than texts",
                       lambda: list(cl.translate_stream(TEXTS[:2], target_prefixes=["Der"])), "1 target_prefixes for 2 texts")
    expect_value_error("translate_stream: fewer prefixes than texts (iterators)",
                       lambda: list(cl.translate_stream(iter(TEXTS[:2]), target_prefixes=iter(["Der"]))), "texts[1]")
    # score = tnmt score.
    targets = [t.text for t in got[:2]]
    scores = cl.score(TEXTS[:2], targets, return_token_scores=True)
    for p, t in ((os.path.join(work, "s.src"), TEXTS[:2]), (os.path.join(work, "s.tgt"), targets)):
        with open(p, "w", encoding="utf-8") as f:
            f.write("\n".join(t) + "\n")
    local = subprocess.run([tnmt, "score", "--model", model, "--source", os.path.join(work, "s.src"), "--target",
                            os.path.join(work, "s.tgt"), "--threads", "1"], check=True, capture_output=True,
                           text=True).stdout.split()
    check([f"{s.score:.6f}" for s in scores] == local, "score: equals tnmt score", f"{scores} vs {local}")
    check(all(abs(sum(s.token_scores) - s.score) < 1e-3 and len(s.token_scores) == s.target_tokens
              for s in scores), "score: token scores sum to the score")
    models = cl.list_models()
    check([(m.name, m.state) for m in models] == [("tiny", translation_pb2.MODEL_STATE_READY)] and models[0].load_time.seconds > 0, "list_models: the tiny model, ready")


def check_texts(cl):
    """Texts that are not valid Unicode are refused by the client, naming the text, before anything is sent."""
    translate, stream, score = (Recorder(cl._translation.Translate), Recorder(cl._translation.TranslateStream),
                                Recorder(cl._translation.Score))
    cl._translation.Translate, cl._translation.TranslateStream, cl._translation.Score = translate, stream, score
    try:
        expect_value_error("translate: a lone surrogate", lambda: cl.translate(["x", "\ud800"]), "texts[1]", "surrogate")
        expect_value_error("translate: a lone surrogate in a prefix",
                           lambda: cl.translate(["x"], target_prefixes=["\udfff"]), "target_prefixes[0]", "surrogate")
        expect_value_error("score: a lone surrogate", lambda: cl.score(["x"], ["\ud800"]), "targets[0]", "surrogate")
        check(not translate.calls and not score.calls, "translate, score: nothing sent for an invalid text")
        expect_value_error("translate_stream: a lone surrogate in a list",
                           lambda: list(cl.translate_stream(["x", "y", "\ud800"])), "texts[2]", "surrogate")
        expect_value_error("translate_stream: a lone surrogate in a prefix list",
                           lambda: list(cl.translate_stream(["x"], target_prefixes=["\ud800"])), "target_prefixes[0]")
        check(not stream.calls, "translate_stream: a list with an invalid text is refused before the stream starts")
        # An iterator: the texts before it may be translated; the stream ends with the client's
        # error, not the server's (or gRPC's UNKNOWN "Exception iterating requests!").
        expect_value_error("translate_stream: a lone surrogate from an iterator",
                           lambda: list(cl.translate_stream(iter(["Das Haus ist rot.", "\udcff", "x"]), batch_size=1)),
                           "texts[1]", "surrogate")
        expect_value_error("translate_stream: a text that is not a str",
                           lambda: list(cl.translate_stream(iter(["x", b"bytes"]))), "texts[1]", kind=TypeError)
    finally:
        cl._translation.Translate, cl._translation.TranslateStream, cl._translation.Score = \
            translate.method, stream.method, score.method


def check_errors(cl):
    import grpc
    from tnmt_client import TnmtError

    # Errors: code, message naming the field, reason, raised at once (no retries).
    before = cl.retried
    for what, call, code, reason, mention in [
        ("beam 1000", lambda: cl.translate(["x"], beam_size=1000), grpc.StatusCode.INVALID_ARGUMENT, "",
         "options.beam_size"),
        ("invalid prefix count", lambda: cl.translate(["x", "y"], target_prefixes=["a"]),
         grpc.StatusCode.INVALID_ARGUMENT, "", "target_prefixes"),
        ("too many texts", lambda: cl.translate(["x"] * 300), grpc.StatusCode.RESOURCE_EXHAUSTED,
         "TOO_MANY_TEXTS", "texts"),
        ("unknown model", lambda: cl.translate(["x"], model="klingon"), grpc.StatusCode.NOT_FOUND, "UNKNOWN_MODEL",
         "klingon"),
        ("score length mismatch", lambda: cl.score(["a", "b"], ["c"]), grpc.StatusCode.INVALID_ARGUMENT, "",
         "targets"),
    ]:
        try:
            call()
            check(False, f"error {what}: refused")
        except TnmtError as e:
            check(e.code == code, f"error {what}: {code.name}", str(e))
            check(e.reason == reason, f"error {what}: reason {reason or 'none'}", str(e))
            check(mention in e.message, f"error {what}: the message names {mention}", e.message)
            check(e.attempts == 1 and not e.retryable, f"error {what}: not retried", str(e.attempts))
    check(cl.retried == before, "refused requests were not retried")
    e = expect_error("beam_size 0", lambda: cl.translate(["x"], beam_size=0), grpc.StatusCode.INVALID_ARGUMENT,
                     "options.beam_size")
    check(e is not None and [f for f, _ in e.field_violations] == ["options.beam_size"],
          "beam_size 0: the field violation names options.beam_size", str(e and e.field_violations))
    try:
        cl.translate(["x"], beam=4)
        check(False, "an unknown option is a TypeError")
    except TypeError as e:
        check("'beam'" in str(e), "an unknown option is a TypeError naming it", str(e))


def slow_texts(pause):
    """Two texts with `pause` seconds between them."""
    yield "Das Haus ist rot."
    time.sleep(pause)
    yield "Ein Mann fährt Fahrrad."


def check_deadlines(cl, target):
    import grpc
    from tnmt_client import Client, TnmtError

    # The deadline each call passes to gRPC (recorded at the stub): unary calls the client's
    # timeout, streams none; timeout=None none; an explicit one that one.
    with Client(target, timeout=30) as c:
        tr, st = Recorder(c._translation.Translate), Recorder(c._translation.TranslateStream)
        c._translation.Translate, c._translation.TranslateStream = tr, st
        c.translate(["x"])
        c.translate(["x"], timeout=None)
        c.translate(["x"], timeout=5)
        list(c.translate_stream(["x"]))
        list(c.translate_stream(["x"], timeout=None))
        list(c.translate_stream(["x"], timeout=7))
        t = [k["timeout"] for k in tr.calls]
        check(len(t) == 3 and 29 < t[0] <= 30 and t[1] is None and 4 < t[2] <= 5,
              "deadline: a unary call passes the client's timeout, none for timeout=None, else its own", str(t))
        t = [k["timeout"] for k in st.calls]
        check(t == [None, None, 7], "deadline: a stream passes none by default and for timeout=None, else its own", str(t))
    with Client(target, timeout=30, stream_timeout=9) as c:
        st = Recorder(c._translation.TranslateStream)
        c._translation.TranslateStream = st
        list(c.translate_stream(["x"]))
        list(c.translate_stream(["x"], timeout=None))
        check([k["timeout"] for k in st.calls] == [9, None], "deadline: stream_timeout is a stream's default; None lifts it",
              str([k["timeout"] for k in st.calls]))
    # Real streams: one that outlives the client's unary timeout runs to its end; one with a
    # short explicit timeout ends DEADLINE_EXCEEDED.
    with Client(target, timeout=0.5) as c:
        try:
            got = dict(c.translate_stream(slow_texts(1.5), batch_size=1))
            check(sorted(got) == [0, 1], "deadline: a stream outlives the client's unary timeout", str(got))
        except TnmtError as e:
            check(False, "deadline: a stream outlives the client's unary timeout", str(e))
    expect_error("deadline: a stream's short timeout expires",
                 lambda: list(cl.translate_stream(slow_texts(3.0), batch_size=1, timeout=0.5)),
                 grpc.StatusCode.DEADLINE_EXCEEDED)


def check_tokens(target, jobs_token_file):
    """`token` goes with every call, `jobs_token` instead with the jobs calls."""
    from tnmt_client import Client, TnmtError

    with open(jobs_token_file) as f:
        jobs_token = f.read().strip()
    with Client(target, token="api-token", jobs_token_file=jobs_token_file) as c:
        tr, lj = Recorder(c._translation.Translate), Recorder(c._training.ListJobs)
        c._translation.Translate, c._training.ListJobs = tr, lj
        c.translate(["x"])
        try:
            list(c.list_jobs())
        except TnmtError as e:
            check(False, "jobs_token: the jobs calls are accepted", str(e))
        check(tr.calls[0]["metadata"] == (("authorization", "Bearer api-token"),),
              "token: sent with translation calls", str(tr.calls[0]["metadata"]))
        check(lj.calls[0]["metadata"] == (("authorization", f"Bearer {jobs_token}"),),
              "jobs_token: sent instead with the jobs calls", str(lj.calls[0]["metadata"]))
    with Client(target, token=jobs_token) as c:
        try:
            list(c.list_jobs())
            check(True, "token: sent with the jobs calls when there is no jobs_token")
        except TnmtError as e:
            check(False, "token: sent with the jobs calls when there is no jobs_token", str(e))


def check_jobs(jc, target, token_file):
    import grpc
    from tnmt_client import Client, training_pb2

    spec = {"name": "client", "data": {"train_source": "corpus/train.en", "train_target": "corpus/train.de"},
            "vocabulary": {"spm_model": "spm.model"}, "model": {"preset": "tiny"},
            "schedule": {"max_tokens": 256, "warmup_steps": 10, "save_every_steps": 50},
            "stop": {"max_steps": 100000}, "device": {"threads": 1}}
    job = jc.submit_job(spec)
    check(job.id.startswith("job-"), "submit_job: a job id", job.id)
    check(jc.get_job(job.id).name == "client", "get_job: the same job")
    check([j.id for j in jc.list_jobs()] == [job.id], "list_jobs: lists it")
    check(all(j.state in (training_pb2.JOB_STATE_QUEUED, training_pb2.JOB_STATE_RUNNING)
              for j in jc.list_jobs(states=["QUEUED", "RUNNING"])), "list_jobs by state name")
    first = next(iter(jc.watch_job(job.id)))
    check(first.kind == training_pb2.JobUpdate.KIND_SNAPSHOT and first.job.id == job.id, "watch_job: a snapshot first")
    expect_error("watch_job: a short timeout expires", lambda: list(jc.watch_job(job.id, timeout=0.5)),
                 grpc.StatusCode.DEADLINE_EXCEEDED)
    # A watch that outlives the client's unary timeout (0.5 s) runs until the job ends.
    updates, failures = [], []
    with Client(target, jobs_token_file=token_file, timeout=0.5) as short:
        def watch():
            try:
                updates.extend(short.watch_job(job.id))
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)
        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(1.5)
        cancelled = jc.cancel_job(job.id)
        check(cancelled.state in (training_pb2.JOB_STATE_CANCELLING, training_pb2.JOB_STATE_CANCELLED), "cancel_job: cancelling or cancelled", str(cancelled.state))
        watcher.join(60)
    check(not watcher.is_alive() and not failures and updates and updates[-1].job.state == training_pb2.JOB_STATE_CANCELLED,
          "watch_job: no deadline by default; it ends when the job does (CANCELLED)",
          f"{failures} {[training_pb2.JobState.Name(u.job.state) for u in updates]}")
    expect_error("get_job of an unknown id", lambda: jc.get_job("job-999999"), grpc.StatusCode.NOT_FOUND)
    expect_error("a spec outside the data root",
                 lambda: jc.submit_job({"name": "bad", "data": {"train_source": "../etc/passwd", "train_target": "corpus/train.de"},
                                        "stop": {"max_steps": 10}}), grpc.StatusCode.INVALID_ARGUMENT, "train_source")
    expect_error("a spec without stop.max_steps",
                 lambda: jc.submit_job({"name": "bad", "data": {"train_source": "corpus/train.en", "train_target": "corpus/train.de"}}),
                 grpc.StatusCode.INVALID_ARGUMENT, "stop.max_steps")
    try:
        jc.submit_job({"nmae": "typo"})
        check(False, "a dict that is not a JobSpec: refused")
    except Exception as e:  # json_format.ParseError
        check("nmae" in str(e), "a dict that is not a JobSpec: a parse error naming the field", str(e))
    for _ in range(300):
        if jc.get_job(job.id).state == training_pb2.JOB_STATE_CANCELLED:
            break
        time.sleep(0.1)
    check(jc.get_job(job.id).state == training_pb2.JOB_STATE_CANCELLED, "the cancelled job ends CANCELLED")


def check_readme_example(target, jobs_token_file, work):
    """The README's first Python example, run as written: only the server's address is replaced
    (it names localhost:50051); input.txt and jobs.token are in its working directory, and the
    server's data root holds train.en, train.de and spm.model."""
    blocks = readme_blocks("python")
    check(len(blocks) >= 1 and "localhost:50051" in blocks[0], "README: a Python example for localhost:50051")
    d = os.path.join(work, "readme")
    os.makedirs(d)
    with open(os.path.join(d, "example.py"), "w", encoding="utf-8") as f:
        f.write(blocks[0].replace("localhost:50051", target))
    with open(os.path.join(d, "input.txt"), "w", encoding="utf-8") as f:
        f.write("Das Haus ist rot.\nZwei Hunde spielen.\n")
    shutil.copyfile(jobs_token_file, os.path.join(d, "jobs.token"))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "example.py"], cwd=d, capture_output=True, text=True, timeout=600)
    out = r.stdout.splitlines()
    check(r.returncode == 0, "README: the example runs", r.stdout[-2000:] + r.stderr[-3000:])
    check(any(l.startswith("StatusCode.INVALID_ARGUMENT") and "options.beam_size" in l for l in out),
          "README: its error example prints the code and the field", r.stdout[-2000:])
    check(bool(out) and out[-1].endswith("JOB_STATE_SUCCEEDED"), "README: its job trains and succeeds",
          r.stdout[-2000:])
    print(f"      README example: {time.monotonic() - t0:.0f} s")


def check_retries(tnmt, model, work):
    from tnmt_client import Client, TnmtError
    import grpc

    # Retries on UNAVAILABLE: a server that starts 2 s after the first call is reached.
    port2 = free_port()
    late, _ = start_server(tnmt, ["--model", f"tiny={model}"], work, "late", port=port2, delay=2.0)
    try:
        with Client(f"127.0.0.1:{port2}", timeout=60, retries=50, backoff=0.2) as cl:
            r = cl.translate(["Das Haus ist rot."])
            check(r[0].text != "" and cl.retried > 0, "UNAVAILABLE is retried until the server is up", f"{cl.retried} retries")
        # No server: the retries end at the deadline, each attempt given only what is left of it
        # (the attempts' deadlines as passed to gRPC), long before the retry count runs out.
        with Client(f"127.0.0.1:{free_port()}", timeout=1.5, retries=100, backoff=0.1) as cl:
            rec = Recorder(cl._translation.Translate)
            cl._translation.Translate = rec
            try:
                cl.translate(["x"])
                check(False, "no server: refused")
            except TnmtError as e:
                left = [k["timeout"] for k in rec.calls]
                check(e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and 1 < e.attempts < 101
                      and len(left) == e.attempts and left[0] <= 1.5 and all(b < a for a, b in zip(left, left[1:])) and left[-1] > 0,
                      "no server: retries stop at the deadline, each attempt within what is left of it", f"{e}, attempts' deadlines {left}")
    finally:
        stop(late)

    # Retries on a full queue: RESOURCE_EXHAUSTED with RetryInfo (QUEUE_FULL) is retried and every
    # call of 16 concurrent clients succeeds.
    busy, port3 = start_server(tnmt, ["--model", f"tiny={model}", "--max-queue", "2"], work, "busy")
    try:
        with Client(f"127.0.0.1:{port3}", timeout=120, retries=200, backoff=0.05) as cl:
            errors, done = [], []
            long_text = " ".join(["Das Haus ist rot und der Hund sieht den Mann."] * 3)

            def worker():
                try:
                    done.append(cl.translate([long_text, long_text], beam_size=8)[0].text)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=worker) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            check(not errors and len(done) == 16, "a full queue is retried: every call succeeds", str(errors[:2]))
            check(cl.retried > 0, "  some calls were retried", str(cl.retried))
    finally:
        stop(busy)


# -- TLS ------------------------------------------------------------------------------------

def make_certs(d):
    """With /usr/bin/openssl in d: a CA (ca.pem), a server certificate for 127.0.0.1 and
    localhost (server.pem, server.key) and a client certificate (client.pem, client.key) it signed."""
    def run(*args):
        subprocess.run(["/usr/bin/openssl", *args], check=True, cwd=d, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=tnmt client test CA")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")


def serve_flags(tnmt):
    return subprocess.run([tnmt, "serve", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout


class TlsTest(unittest.TestCase):
    """The client's TLS path: server certificate checked against tls_ca, the client certificate
    (mTLS), the token; refused without the client certificate, with the system's roots, and in
    plain text. Against a Python gRPC server always, against `tnmt serve` when it has TLS."""
    tnmt = model = work = ""

    @classmethod
    def setUpClass(cls):
        cls.certs = os.path.join(cls.work, "certs")
        os.makedirs(cls.certs, exist_ok=True)
        make_certs(cls.certs)
        cls.flags = serve_flags(cls.tnmt)

    def pem(self, name):
        return os.path.join(self.certs, name)

    def check_tls_server(self, target, token=None):
        import grpc
        from tnmt_client import Client, TnmtError

        ca, cert, key = self.pem("ca.pem"), self.pem("client.pem"), self.pem("client.key")
        with Client(target, tls_ca=ca, tls_cert=cert, tls_key=key, token=token, timeout=20, retries=0) as c:
            self.assertTrue(c.translate(["Das Haus ist rot."])[0].text)
        with open(ca, "rb") as a, open(cert, "rb") as b, open(key, "rb") as k:
            pems = a.read(), b.read(), k.read()
        with Client(target, tls_ca=pems[0], tls_cert=pems[1], tls_key=pems[2], token=token, timeout=20, retries=0) as c:
            self.assertTrue(c.translate(["Das Haus ist rot."])[0].text, "PEM bytes")
        for what, kwargs in (("no client certificate", dict(tls_ca=ca)),
                             ("the system's roots", dict(tls=True, tls_cert=cert, tls_key=key)),
                             ("plain text", {})):
            with Client(target, timeout=20, retries=0, token=token, **kwargs) as c:
                with self.assertRaises(TnmtError, msg=what) as e:
                    c.translate(["x"])
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE, f"{what}: {e.exception}")

    def test_client_options(self):
        from tnmt_client import Client
        with self.assertRaisesRegex(ValueError, "tls_cert and tls_key"):
            Client("127.0.0.1:1", tls_cert=self.pem("client.pem"))
        with self.assertRaisesRegex(ValueError, "tls_ca: cannot read"):
            Client("127.0.0.1:1", tls_ca=self.pem("missing.pem"))

    def test_python_grpc_server(self):
        from concurrent import futures
        import grpc
        from tnmt_client import translation_pb2
        from tnmt_client._proto.tnmt.v1 import translation_pb2_grpc

        seen = []

        class Echo(translation_pb2_grpc.TranslationServiceServicer):
            def Translate(self, request, context):
                seen.append(dict(context.invocation_metadata()).get("authorization"))
                return translation_pb2.TranslateResponse(translations=[
                    translation_pb2.Translation(hypotheses=[translation_pb2.Hypothesis(text=t.decode()[::-1])])
                    for t in request.texts])

        with open(self.pem("server.key"), "rb") as k, open(self.pem("server.pem"), "rb") as c, \
                open(self.pem("ca.pem"), "rb") as a:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())], root_certificates=a.read(),
                                                require_client_auth=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        translation_pb2_grpc.add_TranslationServiceServicer_to_server(Echo(), server)
        port = server.add_secure_port("127.0.0.1:0", creds)
        server.start()
        try:
            self.check_tls_server(f"127.0.0.1:{port}", token="tls-token")
            self.assertEqual(seen, ["Bearer tls-token"] * 2, "the token reaches the server over TLS")
        finally:
            server.stop(None)

    def test_tnmt_serve(self):
        if "--tls-cert" not in self.flags:
            self.skipTest("tnmt serve --help lists no --tls-cert")
        args = ["--model", f"tiny={self.model}", "--tls-cert", self.pem("server.pem"), "--tls-key",
                self.pem("server.key"), "--tls-client-ca", self.pem("ca.pem")]
        server, port = start_server(self.tnmt, args, self.work, "tls")
        try:
            self.check_tls_server(f"127.0.0.1:{port}")
        finally:
            stop(server)

    def test_tnmt_serve_api_token(self):
        import grpc
        from tnmt_client import Client, TnmtError

        if "--api-token-file" not in self.flags:
            self.skipTest("tnmt serve --help lists no --api-token-file")
        token_file = os.path.join(self.work, "api.token")
        with open(token_file, "w") as f:
            f.write("client-test-api-token-0123456789\n")
        server, port = start_server(self.tnmt, ["--model", f"tiny={self.model}", "--api-token-file", token_file],
                                    self.work, "api-token")
        try:
            with Client(f"127.0.0.1:{port}", token_file=token_file, timeout=20) as c:
                self.assertTrue(c.translate(["Das Haus ist rot."])[0].text)
            for token in (None, "wrong-token-0123456789"):
                with Client(f"127.0.0.1:{port}", token=token, timeout=20) as c:
                    with self.assertRaises(TnmtError) as e:
                        c.translate(["x"])
                    self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, str(e.exception))
        finally:
            stop(server)


def run_tls_tests(tnmt, model, work):
    """Runs TlsTest; each test is one check; returns the skipped ones as (name, reason)."""
    TlsTest.tnmt, TlsTest.model, TlsTest.work = tnmt, model, os.path.abspath(work)
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(TlsTest)
    ids = [t.id() for t in suite]
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    failed = {t.id(): tb for t, tb in result.failures + result.errors}
    skipped = {t.id(): why for t, why in result.skipped}
    for i in ids:
        if i in failed:
            check(False, f"TLS: {i.split('.')[-1]}", failed[i])
        elif i not in skipped:
            check(True, f"TLS: {i.split('.')[-1]}")
    for i, why in skipped.items():
        print(f"SKIP  TLS: {i.split('.')[-1]}: {why}")
    for i in failed:  # setUpClass failing is reported under its own id
        if i not in ids:
            check(False, f"TLS: {i}", failed[i])
    check(result.testsRun > 0, "TLS: the tests ran")
    return [(i.split(".")[-1], why) for i, why in skipped.items()]


if __name__ == "__main__":
    sys.exit(main())

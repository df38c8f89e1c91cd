#!/usr/bin/env python3
"""The Python client (clients/python) against a real `tnmt serve`: pip-installs the package
from a copy of clients/python and proto/ (its stubs are generated there), starts a server with
the tiny model and the jobs service, and checks translate (= `tnmt translate` locally, with
options, prefixes, sampling seeds, token scores and alignments), translate_stream, score
(= `tnmt score`), list_models, the structured errors (code, ErrorInfo reason, no retry for
a refused request), retries (a server that starts late: UNAVAILABLE is retried until it is
up; a full queue: RESOURCE_EXHAUSTED with RetryInfo is retried and every call succeeds), the
deadline, the token, and the jobs API (submit with a made-up request id, get, list, watch,
cancel, refusals).

    python_client_test.py --tnmt TNMT --model DIR --work DIR
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "convert"))
from check_log import check, summary  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXTS = ["Das Haus ist rot.", "Zoë sieht den Hund!", "   ", "Ein Mann fährt Fahrrad."]


def install(work):
    """pip install clients/python into WORK/site from a copy laid out as in a checkout."""
    src = os.path.join(work, "src")
    shutil.copytree(os.path.join(REPO, "clients", "python"), os.path.join(src, "clients", "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "BUILD"))
    for sub in ("tnmt", "google"):
        shutil.copytree(os.path.join(REPO, "proto", sub), os.path.join(src, "proto", sub),
                        ignore=shutil.ignore_patterns("*.cc", "BUILD", "*.bzl"))
    site = os.path.join(work, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
                    "--no-build-isolation", "--no-deps", "--target", site, os.path.join(src, "clients", "python")],
                   check=True, cwd=work)
    sys.path.insert(0, site)


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
    a = ap.parse_args()
    tnmt, model, work = os.path.abspath(a.tnmt), os.path.abspath(a.model), a.work
    install(work)
    import grpc
    from tnmt_client import Client, TnmtError, training_pb2, translation_pb2

    # A server with the jobs service: a data root with a tiny corpus, a token.
    data = os.path.join(work, "data")
    os.makedirs(os.path.join(data, "corpus"))
    for side, words in (("en", "the a dog man runs sees house red"), ("de", "der ein Hund Mann läuft sieht Haus rot")):
        w = words.split()
        with open(os.path.join(data, "corpus", f"train.{side}"), "w") as f:
            for i in range(60):
                f.write(" ".join(w[(i + j) % len(w)] for j in range(5)) + "\n")
    shutil.copyfile(os.path.join(model, "spm.model"), os.path.join(data, "spm.model"))
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write("client-test-token-0123456789abcdef\n")
    server, port = start_server(tnmt, ["--model", f"tiny={model}", "--state-dir", os.path.join(work, "state"),
                                       "--data-root", data, "--jobs-token-file", token_file], work, "main")
    target = f"127.0.0.1:{port}"
    try:
        with Client(target, timeout=60) as cl:
            # translate = local translation, line for line (a blank text stays blank).
            got = cl.translate(TEXTS, beam_size=4, return_scores=True)
            want = local_translate(tnmt, model, work, TEXTS, "--beam-size", "4", "--scores")
            check(len(got) == len(TEXTS), "translate: one Translation per text")
            check([f"{t.hypotheses[0].score:.6f} ||| {t.text}" for t in got] == want, "translate: texts and scores equal tnmt translate's", f"{got} vs {want}")
            check(got[2].text == "" and got[2].source_tokens == 0, "translate: a blank text gets an empty hypothesis")
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
            try:
                cl.translate(["x", "\ud800"])
            except UnicodeEncodeError:
                pass  # a lone surrogate cannot even be sent
            try:
                cl.translate(["x"], beam_size=0)
            except TnmtError as e:
                check(e.field_violations and e.field_violations[0][0] == "options.beam_size",
                      "INVALID_ARGUMENT: the field violation names options.beam_size", str(e.field_violations))
            try:
                cl.translate(["x"], beam=4)
                check(False, "an unknown option is a TypeError")
            except TypeError as e:
                check("'beam'" in str(e), "an unknown option is a TypeError naming it", str(e))

            # Jobs: the token is required; submit (made-up request id), get, list, watch, cancel.
            try:
                list(cl.list_jobs())
                check(False, "jobs without the token: refused")
            except TnmtError as e:
                check(e.code == grpc.StatusCode.UNAUTHENTICATED, "jobs without the token: UNAUTHENTICATED", str(e))
        with Client(target, token_file=token_file, timeout=60) as jc:
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
            cancelled = jc.cancel_job(job.id)
            check(cancelled.state in (training_pb2.JOB_STATE_CANCELLING, training_pb2.JOB_STATE_CANCELLED), "cancel_job: cancelling or cancelled", str(cancelled.state))
            try:
                jc.get_job("job-999999")
                check(False, "get_job of an unknown id: refused")
            except TnmtError as e:
                check(e.code == grpc.StatusCode.NOT_FOUND, "get_job of an unknown id: NOT_FOUND", str(e))
            try:
                jc.submit_job({"name": "bad", "data": {"train_source": "../etc/passwd", "train_target": "corpus/train.de"}})
                check(False, "a spec outside the data root: refused")
            except TnmtError as e:
                check(e.code == grpc.StatusCode.INVALID_ARGUMENT, "a spec outside the data root: INVALID_ARGUMENT", str(e))
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
    finally:
        stop(server)

    # Retries on UNAVAILABLE: a server that starts 2 s after the first call is reached.
    port2 = free_port()
    late, _ = start_server(tnmt, ["--model", f"tiny={model}"], work, "late", port=port2, delay=2.0)
    try:
        with Client(f"127.0.0.1:{port2}", timeout=60, retries=50, backoff=0.2) as cl:
            t0 = time.monotonic()
            r = cl.translate(["Das Haus ist rot."])
            check(r[0].text != "" and cl.retried > 0, "UNAVAILABLE is retried until the server is up", f"{cl.retried} retries, {time.monotonic() - t0:.1f} s")
        with Client(f"127.0.0.1:{free_port()}", timeout=1.5, retries=100, backoff=0.1) as cl:
            t0 = time.monotonic()
            try:
                cl.translate(["x"])
                check(False, "no server: refused")
            except TnmtError as e:
                took = time.monotonic() - t0
                check(took < 3.0 and e.attempts > 1, "no server: retries stop at the deadline", f"{took:.1f} s, {e}")
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
    return summary("python_client_test")


if __name__ == "__main__":
    sys.exit(main())

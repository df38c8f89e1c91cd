"""Client: the translation service (translate, translate_stream, score, list_models) and the
training-jobs service of a running `tnmt serve`, with deadlines, retries that honour the
server's RetryInfo, TLS and the jobs token."""

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import json_format

from tnmt_client._proto.tnmt.v1 import training_pb2, training_pb2_grpc, translation_pb2, translation_pb2_grpc
from tnmt_client.errors import TnmtError, from_rpc_error

# DecodingOptions fields a call may set by keyword (the proto's names).
DECODING_OPTIONS = tuple(f.name for f in translation_pb2.DecodingOptions.DESCRIPTOR.fields)


@dataclass
class Hypothesis:
    text: str
    score: float = 0.0                 # length-normalised log-probability (with return_scores)
    tokens: int = 0                    # pieces generated, </s> excluded
    pieces: List[str] = field(default_factory=list)          # with return_token_scores/alignments
    token_scores: List[float] = field(default_factory=list)  # per piece, then </s>
    alignments: List[int] = field(default_factory=list)      # per piece: an index in source_pieces


@dataclass
class Translation:
    hypotheses: List[Hypothesis]       # best first; at least one
    source_tokens: int = 0             # source pieces, </s> excluded
    source_pieces: List[str] = field(default_factory=list)   # with return_alignments
    seed: int = 0                      # with sampling: the seed used (send it to reproduce)

    @property
    def text(self) -> str:
        """The best hypothesis' text."""
        return self.hypotheses[0].text


@dataclass
class PairScore:
    score: float                       # sum of the token log-probabilities, </s> included
    target_tokens: int = 0            # target pieces scored, </s> included
    token_scores: List[float] = field(default_factory=list)


def _translation(t: "translation_pb2.Translation", seed: int) -> Translation:
    return Translation(
        hypotheses=[Hypothesis(h.text, h.score, h.tokens, list(h.pieces), list(h.token_scores), list(h.alignments))
                    for h in t.hypotheses],
        source_tokens=t.source_tokens, source_pieces=list(t.source_pieces), seed=seed)


def decoding_options(**options: Any) -> "translation_pb2.DecodingOptions":
    """DecodingOptions from keywords (beam_size=4, return_scores=True, sampling_topk=0, ...); an
    unknown name is a TypeError naming it, a value of the wrong type a TypeError too."""
    o = translation_pb2.DecodingOptions()
    for name, value in options.items():
        if name not in DECODING_OPTIONS:
            raise TypeError(f"unknown decoding option {name!r} (known: {', '.join(DECODING_OPTIONS)})")
        if value is None:
            continue
        try:
            setattr(o, name, value)
        except (TypeError, ValueError) as e:
            raise TypeError(f"decoding option {name}: {e}") from None
    return o


class Client:
    """A connection to `tnmt serve` at `target` ("host:port").

    timeout:   default deadline of each call in seconds, retries included (None: no deadline)
    retries:   how many times a call is retried after UNAVAILABLE or an error carrying
               RetryInfo (queue full, deadline unreachable); waits RetryInfo's delay, else an
               exponential backoff from `backoff` seconds (with jitter), never past the deadline.
               Streams (translate_stream, watch_job) are not retried.
    tls:       use TLS; root_certificates (PEM bytes) to trust instead of the system's,
               private_key/certificate_chain for client certificates
    token:     the training-jobs API token (sent as "authorization: Bearer TOKEN"); token_file
               reads it from a file
    """

    def __init__(self, target: str, *, timeout: Optional[float] = 60.0, retries: int = 4, backoff: float = 0.1,
                 tls: bool = False, root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
                 certificate_chain: Optional[bytes] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, channel_options: Sequence[Tuple[str, Any]] = ()):
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        options = [("grpc.max_receive_message_length", 64 << 20)] + list(channel_options)
        if tls:
            creds = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._translation = translation_pb2_grpc.TranslationServiceStub(self._channel)
        self._training = training_pb2_grpc.TrainingServiceStub(self._channel)
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._lock = threading.Lock()
        self.retried = 0  # calls retried so far (all methods), for monitoring

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- translation ---------------------------------------------------------------------

    def translate(self, texts: Sequence[str], *, model: str = "", target_prefixes: Optional[Sequence[str]] = None,
                  timeout: Optional[float] = None, **options: Any) -> List[Translation]:
        """Translates `texts` (one Translation each, in order). Keyword options are
        DecodingOptions fields: beam_size, n_best, length_penalty, length_penalty_style,
        max_length, min_length, return_scores, no_repeat_ngram_size, repetition_penalty,
        disable_unk, sampling_topk, sampling_topp, sampling_temperature, seed,
        return_token_scores, return_alignments, alignment_layer."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        req = translation_pb2.TranslateRequest(model=model, options=decoding_options(**options))
        req.texts.extend(t.encode("utf-8") for t in texts)
        if target_prefixes is not None:
            req.target_prefixes.extend(p.encode("utf-8") for p in target_prefixes)
        resp = self._call(self._translation.Translate, req, timeout)
        return [_translation(t, resp.seed) for t in resp.translations]

    def translate_stream(self, texts: Iterable[str], *, model: str = "", batch_size: int = 16,
                         timeout: Optional[float] = None, **options: Any) -> Iterator[Tuple[int, Translation]]:
        """Translates an iterable of texts over one TranslateStream, sending them in messages of
        `batch_size` texts as they are read; yields (index in `texts`, Translation) as each text
        finishes, in completion order. Options as translate's."""
        opts = decoding_options(**options)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")

        def requests() -> Iterator["translation_pb2.TranslateStreamRequest"]:
            batch: List[bytes] = []
            msg_id = 0
            for t in texts:
                batch.append(t.encode("utf-8"))
                if len(batch) == batch_size:
                    yield translation_pb2.TranslateStreamRequest(model=model, options=opts, texts=batch, id=msg_id)
                    msg_id += 1
                    batch = []
            if batch:
                yield translation_pb2.TranslateStreamRequest(model=model, options=opts, texts=batch, id=msg_id)

        call = self._translation.TranslateStream(requests(), timeout=self._deadline(timeout), metadata=self._metadata)
        try:
            for r in call:
                yield r.id * batch_size + r.index, _translation(r.translation, r.seed)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def score(self, sources: Sequence[str], targets: Sequence[str], *, model: str = "",
              return_token_scores: bool = False, timeout: Optional[float] = None) -> List[PairScore]:
        """The log-probability of each target given its source (forced decoding)."""
        if isinstance(sources, str) or isinstance(targets, str):
            raise TypeError("sources and targets must be sequences of strings")
        req = translation_pb2.ScoreRequest(model=model, return_token_scores=return_token_scores)
        req.sources.extend(s.encode("utf-8") for s in sources)
        req.targets.extend(t.encode("utf-8") for t in targets)
        resp = self._call(self._translation.Score, req, timeout)
        return [PairScore(s.score, s.target_tokens, list(s.token_scores)) for s in resp.scores]

    def list_models(self, *, timeout: Optional[float] = None) -> List["translation_pb2.ModelInfo"]:
        """The server's models (name, state, languages, ...), as tnmt.v1.ModelInfo messages,
        every page of them."""
        models: List["translation_pb2.ModelInfo"] = []
        req = translation_pb2.ListModelsRequest(page_size=1000)
        while True:
            resp = self._call(self._translation.ListModels, req, timeout)
            models.extend(resp.models)
            if not resp.next_page_token:
                return models
            req.page_token = resp.next_page_token

    # -- training jobs -------------------------------------------------------------------

    def submit_job(self, spec: Union[Dict[str, Any], "training_pb2.JobSpec"], *, request_id: str = "",
                   timeout: Optional[float] = None) -> "training_pb2.Job":
        """Submits a training job: `spec` is a tnmt.v1.JobSpec or a dict in its proto3 JSON form
        ({"data": {"train_source": ...}, "model": {...}, ...}). A request_id is made up when
        none is given, so that a retried submission never creates a second job."""
        if isinstance(spec, dict):
            spec = json_format.ParseDict(spec, training_pb2.JobSpec())
        req = training_pb2.SubmitJobRequest(spec=spec, request_id=request_id or f"py-{uuid.uuid4()}")
        return self._call(self._training.SubmitJob, req, timeout)

    def get_job(self, job_id: str, *, timeout: Optional[float] = None) -> "training_pb2.Job":
        return self._call(self._training.GetJob, training_pb2.GetJobRequest(id=job_id), timeout)

    def list_jobs(self, *, states: Sequence[Union[int, str]] = (), name_contains: str = "", page_size: int = 0,
                  timeout: Optional[float] = None) -> Iterator["training_pb2.Job"]:
        """Every job matching the filters, newest first, fetching pages as needed. States are
        tnmt.v1.JobState values or names ("RUNNING" or "JOB_STATE_RUNNING")."""
        values = [training_pb2.JobState.Value(s if s.upper().startswith("JOB_STATE_") else "JOB_STATE_" + s.upper())
                  if isinstance(s, str) else s for s in states]
        token = ""
        while True:
            req = training_pb2.ListJobsRequest(states=values, name_contains=name_contains, page_size=page_size,
                                               page_token=token)
            resp = self._call(self._training.ListJobs, req, timeout)
            yield from resp.jobs
            token = resp.next_page_token
            if not token:
                return

    def cancel_job(self, job_id: str, *, timeout: Optional[float] = None) -> "training_pb2.Job":
        return self._call(self._training.CancelJob, training_pb2.CancelJobRequest(id=job_id), timeout)

    def watch_job(self, job_id: str, *, timeout: Optional[float] = None) -> Iterator["training_pb2.JobUpdate"]:
        """The job's updates: a snapshot first, then one per change, until the job ends."""
        call = self._training.WatchJob(training_pb2.WatchJobRequest(id=job_id), timeout=self._deadline(timeout),
                                       metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # -- calls ---------------------------------------------------------------------------

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else timeout

    def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        budget = self._deadline(timeout)
        end = None if budget is None else time.monotonic() + budget
        attempt = 0
        while True:
            attempt += 1
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise TnmtError(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline of {budget} s exceeded", attempts=attempt - 1)
            try:
                return method(request, timeout=left, metadata=self._metadata)
            except grpc.RpcError as e:
                err = from_rpc_error(e, attempt)
                if not err.retryable or attempt > self._retries:
                    raise err from None
                delay = err.retry_delay if err.retry_delay is not None else self._backoff * (2 ** (attempt - 1))
                delay *= random.uniform(0.8, 1.2)
                if end is not None and time.monotonic() + delay >= end:
                    raise err from None  # no time left to wait: the server's answer stands
                with self._lock:
                    self.retried += 1
                time.sleep(delay)

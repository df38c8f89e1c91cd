"""Client: the translation service (translate, translate_stream, score, list_models) and the
training-jobs service of a running `tnmt serve`, with deadlines, retries that honour the
server's RetryInfo, TLS and bearer tokens."""

import enum
import os
import random
import threading
import time
import uuid
from collections import abc
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
    score: Optional[float] = None      # length-normalised log-probability; None without return_scores
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


def _translation(t: "translation_pb2.Translation", seed: int, scored: bool) -> Translation:
    return Translation(
        hypotheses=[Hypothesis(h.text, h.score if scored else None, h.tokens, list(h.pieces), list(h.token_scores),
                               list(h.alignments))
                    for h in t.hypotheses],
        source_tokens=t.source_tokens, source_pieces=list(t.source_pieces), seed=seed)


class Default(enum.Enum):
    """The `timeout` of a call left to the client: Client(timeout=...) for a unary call,
    Client(stream_timeout=...) for a stream."""
    TIMEOUT = "the client's default"


DEFAULT = Default.TIMEOUT
# A call's deadline in seconds: a number, None (no deadline) or DEFAULT (the client's).
Timeout = Union[float, None, Default]


def _encode(text: object, name: str) -> bytes:
    """`text` as UTF-8 bytes; a ValueError naming `name` (texts[3], ...) when it has none (a lone
    surrogate), a TypeError when it is not a str."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, not {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} cannot be encoded as UTF-8: {e.reason} {text[e.start:e.end]!r} at character "
                         f"{e.start}") from None


def _read_pem(value: Union[str, bytes, "os.PathLike[str]", None], name: str) -> Optional[bytes]:
    """PEM bytes as given, or read from a path."""
    if value is None or isinstance(value, bytes):
        return value
    try:
        with open(value, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{name}: cannot read {value}: {e.strerror}") from None


def _read_token(token: Optional[str], token_file: Optional[str], name: str) -> Optional[str]:
    if token is not None and token_file is not None:
        raise ValueError(f"give {name} or {name}_file, not both")
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
    return token or None


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

    timeout:         deadline of each unary call in seconds, retries included (None: no deadline)
    stream_timeout:  deadline of each stream (translate_stream, watch_job) in seconds; None (the
                     default): no deadline, a stream lasts as long as its texts or its job
    retries:         how many times a unary call is retried after UNAVAILABLE or an error carrying
                     RetryInfo (queue full, deadline unreachable); waits RetryInfo's delay, else an
                     exponential backoff from `backoff` seconds (with jitter), never past the
                     deadline. Streams are not retried.
    tls:             use TLS, trusting the system's root certificates (implied by tls_ca, tls_cert)
    tls_ca:          root certificates to trust instead (PEM bytes, or the path of a PEM file)
    tls_cert, tls_key: the client certificate chain and its private key (PEM bytes or paths), for
                     a server that requires client certificates (`tnmt serve --tls-client-ca`)
    token:           bearer token sent with every call as "authorization: Bearer TOKEN" (the
                     translation API's, `tnmt serve --api-token-file`); token_file reads it
    jobs_token:      the training-jobs API's token (`tnmt serve --jobs-token-file`), sent instead
                     of `token` with the jobs calls; jobs_token_file reads it
    channel_options: extra gRPC channel arguments, e.g. [("grpc.ssl_target_name_override", "host")]

    Every method's `timeout` overrides the client's for that call; None means no deadline.
    """

    def __init__(self, target: str, *, timeout: Optional[float] = 60.0, stream_timeout: Optional[float] = None,
                 retries: int = 4, backoff: float = 0.1, tls: bool = False,
                 tls_ca: Union[str, bytes, "os.PathLike[str]", None] = None,
                 tls_cert: Union[str, bytes, "os.PathLike[str]", None] = None,
                 tls_key: Union[str, bytes, "os.PathLike[str]", None] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None,
                 jobs_token: Optional[str] = None, jobs_token_file: Optional[str] = None,
                 channel_options: Sequence[Tuple[str, Any]] = ()):
        token = _read_token(token, token_file, "token")
        jobs_token = _read_token(jobs_token, jobs_token_file, "jobs_token") or token
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("give tls_cert and tls_key together (the client certificate and its key)")
        options = [("grpc.max_receive_message_length", 64 << 20)] + list(channel_options)
        if tls or tls_ca is not None or tls_cert is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=_read_pem(tls_ca, "tls_ca"),
                                                 private_key=_read_pem(tls_key, "tls_key"),
                                                 certificate_chain=_read_pem(tls_cert, "tls_cert"))
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        # The generated stubs have no type hints.
        self._translation = translation_pb2_grpc.TranslationServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._training = training_pb2_grpc.TrainingServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._timeout = timeout
        self._stream_timeout = stream_timeout
        self._retries = retries
        self._backoff = backoff
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._jobs_metadata: Tuple[Tuple[str, str], ...] = \
            (("authorization", f"Bearer {jobs_token}"),) if jobs_token else ()
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
                  timeout: Timeout = DEFAULT, **options: Any) -> List[Translation]:
        """Translates `texts` (one Translation each, in order). Keyword options are
        DecodingOptions fields: beam_size, n_best, length_penalty, length_penalty_style,
        max_length, min_length, return_scores, no_repeat_ngram_size, repetition_penalty,
        disable_unk, sampling_topk, sampling_topp, sampling_temperature, seed,
        return_token_scores, return_alignments, alignment_layer. A text or prefix that is not
        valid Unicode (a lone surrogate) is a ValueError naming it, raised before anything is sent."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        opts = decoding_options(**options)
        req = translation_pb2.TranslateRequest(model=model, options=opts)
        req.texts.extend(_encode(t, f"texts[{i}]") for i, t in enumerate(texts))
        if target_prefixes is not None:
            if isinstance(target_prefixes, str):
                raise TypeError("target_prefixes must be a sequence of strings, not one string")
            req.target_prefixes.extend(_encode(p, f"target_prefixes[{i}]") for i, p in enumerate(target_prefixes))
        resp = self._call(self._translation.Translate, req, timeout, self._metadata)
        return [_translation(t, resp.seed, opts.return_scores) for t in resp.translations]

    def translate_stream(self, texts: Iterable[str], *, model: str = "",
                         target_prefixes: Optional[Iterable[str]] = None, batch_size: int = 16,
                         timeout: Timeout = DEFAULT, **options: Any) -> Iterator[Tuple[int, Translation]]:
        """Translates an iterable of texts over one TranslateStream, sending them in messages of
        `batch_size` texts as they are read; yields (index in `texts`, Translation) as each text
        finishes, in completion order. target_prefixes: one per text (an empty string: none).
        Options as translate's. A text or prefix that is not valid Unicode is a ValueError
        naming its index: a sequence is checked before the stream starts, an iterator as it is
        read (nothing from that text on is sent, and the stream ends with the error). The
        stream's deadline is the client's stream_timeout (None: none) unless `timeout` is given."""
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of strings, not one string")
        if isinstance(target_prefixes, str):
            raise TypeError("target_prefixes must be an iterable of strings, not one string")
        opts = decoding_options(**options)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # Sequences are checked whole before the stream starts; iterators as they are read.
        if isinstance(texts, abc.Sequence):
            for i, t in enumerate(texts):
                _encode(t, f"texts[{i}]")
        if isinstance(target_prefixes, abc.Sequence):
            for i, p in enumerate(target_prefixes):
                _encode(p, f"target_prefixes[{i}]")
            if isinstance(texts, abc.Sequence) and len(target_prefixes) != len(texts):
                raise ValueError(f"{len(target_prefixes)} target_prefixes for {len(texts)} texts")
        refused: List[Exception] = []  # a text found invalid while the stream ran

        def requests() -> Iterator["translation_pb2.TranslateStreamRequest"]:
            batch: List[bytes] = []
            prefixes: List[bytes] = []
            msg_id = 0
            text_iter = iter(texts)
            prefix_iter = None if target_prefixes is None else iter(target_prefixes)
            try:
                for i, t in enumerate(text_iter):
                    batch.append(_encode(t, f"texts[{i}]"))
                    if prefix_iter is not None:
                        p = next(prefix_iter, None)
                        if p is None:
                            raise ValueError(f"fewer target_prefixes than texts (none for texts[{i}])")
                        prefixes.append(_encode(p, f"target_prefixes[{i}]"))
                    if len(batch) == batch_size:
                        yield translation_pb2.TranslateStreamRequest(model=model, options=opts, texts=batch,
                                                                     target_prefixes=prefixes, id=msg_id)
                        msg_id += 1
                        batch, prefixes = [], []
                if prefix_iter is not None and next(prefix_iter, None) is not None:
                    raise ValueError("more target_prefixes than texts")
            except (TypeError, ValueError) as e:
                refused.append(e)
                return  # half-closes the stream; the caller's iteration raises the error
            if batch:
                yield translation_pb2.TranslateStreamRequest(model=model, options=opts, texts=batch,
                                                             target_prefixes=prefixes, id=msg_id)

        call = self._translation.TranslateStream(requests(), timeout=self._stream_deadline(timeout),
                                                 metadata=self._metadata)
        try:
            for r in call:
                if refused:
                    break
                yield r.id * batch_size + r.index, _translation(r.translation, r.seed, opts.return_scores)
        except grpc.RpcError as e:
            if refused:
                raise refused[0] from None
            raise from_rpc_error(e) from None
        finally:
            call.cancel()  # a no-op once the stream has ended; stops it when the caller stops early
        if refused:
            raise refused[0]

    def score(self, sources: Sequence[str], targets: Sequence[str], *, model: str = "",
              return_token_scores: bool = False, timeout: Timeout = DEFAULT) -> List[PairScore]:
        """The log-probability of each target given its source (forced decoding)."""
        if isinstance(sources, str) or isinstance(targets, str):
            raise TypeError("sources and targets must be sequences of strings")
        req = translation_pb2.ScoreRequest(model=model, return_token_scores=return_token_scores)
        req.sources.extend(_encode(s, f"sources[{i}]") for i, s in enumerate(sources))
        req.targets.extend(_encode(t, f"targets[{i}]") for i, t in enumerate(targets))
        resp = self._call(self._translation.Score, req, timeout, self._metadata)
        return [PairScore(s.score, s.target_tokens, list(s.token_scores)) for s in resp.scores]

    def list_models(self, *, timeout: Timeout = DEFAULT) -> List["translation_pb2.ModelInfo"]:
        """The server's models (name, state, languages, ...), as tnmt.v1.ModelInfo messages,
        every page of them."""
        models: List["translation_pb2.ModelInfo"] = []
        req = translation_pb2.ListModelsRequest(page_size=1000)
        while True:
            resp = self._call(self._translation.ListModels, req, timeout, self._metadata)
            models.extend(resp.models)
            if not resp.next_page_token:
                return models
            req.page_token = resp.next_page_token

    # -- training jobs -------------------------------------------------------------------

    def submit_job(self, spec: Union[Dict[str, Any], "training_pb2.JobSpec"], *, request_id: str = "",
                   timeout: Timeout = DEFAULT) -> "training_pb2.Job":
        """Submits a training job: `spec` is a tnmt.v1.JobSpec or a dict in its proto3 JSON form
        ({"data": {"train_source": ...}, "stop": {"max_steps": ...}, ...}). A request_id is made
        up when none is given, so that a retried submission never creates a second job."""
        if isinstance(spec, dict):
            spec = json_format.ParseDict(spec, training_pb2.JobSpec())
        req = training_pb2.SubmitJobRequest(spec=spec, request_id=request_id or f"py-{uuid.uuid4()}")
        job: training_pb2.Job = self._call(self._training.SubmitJob, req, timeout, self._jobs_metadata)
        return job

    def get_job(self, job_id: str, *, timeout: Timeout = DEFAULT) -> "training_pb2.Job":
        job: training_pb2.Job = self._call(self._training.GetJob, training_pb2.GetJobRequest(id=job_id), timeout,
                                           self._jobs_metadata)
        return job

    def list_jobs(self, *, states: Sequence[Union[int, str]] = (), name_contains: str = "", page_size: int = 0,
                  timeout: Timeout = DEFAULT) -> Iterator["training_pb2.Job"]:
        """Every job matching the filters, newest first, fetching pages as needed. States are
        tnmt.v1.JobState values or names ("RUNNING" or "JOB_STATE_RUNNING")."""
        # An unknown name or number is a ValueError naming it.
        values = [training_pb2.JobState.Value(s if s.upper().startswith("JOB_STATE_") else "JOB_STATE_" + s.upper())
                  if isinstance(s, str) else training_pb2.JobState.Value(training_pb2.JobState.Name(s))
                  for s in states]
        token = ""
        while True:
            # (the stubs type enum fields as JobState; the int values are what protobuf stores)
            req = training_pb2.ListJobsRequest(states=values, name_contains=name_contains,  # type: ignore[arg-type]
                                               page_size=page_size, page_token=token)
            resp = self._call(self._training.ListJobs, req, timeout, self._jobs_metadata)
            yield from resp.jobs
            token = resp.next_page_token
            if not token:
                return

    def cancel_job(self, job_id: str, *, timeout: Timeout = DEFAULT) -> "training_pb2.Job":
        job: training_pb2.Job = self._call(self._training.CancelJob, training_pb2.CancelJobRequest(id=job_id),
                                           timeout, self._jobs_metadata)
        return job

    def watch_job(self, job_id: str, *, timeout: Timeout = DEFAULT) -> Iterator["training_pb2.JobUpdate"]:
        """The job's updates: a snapshot first, then one per change, until the job ends. The
        stream's deadline is the client's stream_timeout (None: none) unless `timeout` is given."""
        call = self._training.WatchJob(training_pb2.WatchJobRequest(id=job_id),
                                       timeout=self._stream_deadline(timeout), metadata=self._jobs_metadata)
        try:
            yield from call
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()

    # -- calls ---------------------------------------------------------------------------

    def _deadline(self, timeout: Timeout) -> Optional[float]:
        return self._timeout if isinstance(timeout, Default) else timeout

    def _stream_deadline(self, timeout: Timeout) -> Optional[float]:
        return self._stream_timeout if isinstance(timeout, Default) else timeout

    def _call(self, method: Callable[..., Any], request: Any, timeout: Timeout,
              metadata: Tuple[Tuple[str, str], ...]) -> Any:
        budget = self._deadline(timeout)
        end = None if budget is None else time.monotonic() + budget
        attempt = 0
        while True:
            attempt += 1
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise TnmtError(grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline of {budget} s exceeded", attempts=attempt - 1)
            try:
                return method(request, timeout=left, metadata=metadata)
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

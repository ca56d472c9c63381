"""OpenAI-compatible chat-completions backend (vLLM, SGLang, llama.cpp server, hosted APIs).

The deployment path of DESIGN §2. A batch fans out over a thread pool (servers like vLLM batch
concurrent requests continuously); each request is retried by the ``openai`` client itself
(connection errors, 408/409/429/5xx; exponential backoff with jitter; a server's ``Retry-After``
honoured), and a request that still fails becomes that item's error, not the batch's:
``"<code>: <what, where>"`` with the code (``connect``, ``timeout``, ``http_<status>``,
``empty``, ``api``) also in ``GenerationResult.code``. ``<think>...</think>`` blocks of
reasoning models are cut from replies before they are parsed.
:meth:`OpenAIBackend.health_check` lists the served models (or sends a one-token request) so a
dead endpoint or a wrong model name fails the handshake, not every query.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pfedma_flwr.agents.backends.base import (
    Backend,
    BackendUnavailableError,
    GenerationResult,
    Messages,
)

logger = logging.getLogger(__name__)

JSON_MODES: tuple[str, ...] = ("json_schema", "json_object_schema", "json_object", "none")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_think(text: str) -> str:
    """``text`` without the reasoning blocks of a reasoning model.

    Cut: each ``<think>...</think>``; then anything up to a last ``</think>`` whose
    ``<think>`` the chat template itself sent (Qwen3, DeepSeek-R1); then an unclosed leading
    ``<think>`` (reasoning cut off by ``max_tokens``: no answer in the reply at all). A reply
    without the tags is returned unchanged.
    """
    if "<think>" not in text and "</think>" not in text:
        return text
    out = _THINK.sub("", text)
    if "</think>" in out:
        out = out.rsplit("</think>", 1)[1]
    return "" if out.lstrip().startswith("<think>") else out.strip()


def response_format(mode: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``response_format`` request field for a JSON mode, or ``None``.

    ``json_schema``: OpenAI/vLLM/SGLang style. ``json_object_schema``: llama.cpp server style
    (it rejects ``json_schema`` with HTTP 500; ``docs/models.md`` §4a). ``json_object``: plain
    JSON mode, the schema only in the prompt (DeepSeek's API documents only this one).
    """
    if schema is None or mode == "none":
        return None
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "agent_response", "schema": schema, "strict": False},
        }
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if mode == "json_object":
        return {"type": "json_object"}
    raise ValueError(f"json_mode must be one of {list(JSON_MODES)}, got {mode!r}")


class OpenAIBackend(Backend):
    """Chat completions over HTTP with the ``openai`` client.

    Parameters
    ----------
    base_url : str
        Endpoint, e.g. ``http://127.0.0.1:8000/v1``.
    model : str
        Model id sent with each request.
    api_key_env : str
        Name of the environment variable holding the key (never the key); unset -> "EMPTY".
    timeout : float
        Seconds per request.
    max_retries : int
        Retries per request after the first attempt, by the ``openai`` client (backoff from
        0.5 s doubling to 8 s with jitter, or the server's ``Retry-After`` up to 2 min).
    concurrency : int
        Parallel requests per batch.
    json_mode : {"json_schema", "json_object_schema", "json_object", "none", "auto"}
        How a JSON schema is requested (:func:`response_format`); ``auto`` = ``json_schema``.
    extra_body : dict or None
        Extra JSON fields of every chat request, passed through as they are (e.g.
        ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM/SGLang, ``top_k``).
    strip_think : bool
        Cut ``<think>...</think>`` reasoning from replies (:func:`strip_think`).
    backoff : float or None
        Ignored (kept so existing callers keep working): the client's own backoff applies.
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 3,
        concurrency: int = 8,
        json_mode: str = "auto",
        extra_body: Mapping[str, Any] | None = None,
        strip_think: bool = True,
        backoff: float | None = None,
    ) -> None:
        super().__init__()
        if not base_url:
            raise ValueError(
                "base_url must be set for the openai backend (e.g. http://host:8000/v1)"
            )
        if not model:
            raise ValueError("model must be set for the openai backend")
        if timeout <= 0 or max_retries < 0 or concurrency < 1:
            raise ValueError(
                "need timeout > 0, max_retries >= 0, concurrency >= 1; got "
                f"{timeout}, {max_retries}, {concurrency}"
            )
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ValueError(f"extra_body must be a mapping of JSON fields, got "
                             f"{type(extra_body).__name__}")
        mode = "json_schema" if json_mode == "auto" else json_mode
        if mode not in JSON_MODES:
            raise ValueError(
                f"json_mode must be one of {list(JSON_MODES) + ['auto']}, got {json_mode!r}"
            )
        import openai  # imported here so the package imports without it

        self._openai = openai
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.model = model
        self.json_mode = mode
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.extra_body = _plain(extra_body or {})
        self.strip_think = strip_think
        # Requests sent per item: the client retries inside one call, and the count is what
        # an item's error reports ("after 3 attempt(s)"). One item per thread at a time.
        self._sent = threading.local()
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=os.environ.get(api_key_env) or "EMPTY",
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [self._count]}),
        )

    def _count(self, request: Any) -> None:
        self._sent.n = getattr(self._sent, "n", 0) + 1

    def _one(
        self,
        messages: Messages,
        max_tokens: int,
        temperature: float,
        schema: dict[str, Any] | None,
        seed: int | None,
    ) -> GenerationResult:
        kwargs: dict[str, Any] = {}
        fmt = response_format(self.json_mode, schema)
        if fmt is not None:
            kwargs["response_format"] = fmt
        if seed is not None:
            kwargs["seed"] = seed
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        last, code, sent = "", "api", 0
        # An answer without choices is not an HTTP error, so the client does not retry it.
        for _ in range(self.max_retries + 1):
            self._sent.n = 0
            try:
                r = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=temperature,
                    **kwargs,
                )
            except self._openai.APIStatusError as e:  # retried by the client where it heals
                last, code = f"HTTP {e.status_code}: {str(e)[:200]}", f"http_{e.status_code}"
                sent += self._sent.n
                break
            except self._openai.APIError as e:  # connection errors, timeouts (retried too)
                last, code = f"{type(e).__name__}: {str(e)[:200]}", _error_code(self._openai, e)
                sent += self._sent.n
                break
            sent += self._sent.n
            if not r.choices:
                last, code = "response has no choices", "empty"
                continue
            choice = r.choices[0]
            usage = r.usage
            text = choice.message.content or ""
            return GenerationResult(
                text=strip_think(text) if self.strip_think else text,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                finish_reason="length" if choice.finish_reason == "length" else "stop",
            )
        return GenerationResult.failure(
            f"{code}: {self.endpoint()} after {sent} attempt(s): {last}", code=code)

    def endpoint(self) -> str:
        """The endpoint and model, for messages (credentials in the URL are masked)."""
        return f"openai backend at {_safe_url(self.base_url)} (model {self.model!r})"

    def health_check(self, *, timeout: float = 10.0) -> None:
        """Check that the endpoint answers and serves :attr:`model`, within ``timeout`` seconds.

        ``GET /models`` first; a model it does not list (llama.cpp server lists its file name
        yet answers any model name) or an endpoint without the listing is tried with a
        one-token chat request, which decides.

        Raises
        ------
        BackendUnavailableError
            Naming the endpoint and model: unreachable or too slow, API key refused, or model
            not served (with the models it does list).
        """
        client = self._client.with_options(timeout=timeout, max_retries=0)
        served: list[str] | None = None
        try:
            served = [m.id for m in client.models.list()]
        except self._openai.APIConnectionError as e:  # timeouts included
            raise self._unavailable(self._no_answer(e, timeout), e) from e
        except self._openai.APIStatusError as e:
            if e.status_code in (401, 403):
                raise self._unavailable(
                    f"endpoint refused the API key from ${self.api_key_env}", e) from e
        except self._openai.APIError:
            served = None  # a listing it cannot parse: the request below decides
        if served is not None and self.model in served:
            return
        try:
            client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "ping"}],
                max_tokens=1, temperature=0.0)
        except self._openai.APIConnectionError as e:
            raise self._unavailable(self._no_answer(e, timeout), e) from e
        except self._openai.APIStatusError as e:
            if e.status_code in (401, 403):
                what = f"endpoint refused the API key from ${self.api_key_env}"
            elif e.status_code in (400, 404, 422):
                listed = f"; it lists {served[:10]}" if served else ""
                what = f"model {self.model!r} is not served{listed}"
            else:
                what = "endpoint fails requests"
            raise self._unavailable(what, e) from e
        except self._openai.APIError as e:
            raise self._unavailable("endpoint answers with something other than a chat "
                                    "completion", e) from e

    def _no_answer(self, e: Exception, timeout: float) -> str:
        """A timeout, or the connection's own failure (refused, no such host) as its cause."""
        if isinstance(e, self._openai.APITimeoutError):
            return f"endpoint does not answer within {timeout:g}s"
        cause = e.__cause__ or e.__context__
        return f"cannot connect to the endpoint ({cause or e})"

    def _unavailable(self, what: str, e: Exception) -> BackendUnavailableError:
        status = getattr(e, "status_code", None)
        detail = f"HTTP {status}" if status is not None else type(e).__name__
        return BackendUnavailableError(
            f"{self.endpoint()}: {what} ({detail}: {str(e)[:160]})")

    def _generate_batch(
        self,
        prompts: list[Messages],
        *,
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seed: int | None,
    ) -> list[GenerationResult]:
        seeds = [None if seed is None else seed + k for k in range(len(prompts))]
        return self._requests(prompts, seeds, max_tokens, temperature, json_schema)

    def _generate_seeded(
        self,
        prompts: list[Messages],
        *,
        seeds: list[int],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
    ) -> list[GenerationResult]:
        return self._requests(prompts, list(seeds), max_tokens, temperature, json_schema)

    def _requests(self, prompts: list[Messages], seeds: Sequence[int | None], max_tokens: int,
                  temperature: float, json_schema: dict[str, Any] | None,
                  ) -> list[GenerationResult]:
        if len(prompts) == 1 or self.concurrency == 1:
            return [
                self._one(p, max_tokens, temperature, json_schema, s)
                for p, s in zip(prompts, seeds, strict=True)
            ]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(
                pool.map(
                    lambda ps: self._one(ps[0], max_tokens, temperature, json_schema, ps[1]),
                    zip(prompts, seeds, strict=True),
                )
            )

    def cache_identity(self) -> dict[str, Any]:
        """Endpoint and model id (off unless ``cache: true``: a served model may change)."""
        return {"backend": "openai", "base_url": _safe_url(self.base_url), "model": self.model,
                "json_mode": self.json_mode, "extra_body": self.extra_body,
                "strip_think": self.strip_think}

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


def _plain(v: Any) -> Any:
    """``v`` as plain JSON containers (OmegaConf hands over its own; the client wants dicts)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, Sequence) and not isinstance(v, str | bytes):
        return [_plain(x) for x in v]
    return v


def _error_code(openai: Any, e: Exception) -> str:
    """Reason code of a non-HTTP-status client error."""
    if isinstance(e, openai.APITimeoutError):
        return "timeout"
    if isinstance(e, openai.APIConnectionError):
        return "connect"
    return "api"


def _safe_url(url: str) -> str:
    """``url`` for messages: ``user:password@`` masked, query dropped (either can hold a key)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rsplit("@", 1)[1]
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "<unparsable URL>"

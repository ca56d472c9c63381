"""OpenAI-compatible chat-completions backend (vLLM, SGLang, llama.cpp server, hosted APIs).

The deployment path of DESIGN §2. A batch fans out over a thread pool (servers like vLLM batch
concurrent requests continuously); each request retries with exponential backoff, and a request
that still fails becomes that item's error, not the batch's: ``"<code>: <what, where>"`` with
the code (``connect``, ``timeout``, ``http_<status>``, ``empty``, ``api``) also in
``GenerationResult.code``. :meth:`OpenAIBackend.health_check` lists the served models (or sends
a one-token request) so a dead endpoint or a wrong model name fails the handshake, not every
query.
"""

from __future__ import annotations

import logging
import os
import time
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

JSON_MODES: tuple[str, ...] = ("json_schema", "json_object_schema", "none")


def response_format(mode: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``response_format`` request field for a JSON mode, or ``None``.

    ``json_schema``: OpenAI/vLLM/SGLang style. ``json_object_schema``: llama.cpp server style
    (it rejects ``json_schema`` with HTTP 500; ``docs/models.md`` §4a).
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
        Retries per request after the first attempt (exponential backoff from ``backoff``).
    concurrency : int
        Parallel requests per batch.
    json_mode : {"json_schema", "json_object_schema", "none", "auto"}
        How a JSON schema is requested; ``auto`` = ``json_schema``.
    backoff : float
        First retry delay in seconds (doubles each retry).
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
        backoff: float = 0.5,
    ) -> None:
        super().__init__()
        if not base_url:
            raise ValueError(
                "base_url must be set for the openai backend (e.g. http://host:8000/v1)"
            )
        if not model:
            raise ValueError("model must be set for the openai backend")
        if timeout <= 0 or max_retries < 0 or concurrency < 1 or backoff < 0:
            raise ValueError(
                "need timeout > 0, max_retries >= 0, concurrency >= 1, backoff >= 0; got "
                f"{timeout}, {max_retries}, {concurrency}, {backoff}"
            )
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
        self.backoff = backoff
        # retries are ours (with per-item error reporting), so the client's own are off
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=os.environ.get(api_key_env) or "EMPTY",
            timeout=timeout,
            max_retries=0,
        )

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
        last, code = "", "api"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                r = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=temperature,
                    **kwargs,
                )
            except self._openai.APIStatusError as e:
                last, code = f"HTTP {e.status_code}: {str(e)[:200]}", f"http_{e.status_code}"
                if e.status_code < 500 and e.status_code != 429:
                    break  # a client error does not heal by retrying
                continue
            except self._openai.APIError as e:  # connection errors, timeouts
                last, code = f"{type(e).__name__}: {str(e)[:200]}", _error_code(self._openai, e)
                continue
            if not r.choices:
                last, code = "response has no choices", "empty"
                continue
            choice = r.choices[0]
            usage = r.usage
            return GenerationResult(
                text=choice.message.content or "",
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                finish_reason="length" if choice.finish_reason == "length" else "stop",
            )
        return GenerationResult.failure(
            f"{code}: {self.endpoint()} after {attempt + 1} attempt(s): {last}", code=code)

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
            raise self._unavailable(f"endpoint does not answer within {timeout:g}s", e) from e
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
            raise self._unavailable(f"endpoint does not answer within {timeout:g}s", e) from e
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

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


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

"""What every HTTP model provider shares: failures with reason codes, secrets that never print,
retries with exponential backoff and jitter, and a concurrency and rate limit per provider.

Only the llm service process talks HTTP (the sandboxed generator workers have no network); a provider
never executes anything it receives: its text becomes a kernel candidate that the sealed evaluation
judges like any other.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kernelfoundry.generators.base import GenerationUsage

# Statuses that say "try again later": rate limited, server errors, Anthropic's "overloaded" (529).
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
REDACTED = "[redacted]"
ERROR_BODY_CHARS = 500


class Secret:
    """A credential: its value is handed to a header and nowhere else; repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__


def redact(text: str, secrets: Iterable[Secret | str]) -> str:
    """`text` with every secret value (and any 12+ character run of it, as servers often echo a
    truncated key) replaced."""
    for secret in secrets:
        value = secret.reveal() if isinstance(secret, Secret) else secret
        if not value:
            continue
        text = text.replace(value, REDACTED)
        if len(value) >= 16:
            for cut in (value[:12], value[-12:]):
                text = text.replace(cut, REDACTED)
    return text


class GenerationFailure(Exception):
    """A provider could not produce an answer. `reason` is a short code counted and shown to users:

    provider_unavailable  connection errors, 5xx and 429 after every retry
    provider_timeout      no answer within the request timeout, after every retry
    provider_rejected     a 4xx that retrying cannot fix (bad key, bad request, unknown model)
    malformed_response    the body is not the provider's documented JSON shape
    no_kernel             the model answered, but no usable kernel could be read from its text
    cancelled             the run was cancelled while the request was in flight
    """

    TRANSPORT = frozenset(
        {"provider_unavailable", "provider_timeout", "provider_rejected", "malformed_response"}
    )

    def __init__(self, reason: str, message: str, usage: GenerationUsage | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.usage = usage or GenerationUsage()  # tokens spent before it failed (an unusable answer)

    @property
    def provider_fault(self) -> bool:
        """Whether the provider (not the model's text) failed: counts towards taking it out for a while."""
        return self.reason in self.TRANSPORT


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter; a server's Retry-After is honoured (up to `max_wait_s`)."""

    attempts: int = 4
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_wait_s: float = 120.0

    def delay(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        if retry_after_s is not None:
            return min(max(0.0, retry_after_s), self.max_wait_s)
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2**attempt))


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta seconds or an HTTP date), or OpenAI's retry-after-ms."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RateLimiter:
    """At most `per_minute` requests started in any 60 seconds (0: unlimited), spaced evenly."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = 60.0 / per_minute if per_minute > 0 else 0.0
        self.clock = clock
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.interval <= 0:
            return
        async with self._lock:
            now = self.clock()
            wait = self._next - now
            self._next = max(now, self._next) + self.interval
        if wait > 0:
            await asyncio.sleep(wait)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the decoded JSON


class HttpEndpoint:
    """POSTs JSON to one provider with its limits and retry policy; failures come back as
    GenerationFailure with every secret redacted."""

    def __init__(
        self,
        name: str,
        *,
        timeout_s: float,
        retry: RetryPolicy,
        max_concurrency: int,
        requests_per_minute: float,
        secrets: Iterable[Secret],
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.retry = retry
        self.secrets = tuple(secrets)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._concurrency = asyncio.Semaphore(max(1, max_concurrency))
        self._rate = RateLimiter(requests_per_minute)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.retries = 0  # retried attempts, for tests and logs

    def __repr__(self) -> str:
        return f"HttpEndpoint({self.name!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, transport=self._transport)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _clean(self, text: str) -> str:
        return redact(text, self.secrets)

    async def post_json(self, url: str, headers: Mapping[str, str], body: Mapping[str, Any]) -> Reply:
        last: GenerationFailure | None = None
        for attempt in range(max(1, self.retry.attempts)):
            if attempt:
                self.retries += 1
            retry_after: float | None = None
            async with self._concurrency:
                await self._rate.acquire()
                try:
                    response = await self._http().post(url, headers=dict(headers), json=dict(body))
                except httpx.TimeoutException as exc:
                    last = GenerationFailure(
                        "provider_timeout",
                        f"{self.name}: no answer within {self.timeout_s:g} s ({type(exc).__name__})",
                    )
                except httpx.TransportError as exc:
                    last = GenerationFailure(
                        "provider_unavailable",
                        self._clean(f"{self.name}: {type(exc).__name__}: {exc}"),
                    )
                except (httpx.HTTPError, httpx.InvalidURL, ValueError, TypeError) as exc:
                    # a request that cannot be sent (a malformed base URL or header): retrying is useless
                    raise GenerationFailure(
                        "provider_rejected", self._clean(f"{self.name}: {type(exc).__name__}: {exc}")
                    ) from None
                else:
                    if response.status_code < 300:
                        return Reply(response.status_code, self._decode(response))
                    failure = GenerationFailure(
                        "provider_unavailable"
                        if response.status_code in RETRYABLE_STATUSES
                        else "provider_rejected",
                        self._clean(
                            f"{self.name}: HTTP {response.status_code}: "
                            f"{error_text(response)[:ERROR_BODY_CHARS]}"
                        ),
                    )
                    if response.status_code not in RETRYABLE_STATUSES:
                        raise failure
                    last = failure
                    retry_after = retry_after_seconds(response.headers)
            if attempt + 1 < self.retry.attempts:
                await self._sleep(self.retry.delay(attempt, retry_after, self._rng))
        assert last is not None
        raise GenerationFailure(last.reason, f"{last.message} (after {self.retry.attempts} attempts)")

    def _decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            snippet = self._clean(response.text[:200])
            raise GenerationFailure(
                "malformed_response", f"{self.name}: the body is not JSON ({exc}): {snippet!r}"
            ) from exc


def error_text(response: httpx.Response) -> str:
    """The human part of an error body: OpenAI's and Anthropic's `error.message`, else the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type") or error.get("code") or ""
            return f"{kind}: {error['message']}" if kind else error["message"]
        if isinstance(error, str):
            return error
    return response.text.strip()

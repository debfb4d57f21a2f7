"""TRL reward functions backed by the reward services: one column per component, one request per service per
batch.

TRL calls every reward function with the whole batch (`prompts`, `completions` and each dataset column as a
list) and logs `rewards/<function name>/mean`. A service returns a vector per item, so
`ServiceRewards.columns()` gives one async function per component, named after it. They share one cached call:
the first column to run scores the batch, the others await the same task. TRL runs async reward functions
concurrently with `asyncio.gather` on its daemon loop, so the services of a step are called at the same time,
one request each (the client splits very large batches into chunks). Every request carries the training
weights, so a response's `total` is the sum TRL optimises. A per-item error becomes None in every column (the
rule of `corrgrpo_proto.common`: TRL 1.16 leaves a rollout whose every reward is None out of its group's
statistics, advantage 0). An item the service refuses (413, 422: malformed or over a limit) is such an error,
with a warning, never the whole batch's failure. A service that cannot be reached through the client's retries
fails the step with `RewardServiceUnavailable`.

Plain TRL, one line per service: `reward_funcs, reward_weights = trl_rewards(url)`, then
`GRPOTrainer(reward_funcs=reward_funcs, args=GRPOConfig(reward_weights=reward_weights, ...))`.

A config's services are reached here too: `client_options` adds the bearer token, `check_services` asks each
one before a model loads.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from corrgrpo_proto import (
    AsyncRewardClient,
    ItemError,
    ItemResult,
    ItemShape,
    RewardClient,
    RewardServiceError,
    RewardServiceUnavailable,
    encode_item,
    resolve_weights,
)

from .config import START_SERVICES, TOKEN_ENV, InputError, ServicesDown, suggestion
from .config_shape import Service

Row = dict[str, Any]
RewardColumn = Callable[..., Awaitable[list[float | None]]]
T = TypeVar("T")
# of the async ones, what a GET needs
SYNC_CLIENT_OPTIONS = (
    "timeout",
    "retries",
    "backoff",
    "max_backoff",
    "token",
)
STAGE_COLUMN = "stage/"  # TRL's extra completion column `stage/<service>`: each result's info.stage
TRL_EXTRA_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
# What a service answers a request with an item it cannot take (malformed, over a limit): that item's fault
# alone.
ITEM_REFUSALS = frozenset({413, 422})
REFUSED = "refused"  # the ItemError code of an item its service refused


def sync_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Of the async client's options, those a blocking GET needs."""
    return {key: value for key, value in options.items() if key in SYNC_CLIENT_OPTIONS}


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of a TRL completion: a string, or (conversational) the assistant messages' contents joined."""
    if isinstance(completion, str):
        return completion
    return "".join(
        str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant"
    )


def batch_rows(count: int, columns: dict[str, Any]) -> list[Row]:
    """Per-completion rows from TRL's column lists (TRL's own extra kwargs left out)."""
    lists = {
        k: v
        for k, v in columns.items()
        if k not in TRL_EXTRA_KWARGS and isinstance(v, list) and len(v) == count
    }
    return [{k: v[i] for k, v in lists.items()} for i in range(count)]


class SharedCall(Generic[T]):
    """The latest call's result by key, shared by concurrent callers (TRL starts a step's columns together):
    the first caller with a new key starts the call, the others await the same task. A failure lets the next
    caller try again. A success is kept as a plain value, readable from any later event loop."""

    def __init__(self) -> None:
        self._entry: tuple[str, asyncio.Future[T] | T] | None = None

    async def get(self, key: str, call: Callable[[], Awaitable[T]]) -> T:
        if self._entry is None or self._entry[0] != key:
            self._entry = (key, asyncio.ensure_future(call()))
        entry = self._entry
        held = entry[1]
        if not isinstance(held, asyncio.Future):
            return held
        try:
            value = await asyncio.shield(held)
        except BaseException:
            if self._entry is entry:
                self._entry = None
            raise
        if self._entry is entry:
            self._entry = (key, value)
        return value


class ServiceRewards:
    """The reward components of one service as TRL reward functions sharing one request per batch.

    An item is generic (`corrgrpo_proto.items`): the row's columns that are fields of the service's item (read
    once from its `/openapi.json`), and the completion. The service validates it. `components` are the columns
    to expose (a subset of the service's, in the order wanted); `prefix` is put before each column's name (use
    it when two services share a component name, e.g. `format`). `client_options` go to `AsyncRewardClient`
    (timeout, retries, backoff, chunk_size, chunk_bytes, max_concurrency, token). `weights` (every
    component's, `resolve_weights`) go with each request; `of_service` reads them from the service.
    """

    def __init__(
        self,
        service: str,
        url: str,
        components: Sequence[str],
        prefix: str = "",
        client_options: dict[str, Any] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        if not components:
            raise ValueError(f"{service}: give at least one component")
        self.service, self.url, self.components, self.prefix = service, url, list(components), prefix
        self.client_options = client_options or {}
        self.weights = dict(weights) if weights is not None else None
        self._shape = SharedCall[ItemShape]()  # fetched once for all columns (they start together)
        self._results = SharedCall[list[ItemResult]]()  # one request per batch for all columns

    async def items(self, completions: Sequence[Any], rows: Sequence[Row]) -> list[dict[str, Any]]:
        shape = await self._shape.get("", lambda: self._call(lambda client: client.item_shape()))
        return [shape.item(completion_text(c), row) for c, row in zip(completions, rows, strict=True)]

    async def _call(self, request: Callable[[AsyncRewardClient], Awaitable[T]]) -> T:
        # A fresh client per call: the client's pool and semaphore belong to the loop that runs this call.
        try:
            async with AsyncRewardClient(self.url, **self.client_options) as client:
                return await request(client)
        except RewardServiceUnavailable as error:
            raise RewardServiceUnavailable(
                f"the {self.service} reward service at {self.url} is unavailable, so this step cannot be "
                f"scored "
                f"(start it with `python -m corrgrpo_{self.service} --port <port>` or fix its url in the "
                f"config): {error}"
            ) from error
        except RewardServiceError as error:
            raise RewardServiceError(
                error.url, error.status, f"{self.service} refused the batch: {error.message}"
            ) from error

    async def results(self, items: list[dict[str, Any]]) -> list[ItemResult]:
        """Scored results of `items`. Concurrent callers with the same batch share one request."""
        # once: the cache key is the hash of what goes on the wire
        encoded = [encode_item(item) for item in items]
        key = hashlib.sha256(b"\n".join(encoded)).hexdigest()  # an item's JSON has no raw newline
        return await self._results.get(key, lambda: self._call(lambda client: self._score(client, encoded)))

    async def _score(self, client: AsyncRewardClient, encoded: list[bytes]) -> list[ItemResult]:
        """The results of `encoded`. A request refused for an item it holds is halved until the refused items
        stand alone, each then an error result (missing in every column) with a warning. A service validates a
        request before it scores any item, so every item that can be scored is scored once."""
        try:
            return await client.score(encoded, self.weights)
        except RewardServiceError as error:
            if error.status not in ITEM_REFUSALS:
                raise
            if len(encoded) > 1:
                half = len(encoded) // 2
                first, second = await asyncio.gather(
                    self._score(client, encoded[:half]), self._score(client, encoded[half:])
                )
                return first + second
            message = f"HTTP {error.status}: {error.message}"
            print(
                f"[rewards] warning: the {self.service} service refused an item ({message}); it is missing "
                "(no reward, out of its group)",
                file=sys.stderr,
                flush=True,
            )
            return [ItemResult(error=ItemError(code=REFUSED, message=message))]

    @classmethod
    def of_service(
        cls,
        url: str,
        components: Sequence[str] | None = None,
        weights: Mapping[str, float] | None = None,
        prefix: str = "",
        client_options: dict[str, Any] | None = None,
    ) -> ServiceRewards:
        """The service at `url` as it declares itself in `/v1/components`: its components (default: all)
        weighted as it declares (`weights` overrides some). The others go out at weight 0, so a result's
        `total` is the trained sum."""
        options = client_options or {}
        with RewardClient(url, **sync_options(options)) as client:
            service, components, weights = trained_weights(client, components, weights)
        return cls(service, url, components, prefix, options, weights)

    @property
    def column_weights(self) -> list[float]:
        """TRL's `reward_weights` of `columns()`: the weights sent with each request."""
        if self.weights is None:
            raise ValueError(
                f"{self.service}: no weights given (ServiceRewards.of_service reads the declared ones)"
            )
        return [self.weights[name] for name in self.components]

    def columns(self) -> list[RewardColumn]:
        """One async TRL reward function per component, `__name__` = prefix + component."""
        return [self._column(name) for name in self.components]

    def _column(self, component: str) -> RewardColumn:
        async def column(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
            results = await self.results(await self.items(completions, batch_rows(len(completions), kwargs)))
            if component == self.components[0] and callable(log_metric := kwargs.get("log_metric")):
                log_metric(
                    f"rewards/{self.service}/failed_items", float(sum(r.error is not None for r in results))
                )
            if component == self.components[0] and callable(
                log_extra := kwargs.get("log_extra")
            ):  # kept per rollout
                log_extra(
                    f"{STAGE_COLUMN}{self.prefix}{self.service}", [result_stage(result) for result in results]
                )
            return [column_value(result, component) for result in results]

        column.__name__ = column.__qualname__ = f"{self.prefix}{component}"
        # the step's phase line groups by it
        column.service = f"{self.prefix}{self.service}"  # type: ignore[attr-defined]
        return column


def result_stage(result: ItemResult) -> str | None:
    """Where the item's scoring ended (`info.stage`), or the error that kept it from being scored."""
    return result.info.get("stage") if result.error is None else f"error: {result.error.code}"


def column_value(result: ItemResult, component: str) -> float | None:
    """One component of one result: None (missing) when the item failed or the service did not return it."""
    if result.error is not None or result.components is None:
        return None
    return result.components.get(component)


def trained_weights(
    client: RewardClient, components: Sequence[str] | None, overrides: Mapping[str, float] | None
) -> tuple[str, list[str], dict[str, float]]:
    """The service's name, the components trained on (default: all it declares) and the weights of all its
    components to send with each request (`resolve_weights`: declared, `overrides` applied, the components not
    trained at 0)."""
    declared = client.components()
    names = [spec.name for spec in declared.components]
    components = list(components or names)
    try:
        return declared.service, components, resolve_weights(declared.components, overrides, only=components)
    except KeyError as unknown:
        raise ValueError(
            f"{declared.service}: component {unknown} is not served at {client.base_url} (it has {names})"
        ) from None


def reward_columns(services: Sequence[ServiceRewards]) -> list[RewardColumn]:
    """All services' columns for `GRPOTrainer(reward_funcs=...)`. Names must be unique (TRL keys its metrics
    by them)."""
    columns = [column for service in services for column in service.columns()]
    names = [column.__name__ for column in columns]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"reward columns {duplicates} appear twice: give the services a `prefix`")
    return columns


def trl_rewards(
    url: str,
    components: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
    prefix: str = "",
    client_options: dict[str, Any] | None = None,
) -> tuple[list[RewardColumn], list[float]]:
    """TRL's `reward_funcs` and the matching `GRPOConfig(reward_weights=...)` for the service at `url`
    (`ServiceRewards.of_service`)."""
    rewards = ServiceRewards.of_service(url, components, weights, prefix, client_options)
    return rewards.columns(), rewards.column_weights


def service_rewards(services: Mapping[str, Service]) -> tuple[list[RewardColumn], list[float]]:
    """The reward columns of every configured service and their TRL reward weights
    (`ServiceRewards.of_service`)."""
    rewards = [
        ServiceRewards.of_service(s.url, s.components, s.weights, s.prefix, client_options(s))
        for s in services.values()
    ]
    return reward_columns(rewards), [weight for service in rewards for weight in service.column_weights]


# ---------------------------------------------------------------- the configured services


def client_options(service: Service) -> dict[str, Any]:
    """The client options of a configured service with its bearer token: the one `Service.with_token` gave,
    else the file `client.token_file` names, else $CORRGRPO_API_TOKEN (none when neither is set). An empty one
    is an InputError: a service would admit an empty credential, or refuse every request."""
    options = service.client.model_dump(exclude_none=True)
    path = options.pop("token_file", None)
    if service.token_given:
        return options | ({"token": service.token} if service.token else {})
    if path is not None:
        try:
            token, where = Path(path).read_text().strip(), f"the token file {path}"
        except OSError as error:
            raise InputError(f"cannot read the token file {path}: {error.strerror or error}") from None
    elif TOKEN_ENV in os.environ:
        token, where = os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    else:
        return options
    if not token:
        raise InputError(
            f"{where} is empty: give the services' bearer token, or unset it for services without one"
        )
    return options | {"token": token}


def check_services(services: Mapping[str, Service]) -> None:
    """Every configured service answers at once and serves the configured components, or one line:
    ServicesDown naming each URL that did not answer (before a model is loaded, not after retries as a
    traceback), InputError naming a component or weight it does not serve."""
    down = []
    for name, spec in services.items():
        url = spec.url
        token = {key: value for key, value in client_options(spec).items() if key == "token"}
        with RewardClient(url, retries=0, timeout=10, **token) as client:
            try:
                client.request("GET", "/healthz")
                declared = [component.name for component in client.components().components]
            except RewardServiceUnavailable as error:
                down.append(f"the {name} service at {url} ({error.reason})")
                continue
            except RewardServiceError as error:
                if error.status == 401:
                    raise InputError(
                        f"the {name} service at {url} refused the "
                        f"{'token' if token else 'request without a token'} "
                        f"(HTTP 401): set ${TOKEN_ENV} or services.{name}.client.token_file to its token"
                    ) from None
                path = error.url.removeprefix(url.rstrip("/"))
                down.append(
                    f"the {name} service at {url} ({path}: HTTP {error.status}, not a corrgrpo service?)"
                )
                continue
        for key, asked in (("components", spec.components or []), ("weights", spec.weights)):
            if unknown := [component for component in asked if component not in declared]:
                raise InputError(
                    f"services.{name}.{key}: {unknown[0]!r} is not a component of the {name} service at {url}"
                    f"{suggestion(unknown[0], declared)} (it has {', '.join(declared)})"
                )
    if down:
        raise ServicesDown(" ".join(f"no answer from {', '.join(down)}; {START_SERVICES}".split()))

"""corrgrpo wire contract: the models every service speaks and the client the trainer uses."""

from .client import AsyncRewardClient, RewardClient, RewardServiceError, RewardServiceUnavailable, encode_item
from .common import (
    ComponentSpec,
    ComponentsResponse,
    ErrorBody,
    Health,
    ItemError,
    ItemResult,
    Readiness,
    ScoreRequest,
    ScoreResponse,
    resolve_weights,
)
from .items import ItemShape

__all__ = [
    "AsyncRewardClient",
    "ComponentSpec",
    "ComponentsResponse",
    "ErrorBody",
    "Health",
    "ItemError",
    "ItemResult",
    "ItemShape",
    "Readiness",
    "RewardClient",
    "RewardServiceError",
    "RewardServiceUnavailable",
    "ScoreRequest",
    "ScoreResponse",
    "encode_item",
    "resolve_weights",
]

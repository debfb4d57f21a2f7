"""Shared server kit of the corrgrpo reward services."""

from .app import create_app, error_response
from .cli import StartRefused
from .registry import ServiceDeclaration, declared
from .scoring import Scored, add_score_route
from .settings import ServiceSettings
from .store.errors import StoreUnavailable
from .store.factory import make_store
from .store.interface import Store
from .store.memory import MemoryStore
from .store.redis_store import RedisStore

__all__ = [
    "MemoryStore",
    "RedisStore",
    "Scored",
    "ServiceDeclaration",
    "ServiceSettings",
    "StartRefused",
    "Store",
    "StoreUnavailable",
    "add_score_route",
    "create_app",
    "declared",
    "error_response",
    "make_store",
]

"""Settings of the AgentDojo service (environment variables `CORRGRPO_*`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from corrgrpo_common import ServiceSettings

MIB = 1024 * 1024
REDIS_LIVE_BYTES = 192 * MIB
"""All clients' episodes with Redis and no `CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES`: three quarters of the default
in-memory store's cap, as with the in-memory store."""


class AgentDojoSettings(ServiceSettings):
    agentdojo_version: str = Field("v1.2.2", description="AgentDojo benchmark version of the suites")
    agentdojo_attack: str = Field(
        "important_instructions", description="Attack used when an injection task comes without one"
    )
    agentdojo_model_name: str = Field(
        "local",
        description="Model id the attacks address (an agentdojo.models.MODEL_NAMES key)",
    )
    agentdojo_episode_ttl_s: int = Field(
        600, gt=0, description="An episode not stepped this long expires (404), freeing its client's quota"
    )
    agentdojo_max_live_episodes_per_client: int = Field(
        1024,
        gt=0,
        description="Unfinished episodes one client (its address, `CORRGRPO_FORWARDED_ALLOW_IPS`) may hold; "
        "one more "
        "gets 429 with `Retry-After` until it finishes one or one idles out",
    )
    agentdojo_max_live_episodes: int = Field(
        4096,
        gt=0,
        description="Unfinished episodes of all clients together (workspace: ~90 KB each); one more gets "
        "503 with `Retry-After`. Four clients at their share fit",
    )
    agentdojo_max_live_bytes_per_client: int | None = Field(
        None,
        gt=0,
        description="Bytes of stored episodes (finished ones' results until they expire) one client may hold "
        "(429 beyond); unset: a quarter of `CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES`'s value",
    )
    agentdojo_max_live_bytes: int | None = Field(
        None,
        gt=0,
        description="Bytes of stored episodes of all clients (503 beyond), at most the in-memory store cap; "
        "unset: three quarters of `CORRGRPO_MEMORY_STORE_MAX_BYTES`, 192 MiB with Redis",
    )
    agentdojo_max_tool_calls: int = Field(100, description="Tool calls allowed per episode or trajectory")
    agentdojo_env_cache_size: int = Field(256, description="Injected start environments kept per process")
    agentdojo_max_answer_chars: int = Field(
        4000,
        description="A longer final answer scores utility 0 (`answer_over_cap`): checkers that search it "
        "pass a long "
        "enough list of guesses; the longest v1.2.2 ground truth has 175 chars",
    )
    agentdojo_max_arg_chars: int = Field(
        20_000, description="Longer tool-call argument JSON: 422 `argument_too_long`, naming its path"
    )

    def live_bytes(self) -> tuple[int, int]:
        """(one client's, all clients') bytes of stored episodes, unset ones derived from the store's cap."""
        derived = REDIS_LIVE_BYTES if self.redis_url else self.memory_store_max_bytes * 3 // 4
        total = self.agentdojo_max_live_bytes or derived
        return self.agentdojo_max_live_bytes_per_client or total // 4, total

    @model_validator(mode="after")
    def _shares_fit(self) -> AgentDojoSettings:
        """A client at its share must leave room for the others, and the in-memory store for every quota."""
        client, total = self.live_bytes()
        if client >= total:
            raise ValueError(
                f"CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT ({client}) must be below "
                f"CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES ({total}): one client at its share would lock others out"
            )
        if not self.redis_url and total > self.memory_store_max_bytes:
            raise ValueError(
                f"CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES ({total}) exceeds CORRGRPO_MEMORY_STORE_MAX_BYTES "
                f"({self.memory_store_max_bytes}): the in-memory store would fill before the quotas refuse"
            )
        return self

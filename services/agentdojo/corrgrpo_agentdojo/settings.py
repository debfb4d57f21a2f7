"""Settings of the AgentDojo service (environment variables `CORRGRPO_*`)."""

from __future__ import annotations

from pydantic import Field

from corrgrpo_common import ServiceSettings


class AgentDojoSettings(ServiceSettings):
    agentdojo_version: str = Field("v1.2.2", description="AgentDojo benchmark version of the suites")
    agentdojo_attack: str = Field("important_instructions", description="Attack used when an injection task comes without one")
    agentdojo_model_name: str = Field(
        "local",
        description="Model id the attacks address (agentdojo.models.MODEL_NAMES key; `local` → 'Local model')",
    )
    agentdojo_episode_ttl_s: int = Field(
        600, gt=0, description="Idle TTL: an episode not stepped this long expires (404) and frees its client's quota"
    )
    agentdojo_max_live_episodes_per_client: int = Field(
        1024,
        gt=0,
        description="Unfinished episodes one client (its address, `CORRGRPO_FORWARDED_ALLOW_IPS`) may hold; one more "
        "gets 429 with `Retry-After` until it finishes one or one idles out",
    )
    agentdojo_max_live_episodes: int = Field(
        4096,
        gt=0,
        description="Unfinished episodes of all clients together (workspace: ~90 KB each, ~370 MB); one more gets 503 "
        "with `Retry-After`. Four clients at their share fit; the in-memory store's own cap may refuse first",
    )
    agentdojo_max_tool_calls: int = Field(100, description="Tool calls allowed per episode or trajectory")
    agentdojo_env_cache_size: int = Field(256, description="Injected start environments kept per process")
    agentdojo_max_answer_chars: int = Field(
        4000,
        description="A longer final answer scores utility 0 (info `answer_over_cap`); the longest v1.2.2 "
        "ground-truth answer is 175 chars. Checkers that search the answer for values pass a long enough list of guesses",
    )
    agentdojo_max_arg_chars: int = Field(
        20_000, description="A tool-call argument whose JSON is longer is refused (422, `argument_too_long`, with its path)"
    )

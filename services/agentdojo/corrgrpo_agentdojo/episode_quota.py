"""The quota of live episodes: each holds a lease in its client's groups and in the groups of all
(`Store.lease`): a place while unfinished, and the bytes stored for it (its tombstone's once finished), so one
client filling the store cannot lock the others out. A create or step over a client's share gets 429 and
changes nothing. What it abandons idles out after `agentdojo_episode_ttl_s`, freeing its share.
"""

from __future__ import annotations

from corrgrpo_common.store.interface import Claim

from .request_checks import EpisodeError
from .settings import AgentDojoSettings

LIVE = "{corrgrpo:agentdojo:live}:"  # the quota groups share one Redis Cluster slot: one lease checks all
ALL, BYTES = LIVE + "all", ":bytes"


def episode_claims(
    settings: AgentDojoSettings, client: str, stored: int, unfinished: bool = True
) -> dict[str, Claim]:
    """The lease of an episode of `client` with `stored` bytes in the store: a place (while unfinished)
    and those bytes, in its client's groups first, so a client over its share is told so."""
    mine = LIVE + f"client:{client}"
    per_client, total = settings.live_bytes()
    claims = {
        mine: Claim(1, settings.agentdojo_max_live_episodes_per_client),
        mine + BYTES: Claim(stored, per_client),
        ALL: Claim(1, settings.agentdojo_max_live_episodes),
        ALL + BYTES: Claim(stored, total),
    }
    return {group: claim for group, claim in claims.items() if unfinished or group.endswith(BYTES)}


def episode_places(client: str) -> list[str]:
    """The groups that count an unfinished episode of `client`, given back when it finishes."""
    return [LIVE + f"client:{client}", ALL]


def quota_refusal(settings: AgentDojoSettings, full: str, client: str) -> EpisodeError:
    """The error for a lease refused in group `full`: 503 when all clients fill the service, else 429."""
    per_client, total = settings.live_bytes()
    ttl = settings.agentdojo_episode_ttl_s
    idle = f"finish one, or one idles out {ttl}s after its last step"
    if full == ALL:
        message = (
            f"the service holds {settings.agentdojo_max_live_episodes} unfinished episodes "
            "(CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES); retry when one ends"
        )
        return EpisodeError(503, "episodes_full", message, retry_after_s=settings.retry_after_s)
    if full == ALL + BYTES:
        message = (
            f"the stored episodes of all clients would exceed {total} bytes "
            "(CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES); retry when one ends"
        )
        return EpisodeError(503, "episodes_full", message, retry_after_s=settings.retry_after_s)
    if full.endswith(BYTES):
        message = (
            f"client {client}'s stored episodes would exceed its share of {per_client} bytes "
            f"(CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT): {idle}; a finished one's result is kept "
            f"{ttl}s"
        )
        return EpisodeError(429, "too_many_episode_bytes", message, retry_after_s=settings.retry_after_s)
    limit = settings.agentdojo_max_live_episodes_per_client
    message = (
        f"client {client} holds {limit} unfinished episodes, its share "
        f"(CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES_PER_CLIENT): {idle}"
    )
    return EpisodeError(429, "too_many_episodes", message, retry_after_s=settings.retry_after_s)

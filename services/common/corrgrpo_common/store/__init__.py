"""Key-value store for idempotency caches and state shared between replicas, one concern a module.

`MemoryStore` (`memory`) is the embedded default (one process, nothing shared, capped in size); `RedisStore`
(`redis_store`) is used when `CORRGRPO_REDIS_URL` is set, so replicas share caches and episode state. Both
implement the same async `Store` interface (`interface`, errors in `errors`) and are tested with the same test
body. Every key either writes carries a TTL. `make_store` (`factory`) picks one from the settings.

Whoever can write to Redis is not trusted: `RedisStore` prefixes every value with an HMAC-SHA256
(`CORRGRPO_STORE_SECRET`) of its key and bytes (`sealing`), and refuses a value whose MAC does not match
(`StoreTampered`, logged) before anyone decodes it, so a forged episode pickle, cached verdict or
reference time never reaches a service, nor a genuine value moved to another key. The in-memory
store is one process's own memory: nothing to authenticate.

State that must not go back (`get_state`, `set_state`: AgentDojo's episodes) carries a version: each write
names the version it replaces (compare-and-set, a Lua script on Redis), so an update is never lost, and on
Redis the version is sealed with the value while a version key says which is current, so an older genuine
value put back under its own key is refused (`StoreTampered`), as is a rollback of both by a replica that saw
the later version.

Leases (`lease`, `release`) hold an amount per group with a limit (a place, or bytes), for quotas that must
hold across replicas (AgentDojo's episodes per client and in total, in places and in bytes). On Redis they are
Lua scripts (`lease_scripts`).
"""

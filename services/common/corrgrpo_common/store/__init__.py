"""Key-value store for idempotency caches and state shared between replicas, one concern a module.

`MemoryStore` (`memory`) is the embedded default (one process, nothing shared, capped in size); `RedisStore`
(`redis_store`) is used when `CORRGRPO_REDIS_URL` is set, so replicas share caches and episode state. Both
implement the same async `Store` interface (`interface`, errors in `errors`) and are tested with the same test
body; every key either writes carries a TTL. `make_store` (`factory`) picks one from the settings.

Whoever can write to Redis is not trusted: `RedisStore` prefixes every value with an HMAC-SHA256
(`CORRGRPO_STORE_SECRET`) of its key and bytes (`sealing`), and refuses a value whose MAC does not match
(`StoreTampered`, logged) before anyone decodes it, so a forged episode pickle, cached verdict or
reference time never reaches a service, nor a genuine value moved to another key. The in-memory
store is one process's own memory: nothing to authenticate.

Leases (`lease`, `renew`, `release`) count live holders per group with a cap, for quotas that
must hold across replicas (AgentDojo's live episodes per client and in total); on Redis they are Lua scripts
(`lease_scripts`).
"""

"""Django's Redis cache on the process's shared connection pool (config.redis).

Django makes a cache backend object per thread, and each one builds its own connection pool; every
`sync_to_async` hop on a new thread then opened new connections. This backend takes the one
process-wide pool instead (bytes, not decoded: the cache pickles its values).
"""

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

from config.redis import sync_pool


class SharedPoolRedisCacheClient(RedisCacheClient):
    def _get_connection_pool(self, write):
        return sync_pool(self._servers[self._get_connection_pool_index(write)], decode=False)


class SharedPoolRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedPoolRedisCacheClient

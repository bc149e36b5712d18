"""The cache: one owner for everything under the cache root (uv's cache is the model).

    <root>/archives/<sha256>      verified archives, by content      :mod:`.store` (``Cache``)
    <root>/index/<key>/           index pages and manifests, for --offline        :mod:`.store`
    <root>/tmp/                   downloads until they verify                     :mod:`.store`
    <root>/unpacked/<key>/        each archive unpacked once          :mod:`.unpacked` (``Cache.unpacked``)
    <root>/locks/                 one lock per entry: the fetcher's, an install's, maintenance's
    <root>/CACHEDIR.TAG, .cudaredist-cache      the tag backup tools read; our marker

Callers ask :class:`Cache` (a path for an archive, an entry of the unpacked bucket, a lock); they
never walk its folders. Only :mod:`.maintenance` (``clear``, ``prune``) removes entries, each
under its lock, and lock files no process holds.
"""

from __future__ import annotations

from cudaredist.cache.store import Cache, default_cache_dir

__all__ = ["Cache", "default_cache_dir"]

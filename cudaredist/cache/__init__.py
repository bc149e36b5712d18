"""The cache: one owner for everything under the cache root (uv's cache is the model).

Under ``--cache-dir`` > ``CUDAREDIST_CACHE_DIR`` > the user cache dir:

    archives/<sha256>[.json]   verified archives, by content, and where each came from     :mod:`.store`
    index/<key>/               listing.html, redistrib_*.json and package index pages per base URL
                               (for --offline), each with NAME.from: the URLs it was redirected
                               through, judged by trust.py on each use; for an install, a copy
                               younger than CUDAREDIST_INDEX_TTL (600 s) answers for the server
                                                                                         :mod:`.store`
    tmp/                       partial downloads (<sha256>.part, resumed by the next run), renamed
                               into archives/ only once they verify                       :mod:`.store`
    unpacked/<key>/            each archive unpacked once                                  :mod:`.unpacked`
    locks/                     one lock per entry: the fetcher's, an install's, maintenance's
    CACHEDIR.TAG               the Cache Directory Tagging standard: backup tools skip the cache
    .cudaredist-cache          our marker (format version): maintenance refuses a directory without it

Callers ask :class:`Cache` (a path for an archive, an entry of the unpacked bucket, a lock); they
never walk its folders. Only :mod:`.maintenance` (``clear``, ``prune``) removes entries, each
under its lock, and lock files no process holds.
"""

"""Fetching: the transport (retries, ranges), the download cache, and the concurrent fetcher."""

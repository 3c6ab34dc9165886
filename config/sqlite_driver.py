"""The sqlite3 module Django's SQLite backend uses: one that can load extensions (sqlite-vec).

Some Pythons are built without loadable SQLite extensions (pyenv's default build, this project's
development machines among them): their sqlite3.Connection has no enable_load_extension, and the
embedded default's search index (sqlite-vec) cannot load. There, sqlean.py (the sqlean-py package: the
same DB-API module over its own SQLite build, extensions allowed) stands in as ``sqlite3`` before
Django imports its SQLite backend. Where the standard module can load extensions, it is kept.
"""

import sqlite3
import sys


def use_one_that_loads_extensions() -> None:
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return
    import sqlean
    import sqlean.dbapi2

    sys.modules["sqlite3"] = sqlean
    sys.modules["sqlite3.dbapi2"] = sqlean.dbapi2

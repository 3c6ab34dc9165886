"""Two writers at once on the embedded default's SQLite, as `make run` meets them: a file being read
(documents.runner's thread writes its progress) while its owner uploads another. Run as
`python -m tests.support.sqlite_writers` with DATABASE_URL naming a fresh SQLite file; exits 0 when the
upload went through, 1 with the error when it did not.

The order is forced, not timed: the reader writes (and holds the write), the upload's first query
runs, then the reader commits while the upload goes on to write. With SQLite's deferred transactions
the upload, holding a read snapshot older than the reader's commit, is refused at once ("database is
locked"); a transaction that takes the write lock when it begins waits for the reader instead.
"""

import os
import sys
import threading

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.core.files.base import ContentFile  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from accounts.models import User  # noqa: E402
from documents import services  # noqa: E402
from documents.models import Document  # noqa: E402

READER_HOLDS_AT_MOST = 3.0  # seconds: the upload waits for the reader's commit when it cannot go first


def main() -> int:
    call_command("migrate", verbosity=0, interactive=False)
    owner = User.objects.create_user(email="writer@example.com", password=None)
    reading = Document.objects.create(owner=owner, name="first.md", file="documents/first.md")
    written, queried = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def reader() -> None:
        try:
            with transaction.atomic():
                Document.objects.filter(pk=reading.pk).update(chunks_done=1)
                written.set()
                queried.wait(READER_HOLDS_AT_MOST)
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    def upload() -> None:
        def first_query_then_let_the_reader_commit(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            queried.set()
            return result

        written.wait(10)
        try:
            with connection.execute_wrapper(first_query_then_let_the_reader_commit):
                services.upload_document(owner, ContentFile(b"Second file.", name="second.md"))
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=reader), threading.Thread(target=upload)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if failures:
        print(f"{type(failures[0]).__name__}: {failures[0]}")
        return 1
    return 0 if Document.objects.filter(name="second.md").exists() else 1


if __name__ == "__main__":
    sys.exit(main())

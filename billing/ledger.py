"""Writing one ledger row, with the write it closes, in one round trip to the database.

A generation's ledger row is written exactly once (its reservation and its generation are each
unique), and for a chat answer together with the answer's final state: whichever of the runner and
the reaper ends the answer first writes both, the other neither. On PostgreSQL that is one statement:
the closing UPDATE (with RETURNING) as a common table expression, and the INSERT taking its values
only from the row that UPDATE changed, with ON CONFLICT DO NOTHING for a row settled already. One
statement is atomic by itself, so there is no BEGIN, SAVEPOINT or COMMIT to send (inside a caller's
transaction it is part of that transaction, and a conflict does not abort it). Elsewhere (the
embedded default's SQLite has no UPDATE inside WITH) the same is a transaction of two statements.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import EmptyResultSet
from django.db import IntegrityError, connections, router, transaction
from django.db.models import AutoField, CharField, QuerySet
from django.db.models.sql import UpdateQuery

from billing.models import UsageRecord

# Only the model's own names and Django's compiled UPDATE go into the text; every value is a parameter.
_STATEMENT = (
    "WITH closed AS ({closed}), "
    "written AS (INSERT INTO {table} ({columns}) SELECT {values} FROM closed ON CONFLICT DO NOTHING RETURNING {pk}) "
    "SELECT (SELECT count(*) FROM closed), (SELECT {pk} FROM written)"
)


@dataclass(frozen=True)
class Closing:
    """What a ledger row closes: `rows` (a queryset) updated with `values`, only if it still matches."""

    rows: QuerySet
    values: dict


@dataclass(frozen=True)
class Written:
    #: The closing write changed a row (always true without one); nothing is written otherwise.
    closed: bool
    #: The row was inserted now, and `record` is it (false: this reservation or generation already had its row).
    inserted: bool


def write(record: UsageRecord, closing: Closing | None = None) -> Written:
    """Insert `record` (unsaved; it is the saved row afterwards if inserted), after `closing` and only
    if that changed a row; atomically."""
    alias = router.db_for_write(UsageRecord)
    connection = connections[alias]
    if connection.vendor == "postgresql":
        return _one_statement(connection, record, closing)
    return _in_a_transaction(alias, record, closing)


def _one_statement(connection, record: UsageRecord, closing: Closing | None) -> Written:
    fields = [f for f in UsageRecord._meta.local_concrete_fields if not isinstance(f, AutoField)]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    # Typed, as an INSERT ... SELECT does not coerce untyped parameters to the columns' types; text
    # without its length, since a cast would cut a value that is too long where the column refuses it.
    values = ", ".join(f"CAST(%s AS {_type(f, connection)})" for f in fields)
    params = [f.get_db_prep_save(f.pre_save(record, add=True), connection) for f in fields]
    if closing is None:
        closed_sql, closed_params = "SELECT 1", []
    else:
        try:
            closed_sql, closed_params = _update_returning(closing, connection.alias)
        except EmptyResultSet:  # a filter that can match nothing (`pk__in=[]`)
            return Written(closed=False, inserted=False)
    sql = _STATEMENT.format(
        closed=closed_sql,
        table=quote(UsageRecord._meta.db_table),
        columns=columns,
        values=values,
        pk=quote(UsageRecord._meta.pk.column),
    )
    # Inside a caller's transaction, a failure marks it for rollback, as the ORM's own writes do.
    with transaction.mark_for_rollback_on_error(connection.alias), connection.cursor() as cursor:
        cursor.execute(sql, [*closed_params, *params])
        closed, pk = cursor.fetchone()
    if pk is not None:
        record.pk = pk
        record._state.adding, record._state.db = False, connection.alias
    return Written(closed=closed > 0, inserted=pk is not None)


def _type(field, connection) -> str:
    return "text" if isinstance(field, CharField) else field.cast_db_type(connection)


def _update_returning(closing: Closing, alias: str) -> tuple[str, list]:
    """The UPDATE that `closing.rows.update(**closing.values)` runs, returning a row per row changed
    (of its own model's table: fields of a parent model, with multi-table inheritance, are refused)."""
    if not closing.values:
        raise ValueError("A closing write needs values to write.")
    query = closing.rows.query.chain(UpdateQuery)
    query.add_update_values(closing.values)
    if query.related_updates:
        raise ValueError("A closing write changes one table: no fields of a parent model.")
    sql, params = query.get_compiler(alias).as_sql()
    return f"{sql} RETURNING 1", list(params)


def _in_a_transaction(alias: str, record: UsageRecord, closing: Closing | None) -> Written:
    with transaction.atomic(using=alias):
        if closing is not None and not closing.rows.update(**closing.values):
            return Written(closed=False, inserted=False)
        try:
            with transaction.atomic(using=alias):
                record.save(using=alias, force_insert=True)
        except IntegrityError:
            rows = UsageRecord.objects.using(alias)
            if not (
                rows.filter(reservation_id=record.reservation_id).exists()
                or rows.filter(generation_id=record.generation_id).exists()
            ):
                raise  # not a row settled already: a broken rule
            return Written(closed=True, inserted=False)
    return Written(closed=True, inserted=True)

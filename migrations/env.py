"""Alembic environment: runs migrations over SQLAlchemy's asyncpg dialect.

The URL comes from the `sqlalchemy.url` option the caller sets (app.db.migrate does)."""
import asyncio

from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine

config = context.config


def _do_run(connection) -> None:
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_async_engine(config.get_main_option("sqlalchemy.url"))
    async with engine.connect() as conn:
        await conn.run_sync(_do_run)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_online())

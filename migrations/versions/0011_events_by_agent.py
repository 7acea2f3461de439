"""The log by agent: an index on data->>'agent_id', for an agent's own events.

Revision ID: 0011
Revises: 0010
"""
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # An agent's `events` subscription (and the operator's `events(agentId:)`) reads the
    # events whose data names the agent, by position. Without an index that read walks the
    # whole log from the cursor on every wake-up of every such subscription. Partial: only
    # the events that name an agent take an entry (pool timers and context bookkeeping do
    # not), and `data->>'agent_id' = $1` implies the index's predicate, so the planner uses
    # it. The events are never updated, so an expression on `data` costs no HOT updates.
    op.execute("CREATE INDEX events_agent ON events ((data->>'agent_id'), position) "
               "WHERE data->>'agent_id' IS NOT NULL")
    # The sample size 0008 chose for every expression of the log.
    op.execute("ALTER INDEX events_agent ALTER COLUMN 1 SET STATISTICS 10")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS events_agent")

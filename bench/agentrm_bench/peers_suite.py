"""Every workload of `agentrm bench peers`: importing this module registers the workloads that
live in modules of their own (faults, priority, replicas, validate) with agentrm_bench.peers_bench,
which runs them after its own (overhead, rates)."""
from . import peers_faults, peers_replicas, peers_validate  # noqa: F401  (each registers itself)
from .peers_bench import ALL_PEERS, ALL_WORKLOADS, run, to_markdown

__all__ = ["ALL_PEERS", "ALL_WORKLOADS", "run", "to_markdown"]

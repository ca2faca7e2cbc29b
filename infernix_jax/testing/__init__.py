"""Test and study support (random walkers, schema oracles); not part of the runtime API."""

"""Reproduction of the trie-automaton paper's latency study (see configs/trie_repro.py)."""

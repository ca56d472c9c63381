"""The client's private side of rule co-evolution: ``Ω_i`` and what works on it (§3.1–3.2, 3.6).

The local repository with its literals, adaptation of global rules, relevance to ``X_i`` and
the check of what leaves the client. Never loaded by server code (the privacy boundary,
``tests/unit/test_import_contracts.py``); nothing is re-exported here, import the modules.
"""

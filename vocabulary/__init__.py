"""dmn.vocabulary — the words every layer shares, at the bottom of the import graph.

* ``terms`` — handle types, link types, accesses, scopes, ownership, hooks, step kinds,
  reversibility and recovery strategies: one ``StrEnum`` and one ``Literal`` spelling of
  each, kept equal at import;
* ``handles`` — handle values (``Handle``, ``Scope``, ``NamespaceIdentity``,
  ``Provenance``) that bound programs, the journal and opcode executors carry.

It imports nothing of the project (an import-linter contract in pyproject.toml), so the
language (``dmn.interpreter``), the opcodes, the engine and the cluster API all use the
same definitions and no two packages import each other through it.
"""

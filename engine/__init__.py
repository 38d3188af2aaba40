"""dmn.engine — the runtime of the effect language (design §3.5): bind, run, recover.

The static language (``dmn.interpreter``: source, documents, expressions, checker,
config schema, lint) decides what a program *means*; this package turns one checked
program and one concrete call into effects on a node, durably:

* ``config_plan.plan_for_config(plugin, config)`` — pure: what a plugin runs under one
  config (validated config, the effects whose guards hold with their parameters, the ports
  that are on, the opcodes); the binder, the node agent and the topology compiler all ask it;
* ``binder.Call``, ``binder.bind_program(plugin, hook, call, registry=None)`` — pure:
  one plugin + hook + call -> a ``bound.BoundProgram`` (or diagnostics);
* ``bound`` — the serialisable bound program, its canonical JSON and digest;
* ``journal`` — the journal *port* (``Journal`` protocol, operation/effect records) that
  ``dmn.agent.journal`` implements over RocksDB;
* ``runner.Runner`` — journaled execution, compensation, cleanup from the journal alone;
* ``recovery`` — what an effect whose outcome is unknown needs (undo, nothing, quarantine);
* ``mutation_lock.NodeMutationLock`` — the one lock around node mutations.

Import direction (import-linter contracts in pyproject.toml): the engine imports the
language (``dmn.interpreter``) and opcode specs plus the executor *protocol*
(``dmn.opcodes.executor``); never native executors, cluster code or native libraries.
``dmn.agent`` (and tests, benchmarks, the lab) import the engine; the language never does.
"""

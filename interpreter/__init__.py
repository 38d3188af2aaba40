"""dmn.interpreter — the static effect language (design §2, §3): load, parse, check, lint.

Public surface of the language core (import the modules; nothing is re-exported here so
that importing one part never pays for the others):

* ``source.load_yaml_documents(text, file) -> (list[YamlDocument], diagnostics)`` —
  positioned YAML (``SourceMap``), duplicate keys as ``E_DUPLICATE_KEY``;
* ``documents`` — strict pydantic models ``HookProgram``, ``NetworkPlugin`` (and parts),
  ``parse_document(doc)``;
* ``config_schema`` — the ``configSchema`` subset and ``validate_config``;
* ``expressions.parse_reference/parse_guard/evaluate`` — the ``grammar/effects.lark`` AST;
* ``loader`` — ``Plugin``, ``ProgramSource``, ``load_plugin_dir``, ``load_plugins``,
  ``load_builtin_plugins``, ``plugin_from_descriptor``, ``Plugin.contract_digest``;
* ``checker.check_plugin(plugin, registry, config=None)``,
  ``checker.check_program(plugin, hook, registry, config=None)``;
* ``canonical_json`` — the canonical JSON bytes and ``sha256:`` digest every content
  digest uses;
* ``lint.lint_paths``, ``lint.register_kind`` (or the ``dmn.lint_kinds`` entry points);
  ``dmn lint`` is ``dmn.cli.lint`` over them.

Every entry point returns diagnostics for bad input and never raises.

Binding, running and recovery (the runtime) are ``dmn.engine``, which imports this package;
this package never imports the engine.
"""

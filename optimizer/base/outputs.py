"""Where fleetplan writes, and the rule that it never destroys what it did not write.

Every command that writes checks its target here before any work starts (and the writer
checks again just before it renames its temporary output into place):

* a **folder output** (a plan, a sweep, a comparison) may go to an absent path (missing
  parent folders are created), an empty folder, or a folder that holds a previous output of
  the same kind — recognised by its marker file — and nothing fleetplan does not write there;
* a **file output** (a PNG, a CSV, a GraphML file) may replace only a file of the same kind:
  a PNG, a CSV with the same header, a GraphML document;
* never: an empty path (an unset shell variable), the file-system root, the home folder, the
  current folder or a folder above it, a folder that holds an input of the run (the scenario
  and its tables), a path below a file, or a place that cannot be written (probed by
  creating and removing a file, which also holds for root, whom permission bits do not stop);
* commands that add files to a plan folder (verify, stress, operate, report) check that it
  is a plan folder and can be written before they simulate anything.

Refusals are `ScenarioError`s (exit 2) that name the flag, the path and what was expected.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from optimizer.base.errors import Origin, ScenarioError, shorten

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEMP_TAG = ".tmp-"  # temporary outputs are named .<target>.tmp-<pid>-<random>


@dataclass(frozen=True)
class FolderKind:
    """A kind of output folder: the file that marks it and every name fleetplan writes in it."""

    name: str
    marker: str
    files: frozenset[str]

    def owns(self, entry: str) -> bool:
        """A file fleetplan writes in such a folder, or a temporary one on its way there."""
        return entry in self.files or any(entry.startswith(f".{f}.") for f in self.files)


PLAN = FolderKind("plan folder", "summary.json", frozenset({
    "summary.json", "scenario.json", "procurement.csv", "nodes.csv", "pools.csv", "routing.csv", "slo.csv", "curves.csv",
    "plan.xlsx", "report.html", "verify.csv", "verify.json", "stress.csv", "stress.json", "operations.csv",
    "operations_sites.csv", "operations.json", "verify_trace.csv", "verify_trace.json", "verify_compare.csv",
    "verify_spot_loss.csv", "verify_spot_loss.json"}))
HORIZON = FolderKind("multi-year plan folder", "horizon.json", frozenset({
    "horizon.json", "scenario.json", "years.csv", "schedule.csv", "price_scenarios.csv", "report.html",
    *(f"year-{k}" for k in range(1, 6))}))
DEMAND = FolderKind("demand folder", "derived.json", frozenset({
    "demand.csv", "workloads.csv", "hours.csv", "lengths.csv", "scenario.yaml", "derived.json", "report.html",
    "day.png", "minutes.png", "lengths.png"}))
SWEEP = FolderKind("sweep folder", "sweep.csv", frozenset({"sweep.csv", "sweep.parquet", "tornado.png", "sweep.html"}))
COMPARISON = FolderKind("comparison folder", "compare.csv",
                        frozenset({"compare.csv", "routing_changes.csv", "compare.png", "compare.html"}))


def _refuse(flag: str, path, message: str) -> ScenarioError:
    return ScenarioError(message, Origin(f"{flag} {shorten(path)}"))


def _resolve(text, flag: str) -> Path:
    if text is None or not str(text).strip():
        raise ScenarioError("the path is empty (an unset shell variable?); expected a folder or file name",
                            Origin(flag))
    return Path(os.path.expanduser(str(text))).resolve()


def _never(path: Path, flag: str, raw) -> None:
    """Places no output may ever replace."""
    cwd = Path.cwd().resolve()
    if path == Path(path.anchor):
        raise _refuse(flag, raw, "refusing to write over the file-system root")
    if path == Path.home().resolve():
        raise _refuse(flag, raw, "refusing to write over your home folder")
    if path == cwd or path in cwd.parents:
        raise _refuse(flag, raw, "refusing to write over the current folder (or one above it); "
                                 "name a new folder, e.g. --out plan")


def _inputs_inside(path: Path, inputs, flag: str, raw, kind: FolderKind | None) -> None:
    for item in inputs or ():
        p = Path(item).resolve()
        if p == path or path in p.parents:
            if kind is not None and p.parent == path and kind.owns(p.name):
                continue  # a previous output of the same kind read as input (--from-plan into itself)
            raise _refuse(flag, raw, f"this holds an input of the run ({shorten(item)}); writing here would replace it — "
                                     "choose another path")


def _probe_writable(folder: Path, flag: str, raw) -> None:
    """Create and remove a file in ``folder``: the only test that holds for every user."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".fleetplan-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _refuse(flag, raw, f"cannot write in {shorten(folder)}: {exc.strerror or exc}") from None


def _nearest_existing(path: Path, flag: str, raw) -> Path:
    """The nearest existing ancestor of ``path``, which must be a folder."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise _refuse(flag, raw, f"{shorten(parent)} is a file, so nothing can be written below it")
            return parent
    return Path(path.anchor)


def folder_target(text, kind: FolderKind, *, flag: str = "--out", inputs=()) -> Path:
    """The resolved folder an output of ``kind`` may be written to (module docstring)."""
    path = _resolve(text, flag)
    _never(path, flag, text)
    _inputs_inside(path, inputs, flag, text, kind)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise _refuse(flag, text, f"this is an existing file, not a {kind.name}; fleetplan replaces only a "
                                      f"previous {kind.name} — choose a new folder name")
        entries = sorted(os.listdir(path))
        if entries:
            if kind.marker not in entries:
                raise _refuse(flag, text, f"this folder is not empty and is not a {kind.name} (no {kind.marker}); "
                                          f"fleetplan replaces only a previous {kind.name} — choose a new folder name")
            foreign = [e for e in entries if not kind.owns(e)]
            if foreign:
                listed = ", ".join(foreign[:5]) + (f", … ({len(foreign)} in all)" if len(foreign) > 5 else "")
                raise _refuse(flag, text, f"this {kind.name} also holds files fleetplan did not write ({listed}); "
                                          "move them or choose another folder")
        _probe_writable(path.parent, flag, text)
        _probe_writable(path, flag, text)
    else:
        _probe_writable(_nearest_existing(path, flag, text), flag, text)
    return path


def _same_kind_file(path: Path, kind: str, header: str | None) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096)
    if kind == "png":
        return head.startswith(PNG_SIGNATURE)
    if kind == "graphml":
        return b"<graphml" in head
    if kind == "csv":
        first = head.split(b"\n", 1)[0].strip(b"\r").decode("utf-8", "replace")
        return header is not None and first == header
    if kind == "calibration":  # YAML or JSON, the format marker near the top either way
        return b"fleetplan_calibration" in head
    raise ValueError(kind)


def _kind_name(kind: str) -> str:
    return kind if kind == "calibration" else kind.upper()


def file_target(text, kind: str, *, flag: str, header: str | None = None, inputs=()) -> Path:
    """The resolved path a file output of ``kind`` (png | csv | graphml | calibration) may be
    written to: absent, or a file of the same kind (a CSV with the same ``header``)."""
    path = _resolve(text, flag)
    _never(path, flag, text)
    for item in inputs or ():
        if Path(item).resolve() == path:
            raise _refuse(flag, text, "this is an input of the run; writing here would replace it")
    if path.is_dir():
        raise _refuse(flag, text, f"this is a folder; expected a {_kind_name(kind)} file name")
    if path.exists():
        if not path.is_file():
            raise _refuse(flag, text, f"this is not a regular file; expected a {_kind_name(kind)} file name")
        if not _same_kind_file(path, kind, header):
            what = f"a CSV with the header '{header}'" if kind == "csv" else f"a {_kind_name(kind)} file"
            raise _refuse(flag, text, f"an existing file that is not {what} fleetplan wrote; fleetplan replaces only "
                                      "its own output — choose a new file name")
        _probe_writable(path.parent, flag, text)
    else:
        _probe_writable(_nearest_existing(path, flag, text), flag, text)
    return path


def plan_folder_to_update(text, *, flag: str = "PLAN_DIR") -> Path:
    """A plan folder verify, stress, operate or report add files to: it must exist, be a plan
    folder and be writable — checked before any simulation runs."""
    path = _resolve(text, flag)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a folder"
        raise _refuse(flag, text, f"this {what}; expected a plan folder written by fleetplan plan")
    if not (path / PLAN.marker).is_file():
        raise _refuse(flag, text, f"not a plan folder (no {PLAN.marker}); expected a folder written by fleetplan plan")
    _probe_writable(path, flag, text)
    return path


# ---------------------------------------------------------------------------- writing


def temp_sibling(target: Path, folder: bool) -> Path:
    """A temporary file or folder beside ``target`` that renames onto it; leftovers of dead
    processes (a kill -9 mid-write) are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_leftovers(target)
    prefix = f".{target.name}{TEMP_TAG}{os.getpid()}-"
    if folder:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=target.suffix, dir=target.parent)  # the suffix: its format
    os.close(fd)
    return Path(name)


def sweep_leftovers(target: Path) -> None:
    """Remove temporary siblings of ``target`` whose writing process no longer runs."""
    prefix = f".{target.name}{TEMP_TAG}"
    try:
        entries = os.listdir(target.parent)
    except OSError:
        return
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        pid = entry[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            p = target.parent / entry
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def atomic_file(target: Path):
    """Yield a temporary path beside ``target``; on success it replaces ``target`` in one
    rename, on any failure (an interrupt included) it is removed."""
    tmp = temp_sibling(target, folder=False)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(target: Path, kind: FolderKind | None = None, inputs=()):
    """Yield a temporary folder beside ``target``; on success it replaces ``target`` in one
    rename (`replace_folder`; with ``kind``, the target checked again as `folder_target` does
    first), on any failure (an interrupt included) it is removed."""
    tmp = temp_sibling(target, folder=True)
    try:
        yield tmp
        replace_folder(tmp, folder_target(target, kind, inputs=inputs) if kind is not None else target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text_atomic(target: Path, text: str) -> None:
    with atomic_file(Path(target)) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes_atomic(target: Path, data: bytes) -> None:
    with atomic_file(Path(target)) as tmp:
        tmp.write_bytes(data)


RENAME_ATTEMPTS = 100  # concurrent writers of one folder: each pass of the loop lets one of them win


def replace_folder(new: Path, target: Path) -> None:
    """Move the finished folder ``new`` onto ``target``: the old one is renamed away first
    and removed once the new one is in place. Ctrl-C and SIGTERM wait for both renames
    (`signals_deferred`), so an interrupt leaves the old folder or the new one, never
    neither. Another writer swapping its own folder in at the same moment makes this one
    try again; the last to rename wins, and each writer's folder is whole."""
    old = temp_sibling(target, folder=True)
    try:
        with signals_deferred():
            for attempt in range(RENAME_ATTEMPTS):
                try:
                    os.rename(target, old / f"previous-{attempt}")
                except FileNotFoundError:
                    pass  # nothing there yet, or another writer has just moved its old folder away
                try:
                    os.rename(new, target)
                    return
                except OSError as exc:  # another writer's folder landed in between
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
            raise OSError(errno.EBUSY, f"{target} kept changing under {RENAME_ATTEMPTS} other writes")
    finally:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_files(targets: list[Path | None]):
    """Yield a temporary path beside each target (None stays None); on success all replace
    their targets together — Ctrl-C and SIGTERM wait until the last rename, so a command
    with several outputs leaves all of them or none new — on any failure all are removed."""
    temps = [temp_sibling(t, folder=False) if t is not None else None for t in targets]
    try:
        yield temps
        with signals_deferred():
            for tmp, target in zip(temps, targets):
                if tmp is not None:
                    os.chmod(tmp, 0o644)  # a temporary file is private; the output is not
                    os.replace(tmp, target)
    except BaseException:
        for tmp in temps:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- signals

DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred():
    """Hold Ctrl-C and SIGTERM while the block runs (the renames that put an output in
    place): one that arrives meanwhile is noted, and sent again once the block is done, to
    the handler it would have met. (Masking the signal would not do: Python runs its
    handlers in the main thread whichever thread the signal reaches, and libraries start
    threads of their own.) Outside the main thread, where no handler runs, nothing to do."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: caught.append(sig)) for sig in DEFERRED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for sig in caught:
            os.kill(os.getpid(), sig)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every write in progress is undone."""


@contextmanager
def terminate_as_interrupt():
    """While active, SIGTERM (what `timeout`, CI and schedulers send) in this process raises
    `Terminated`, so temporary outputs are removed exactly as for Ctrl-C. Worker processes
    forked meanwhile keep the default behaviour (they simply end)."""
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------------- spreadsheets

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame):
    """A copy of ``frame`` in which text cells a spreadsheet would run as a formula (starting
    with = + - @, tab or carriage return) are prefixed with an apostrophe, which spreadsheets
    show as text; `optimizer.folder.read` removes it again. Numbers are left alone."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or str(out[col].dtype) in ("string", "str"):
            out[col] = out[col].map(lambda v: "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v)
    return out


def unescape_text(value):
    """Undo `spreadsheet_safe` for one cell."""
    if isinstance(value, str) and len(value) > 1 and value[0] == "'" and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value


def write_csv(frame, target: Path, **options) -> None:
    """A table as CSV, spreadsheet-safe, written to a temporary file and renamed."""
    with atomic_file(Path(target)) as tmp:
        spreadsheet_safe(frame).to_csv(tmp, index=False, **options)


def save_png(fig, target: Path, dpi: int = 110) -> None:
    """A matplotlib figure as PNG (no software stamp, so equal plans give equal bytes),
    written to a temporary file and renamed; the figure is closed."""
    import matplotlib.pyplot as plt

    try:
        with atomic_file(Path(target)) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    finally:
        plt.close(fig)

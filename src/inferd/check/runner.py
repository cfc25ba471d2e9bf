"""``inferd check REPOSITORY...``: every model of the repositories checked as the server would load
it, without loading any; every problem printed, the exit status 1 when one is an error.

For each model: its config (``config.py``), then its model files for the versions the policy
selects (``files.py``) when the config holds no error beyond single tensors, then, with every
model known, each ensemble against its steps' models (``ensembles.py``). Names found in two
repositories are errors on each folder, as the server loads neither (with ``--model-namespacing``
each is a model of its own repository, as the server's).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from inferd.backends.registry import get_backend
from inferd.backends.sequence_io import sequence_tensors
from inferd.backends.tritonc.search import DEFAULT_BACKEND_DIRECTORY, set_backend_directory
from inferd.check.config import CheckOptions, ModelResult, check_config
from inferd.check.ensembles import check_ensemble
from inferd.check.files import collect, signature_check
from inferd.check.report import ModelReport, Problem
from inferd.errors import InferdError
from inferd.gpu.devices import MIN_COMPUTE_CAPABILITY, supported_gpus
from inferd.repository import DUPLICATE_REASON, DuplicateModel, ModelDir, scan_repositories
from inferd.repository.scan import key_name, key_namespace, scan_namespaced

__all__ = ["add_arguments", "check_repositories", "run"]


def check_repositories(
    paths: Sequence[Path], options: CheckOptions | None = None
) -> tuple[list[Problem], int]:
    """Every problem of the models in ``paths`` (sorted by file and position), and how many models."""
    options = options or CheckOptions()
    problems: list[Problem] = []
    readable = []
    seen: set[Path] = set()
    for repository in paths:
        if repository.resolve() in seen:  # named twice: its models are not duplicates of themselves
            continue
        seen.add(repository.resolve())
        if repository.is_dir():
            readable.append(repository)
        else:
            problems.append(Problem(repository, "not a model repository: no such directory"))
    found: dict[str, ModelDir | DuplicateModel] = {}
    try:
        found = dict(scan_namespaced(readable) if options.model_namespacing else scan_repositories(readable))
    except InferdError as e:
        problems.append(Problem(readable[0] if readable else Path("."), e.message))
    results: dict[str, ModelResult] = {}
    duplicates: set[str] = set()
    for name, entry in found.items():
        if isinstance(entry, DuplicateModel):
            duplicates.add(name)
            for path in entry.paths:
                others = ", ".join(str(p) for p in entry.paths if p != path)
                problems.append(
                    Problem(path, f"'{name}': {DUPLICATE_REASON} (also {others}): none of them loads")
                )
            continue
        report = ModelReport(entry.path, problems)
        try:
            result = check_config(entry, options, report)
            results[name] = result
            if result.complete and result.blocking == 0:
                check_model_files(result, options)
        except Exception as e:  # a framework that fails to import, a bug: the other models go on
            report.file(entry.path, f"not checked to the end: {type(e).__name__}: {e}")
    for result in results.values():
        if result.complete and result.cfg.platform == "ensemble":
            try:
                if options.model_namespacing:
                    view, ambiguous = _namespace_view(result, results)
                    check_ensemble(result, view, set(), ambiguous)
                    continue
                check_ensemble(result, results, duplicates)
            except Exception as e:
                result.report.file(result.md.path, f"ensemble not checked: {type(e).__name__}: {e}")
    unique = list(dict.fromkeys(problems))
    unique.sort(key=Problem.sort_key)
    return unique, len(found)


def _namespace_view(
    ensemble: ModelResult, results: dict[str, ModelResult]
) -> tuple[dict[str, ModelResult], frozenset[str]]:
    """What an ensemble's steps name under ``--model-namespacing``: the models of its own repository,
    else the one model of that name in another; names two others hold (and its own does not) are
    ambiguous, as the server refuses them."""
    holders: dict[str, list[str]] = {}
    for key in results:
        holders.setdefault(key_name(key), []).append(key)
    own = key_namespace(ensemble.md.key)
    view = {name: results[keys[0]] for name, keys in holders.items() if len(keys) == 1}
    view.update({key_name(k): r for k, r in results.items() if key_namespace(k) == own})
    ambiguous = frozenset(n for n, keys in holders.items() if len(keys) > 1 and n not in view)
    return view, ambiguous


def check_model_files(result: ModelResult, options: CheckOptions) -> None:
    """The model file of each selected version, and the model's tensors against the config."""
    cfg, report, md = result.cfg, result.report, result.md
    if cfg.platform == "ensemble":
        return
    for version in result.versions:
        version_dir = md.versions[version]
        if cfg.backend == "python":
            model_py = version_dir / (cfg.default_model_filename or "model.py")
            if not model_py.is_file():
                report.file(version_dir, f"no {model_py.name} in version {version} of model '{cfg.name}'")
            continue
        model_type = getattr(get_backend(cfg.backend), "model_type", None)
        if model_type is not None:
            try:
                model_type.find(cfg, version_dir)
            except InferdError as e:
                report.file(version_dir, e.message)
                continue
        how = signature_check(cfg.backend)
        if how is None:
            continue
        if isinstance(how, str):
            if options.verbose:
                report.file(version_dir, how, "note")
            continue
        read, check = how
        try:
            signature = read(cfg, version_dir)
        except InferdError as e:
            report.file(version_dir, e.message)
            continue
        sequence = sequence_tensors(cfg) if cfg.backend == "onnxruntime" else ([], [])

        def tell(message: str, tensor: str | None) -> None:
            base: tuple[str | int, ...] = ("input",)
            if tensor is not None:
                kind = "output" if any(o.name == tensor for o in cfg.output) else "input"
                listed = [t.name for t in getattr(cfg, kind)]
                if tensor in listed:
                    base = report.element(kind, tensor, listed.index(tensor))
            report.config(message, base)

        collect(cfg, signature, check, sequence, result.bad_tensors, tell)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's arguments (the server's flag names where it has one)."""
    parser.add_argument("repositories", nargs="+", type=Path, metavar="REPOSITORY", help="model repositories")
    parser.add_argument(
        "--import-python",
        action="store_true",
        help="import Python models' model.py to run their auto_complete_config (not done by default)",
    )
    parser.add_argument(
        "--strict-model-config",
        action="store_true",
        help="check configs as the server's --strict-model-config loads them (no auto-complete)",
    )
    parser.add_argument(
        "--model-config-name", default=None, metavar="NAME", help="read configs/<NAME>.pbtxt where present"
    )
    parser.add_argument(
        "--default-max-batch-size",
        type=int,
        default=4,
        metavar="N",
        help="max_batch_size auto-complete gives batching models (--backend-config=default-max-batch-size)",
    )
    parser.add_argument(
        "--min-supported-compute-capability",
        type=float,
        default=MIN_COMPUTE_CAPABILITY,
        metavar="MAJOR.MINOR",
        help="KIND_GPU groups may name this machine's GPUs of at least this compute capability (as the server)",
    )
    parser.add_argument(
        "--backend-directory",
        default=DEFAULT_BACKEND_DIRECTORY,
        metavar="DIR",
        help="where C/C++ backends (<DIR>/<name>/libtriton_<name>.so) and Python-based backends "
        "(<DIR>/<name>/model.py) are found, as the server's",
    )
    parser.add_argument(
        "--model-namespacing",
        nargs="?",
        const="true",
        default="false",
        type=str.lower,
        choices=("true", "false", "1", "0", "yes", "no", "on", "off"),
        help="a name in two repositories is a model in each, an ensemble's step its own repository's "
        "first (as the server's --model-namespacing)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="also print notes: what was not checked")


def run(args: argparse.Namespace) -> int:
    """Check, print every problem (stdout) and a summary (stderr); 1 if any is an error."""
    # backends log what auto-complete filled in: the checker's answer is its problem list
    logging.getLogger("inferd").setLevel(logging.WARNING if args.verbose else logging.ERROR)
    set_backend_directory(args.backend_directory)  # the one the backends' look-ups read (one process)
    options = CheckOptions(
        model_namespacing=args.model_namespacing in ("true", "1", "yes", "on"),
        strict_model_config=args.strict_model_config,
        config_name=args.model_config_name,
        default_max_batch_size=args.default_max_batch_size,
        import_python=args.import_python,
        verbose=args.verbose,
        gpus=supported_gpus(args.min_supported_compute_capability),
    )
    problems, models = check_repositories(args.repositories, options)
    for problem in problems:
        print(problem)
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = sum(1 for p in problems if p.severity == "warning")
    print(f"inferd check: {models} model(s), {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return 1 if errors else 0

"""hvdrun --config-file: Horovod's YAML config file, mapped onto hvdrun's flags.

The file's sections and keys are Horovod's (docs/running.md, "Config file"). A value from the
file fills a flag only where the command line left it unset (None, or False for an on/off
flag: such a flag can only be switched on there), so flags given on the command line win.

Keys Horovod defines but that set nothing in horovod_cpp (NCCL streams, oneCCL, Bayesian
optimization, MPI threading, hierarchical allgather, log timestamps) are accepted with a
warning naming them, so that a Horovod user's file runs and they learn what it does not do;
keys Horovod does not define either (a typo, another tool's setting) are refused.
"""

import argparse

from . import arg_types


class ConfigError(Exception):
    """The file cannot be used as given; the message names the file and the key."""


#: The converter of a true/false key (YAML's booleans only, as Horovod's file has them).
_BOOL = object()


def _text(value):
    if not isinstance(value, str) or not value:
        raise argparse.ArgumentTypeError(f"must be a non-empty string, got {value!r}")
    return value


def _log_level(value):
    if not isinstance(value, str) or value.upper() not in arg_types.LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(arg_types.LOG_LEVELS)}, got {value!r}")
    return value.upper()


#: (section, key) -> (hvdrun's args attribute, converter, or _BOOL for true/false). A
#: converter takes a number's YAML value as text; `enabled` keys are handled in apply().
KEYS = {
    ("params", "fusion_threshold_mb"): ("fusion_threshold_mb", arg_types.non_negative_float),
    ("params", "cycle_time_ms"): ("cycle_time_ms", arg_types.non_negative_float),
    ("params", "cache_capacity"): ("cache_capacity", arg_types.non_negative_int),
    ("params", "hierarchical_allreduce"): ("hierarchical_allreduce", _BOOL),
    ("autotune", "log_file"): ("autotune_log_file", _text),
    ("autotune", "warmup_samples"): ("autotune_warmup_samples",
                                     arg_types.int_up_to(arg_types.WARMUP_SAMPLES_MAX)),
    ("autotune", "steps_per_sample"): ("autotune_steps_per_sample",
                                       arg_types.int_up_to(arg_types.STEPS_PER_SAMPLE_MAX)),
    ("timeline", "filename"): ("timeline_filename", _text),
    ("timeline", "mark_cycles"): ("timeline_mark_cycles", _BOOL),
    ("stall_check", "warning_time_seconds"): ("stall_check_warning_time_seconds",
                                              arg_types.non_negative_float),
    ("stall_check", "shutdown_time_seconds"): ("stall_check_shutdown_time_seconds",
                                               arg_types.non_negative_float),
    ("library_options", "gloo_timeout_seconds"): ("gloo_timeout_seconds",
                                                  arg_types.non_negative_float),
    ("logging", "level"): ("log_level", _log_level),
}

#: Keys Horovod's file has that horovod_cpp has nothing for, and why (the warning's words).
NO_EFFECT = {
    ("params", "hierarchical_allgather"): "allgather has no hierarchical variant here",
    ("autotune", "bayes_opt_max_samples"): "autotune here is not Bayesian optimization",
    ("autotune", "gaussian_process_noise"): "autotune here is not Bayesian optimization",
    ("library_options", "mpi_threads_disable"):
        "horovod_cpp always needs MPI_THREAD_MULTIPLE under MPI",
    ("library_options", "num_nccl_streams"): "horovod_cpp uses one NCCL stream per device",
    ("library_options", "ccl_bgt_affinity"): "there is no oneCCL backend",
    ("logging", "with_timestamp"): "horovod_cpp's log lines carry no time stamp to hide",
}

#: `enabled` keys: section -> (attribute, value of the attribute when enabled is true,
#: default of enabled when the section is there without it), as in Horovod.
ENABLED = {
    "autotune": ("autotune", True, False),
    "stall_check": ("no_stall_check", False, True),
}

SECTIONS = ("controller", "params", "autotune", "timeline", "stall_check", "library_options",
            "logging")


def load(path):
    """The parsed file (a dict). ConfigError: no PyYAML, no such file, not YAML, not a mapping."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ConfigError(f"--config-file {path}: reading it needs PyYAML, which is not "
                          "installed (pip install pyyaml, or Debian's python3-yaml)") from e
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"--config-file {path}: cannot read it: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"--config-file {path}: not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config-file {path}: expected a mapping of sections "
                          f"({', '.join(SECTIONS)}), got {type(data).__name__}")
    return data


def _convert(path, where, value, convert):
    if convert is _BOOL:
        if not isinstance(value, bool):
            raise ConfigError(f"--config-file {path}: {where} must be true or false, "
                              f"got {value!r}")
        return value
    if isinstance(value, bool) or value is None:  # YAML's true/null are not numbers or paths
        raise ConfigError(f"--config-file {path}: {where}: got {value!r}")
    try:
        return convert(value if convert in (_text, _log_level) else str(value))
    except (argparse.ArgumentTypeError, ValueError) as e:
        raise ConfigError(f"--config-file {path}: {where} {e}") from e


def _fill(args, attr, value):
    """Sets `attr` unless the command line did (None / False means it did not)."""
    current = getattr(args, attr)
    if current is None or current is False:  # not `in (None, False)`: 0 == False
        setattr(args, attr, value)


def apply(args, data, path):
    """Fills hvdrun's unset flags from `data` (load(path)); returns the warnings to print (keys
    without effect). ConfigError names the first key that is unknown or has a bad value."""
    warnings = []
    for section, body in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"--config-file {path}: unknown section {section!r} (Horovod's "
                              f"are {', '.join(SECTIONS)})")
        if section == "controller":
            if not isinstance(body, str) or body.lower() not in ("gloo", "mpi"):
                raise ConfigError(f"--config-file {path}: controller must be gloo or mpi, "
                                  f"got {body!r}")
            if args.gloo is None:
                args.gloo = body.lower() == "gloo"
            continue
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"--config-file {path}: section {section} must be a mapping of "
                              f"keys, got {body!r}")
        for key, value in body.items():
            where = f"{section}.{key}"
            if key == "enabled" and section in ENABLED:
                continue
            if (section, key) in NO_EFFECT:
                warnings.append(f"--config-file {path}: {where} has no effect in horovod_cpp "
                                f"({NO_EFFECT[(section, key)]}); ignored")
                continue
            if (section, key) not in KEYS:
                raise ConfigError(f"--config-file {path}: unknown key {where} (not one of "
                                  "Horovod's config file keys; see docs/running.md)")
            attr, convert = KEYS[(section, key)]
            _fill(args, attr, _convert(path, where, value, convert))
        if section in ENABLED:
            attr, when_enabled, default = ENABLED[section]
            enabled = _convert(path, f"{section}.enabled", body.get("enabled", default), _BOOL)
            _fill(args, attr, when_enabled if enabled else not when_enabled)
    return warnings

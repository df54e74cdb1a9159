"""The value checks of hvdrun's flags, shared by the command line (cli.py) and the config file
(config_file.py): each takes the value as text and returns it converted, or raises
argparse.ArgumentTypeError with the reason."""

import argparse


def positive_int(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def non_negative_float(text):
    v = float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def non_negative_int(text):
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def int_up_to(most):
    """An argparse type: an integer in [0, most] (the library's own bounds for the variable)."""
    def check(text):
        v = non_negative_int(text)
        if v > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}, got {v}")
        return v
    return check


LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")

#: The library's bounds for HOROVOD_AUTOTUNE_WARMUP_SAMPLES and _STEPS_PER_SAMPLE (config.cc).
WARMUP_SAMPLES_MAX = 1000
STEPS_PER_SAMPLE_MAX = 1000000

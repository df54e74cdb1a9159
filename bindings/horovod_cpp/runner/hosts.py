"""Where the ranks go: host lists from -H, a hostfile, Slurm or the MPI Operator.

Every source is turned into the same thing, an ordered list of ``(host, slots)`` pairs. These
functions are pure (no network, no subprocess) so they are unit-tested with real values.
"""

import os
import re


class HostError(ValueError):
    """A host list, hostfile or Slurm variable that cannot be understood."""


#: A host name or IPv4 address: letters, digits, '.', '-' and '_' (found in /etc/hosts names),
#: starting with a letter, a digit or '_'. Names reach mpirun's -H (where ',' separates hosts
#: and ':' slots) and, through Open MPI's rsh agent, ssh's command line (where a leading '-'
#: is an option): anything else is refused rather than passed on.
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")


def check_host_name(name, where):
    """Raises HostError naming `where` and the entry unless `name` is a plain host name."""
    if _HOST_NAME.fullmatch(name):
        return
    if name.startswith("-"):
        why = "it starts with '-' (ssh would take it as an option)"
    elif "," in name:
        why = "it holds a ',' (mpirun would take it as several hosts)"
    elif len(name) > 253:
        why = "it is longer than 253 characters"
    else:
        why = "a host name has only letters, digits, '.', '-' and '_', and starts with a " \
              "letter, a digit or '_'"
    raise HostError(f"{where}: host {name!r} is refused: {why}")


def parse_hosts(text):
    """Parses Horovod's ``-H`` syntax: ``a:4,b:4`` (``a`` alone means one slot).

    Returns a list of (host, slots). A host named twice is an error (Horovod's rule too): the
    slots would be ambiguous.
    """
    hosts = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise HostError(f"-H {text!r}: empty host entry (expected host:slots,host:slots)")
        name, sep, slots = item.rpartition(":")
        if not sep:
            name, slots = item, "1"
        if not name:
            raise HostError(f"-H {text!r}: entry {item!r} has no host name")
        try:
            n = int(slots)
        except ValueError:
            raise HostError(f"-H {text!r}: slots of host {name!r} must be an integer, "
                            f"got {slots!r}") from None
        if n < 1:
            raise HostError(f"-H {text!r}: host {name!r} has {n} slots; it needs at least 1")
        hosts.append((name, n))
    _check_unique(hosts, f"-H {text!r}")
    return hosts


def parse_hostfile(path):
    """Parses a hostfile in Horovod's (and Open MPI's) format: one ``host slots=N`` per line.

    ``#`` starts a comment; a line with a host alone means one slot; ``max_slots=`` is ignored.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise HostError(f"--hostfile {path}: cannot read it: {e.strerror}") from None
    hosts = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        name, slots = fields[0], 1
        check_host_name(name, f"{path}:{lineno}")
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if key == "slots" and sep:
                try:
                    slots = int(value)
                except ValueError:
                    raise HostError(f"{path}:{lineno}: slots of host {name!r} must be an "
                                    f"integer, got {value!r}") from None
            elif key != "max_slots":
                raise HostError(f"{path}:{lineno}: unknown field {field!r} for host {name!r} "
                                "(expected 'host slots=N')")
        if slots < 1:
            raise HostError(f"{path}:{lineno}: host {name!r} has {slots} slots; it needs at "
                            "least 1")
        hosts.append((name, slots))
    if not hosts:
        raise HostError(f"--hostfile {path}: no hosts in it")
    _check_unique(hosts, f"--hostfile {path}")
    return hosts


def expand_nodelist(text):
    """Expands a Slurm node list: ``node[01-04,07],gpu-a1`` -> node01..node04, node07, gpu-a1.

    Handles several bracket groups in one name (``r[1-2]n[1-2]``) and keeps zero padding.
    """
    names = []
    for part in _split_top_level(text):
        names.extend(_expand_one(part))
    return names


def expand_tasks_per_node(text):
    """Expands SLURM_TASKS_PER_NODE: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts = []
    for item in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if not m:
            raise HostError(f"SLURM_TASKS_PER_NODE={text!r}: cannot read {item!r} "
                            "(expected N or N(xM))")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def slurm_hosts(env=None):
    """Hosts and slots of the current Slurm allocation, or None outside Slurm.

    Uses SLURM_JOB_NODELIST (or SLURM_NODELIST) and SLURM_TASKS_PER_NODE; without the latter,
    one slot per node.
    """
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        return None
    nodes = expand_nodelist(nodelist)
    tasks = env.get("SLURM_TASKS_PER_NODE")
    counts = expand_tasks_per_node(tasks) if tasks else [1] * len(nodes)
    if len(counts) != len(nodes):
        raise HostError(f"Slurm: SLURM_JOB_NODELIST={nodelist!r} names {len(nodes)} nodes but "
                        f"SLURM_TASKS_PER_NODE={tasks!r} gives {len(counts)} counts")
    hosts = list(zip(nodes, counts))
    _check_unique(hosts, f"Slurm: SLURM_JOB_NODELIST={nodelist!r}")
    return hosts


def format_hosts(hosts):
    """The ``-H`` form of a host list, as Open MPI's mpirun takes it."""
    return ",".join(f"{h}:{n}" for h, n in hosts)


def total_slots(hosts):
    return sum(n for _, n in hosts)


def _check_unique(hosts, where):
    """Every name valid (check_host_name) and listed once."""
    seen = set()
    for name, _ in hosts:
        check_host_name(name, where)
        if name in seen:
            raise HostError(f"{where}: host {name!r} is listed twice")
        seen.add(name)


def _split_top_level(text):
    """Splits at commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostError(f"Slurm node list {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostError(f"Slurm node list {text!r}: unbalanced '['")
    parts.append("".join(cur))
    out = [p.strip() for p in parts]
    if any(not p for p in out):
        raise HostError(f"Slurm node list {text!r}: empty entry")
    return out


def _expand_one(name):
    m = re.search(r"\[([^\]]*)\]", name)
    if not m:
        return [name]
    prefix, suffix = name[:m.start()], name[m.end():]
    out = []
    for rng in m.group(1).split(","):
        lo, sep, hi = rng.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostError(f"Slurm node list entry {name!r}: cannot read range {rng!r}")
        width = len(lo)
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise HostError(f"Slurm node list entry {name!r}: range {rng!r} goes backwards")
        for i in range(a, b + 1):
            for rest in _expand_one(suffix):
                out.append(f"{prefix}{i:0{width}d}{rest}")
    return out

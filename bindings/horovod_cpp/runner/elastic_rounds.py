"""The membership logic of an elastic job (issue 37): who is in which generation, where new
workers go, which host is blacklisted, when a round starts and when the job ends.

Pure: no process, no socket, no clock and no randomness of its own (time comes in as `now`,
the cooldown's randomness from the `rng` given). The driver (elastic_driver.py, or a Ray
executor) feeds it events and carries out the commands it returns, in order:

    SetKey(key, value)        write a store key (assignments, `end,<reason>`, hosts_updated,
                              abort)
    Start(wid, host, slot)    start a new worker (its `assign/<wid>/0` was set just before)
    Terminate(wid)            stop a worker (SIGTERM, then SIGKILL)
    Finish(rc, message)       the job is over with this exit status (message: why, or "")
    Note(message)             tell the user (e.g. why the job waits)

Events: `discovered(hosts)`, `exited(wid, rc)`, `ready(wid)` (the store holds the key
`ready_key(wid)`), and `tick()` for the timeouts. The rules are the elastic contract's
(docs/running.md, "Elastic jobs").
"""

from collections import namedtuple

from .gloo_launch import Place, assignment

SetKey = namedtuple("SetKey", "key value")
Start = namedtuple("Start", "wid host slot")
Terminate = namedtuple("Terminate", "wid")
Finish = namedtuple("Finish", "rc message")
Note = namedtuple("Note", "message")

#: Settings of the rounds (seconds for times). max_np None = no bound; cooldown None = a
#: blacklisted host never comes back (Horovod's default); reset_limit None = no limit.
#: start_timeout: how long a started worker may take to reach its first init() (importing a
#: framework on a loaded machine takes longer than the ready timeout); None = ready_timeout.
Settings = namedtuple("Settings", "np min_np max_np reset_limit cooldown elastic_timeout "
                                  "ready_timeout start_timeout", defaults=(None,))

# States of a worker.
RUNNING, READY, GONE = "running", "ready", "gone"


class _Worker:
    """One process: its id, host and slot, the init count `n` of its current assignment, and
    its state."""

    def __init__(self, wid, host, slot):
        self.wid, self.host, self.slot = wid, host, slot
        self.n = 0
        self.state = RUNNING
        self.started = None  # when it was started, until it is first seen ready


class _Blacklist:
    """Blacklisted hosts: for how long, and how often each was blacklisted."""

    def __init__(self, cooldown, rng):
        self._cooldown = cooldown
        self._rng = rng
        self._until = {}
        self._count = {}
        self._cooling = set()  # hosts whose cooldown's end is not yet reported

    def add(self, host, now):
        """Blacklists `host`. With a cooldown range (lo, hi) it comes back after
        lo * 2^(times before) plus a random part of up to lo, at most hi seconds."""
        k = self._count.get(host, 0)
        self._count[host] = k + 1
        if self._cooldown is None:
            self._until[host] = float("inf")
            return
        lo, hi = self._cooldown
        self._until[host] = now + min(hi, lo * (1 << min(k, 30)) + self._rng.uniform(0, lo))
        self._cooling.add(host)

    def ended(self, now):
        """Hosts whose cooldown ended since the last call (each reported once)."""
        out = sorted(h for h in self._cooling if self._until[h] <= now)
        self._cooling.difference_update(out)
        return out

    def blocked(self, host, now):
        return self._until.get(host, -1.0) > now


def ready_key(wid, n):
    """The key a worker's init() number `n` sets just before it reads its assignment."""
    return f"ready/{wid}/{n}"


def assign_key(wid, n):
    return f"assign/{wid}/{n}"


def abort_key(generation):
    """Set (to the reason) when a member of `generation` is lost: the workers still connecting
    that membership stop waiting for the lost one and announce themselves for the next."""
    return f"elastic/abort/{generation}"


def hosts_updated_key(generation):
    return f"elastic/hosts_updated/{generation}"


def places_for(members):
    """Places of `members` [(wid, host)] in rank order: local ranks count per host in rank
    order; hosts are ordered by first appearance; cross ranks as gloo_launch.place_workers
    gives them (among the hosts that have a worker of that local rank)."""
    hosts, per_host = [], {}
    for _, host in members:
        if host not in per_host:
            hosts.append(host)
            per_host[host] = 0
        per_host[host] += 1
    seen = {h: 0 for h in hosts}
    out = []
    for rank, (_, host) in enumerate(members):
        local = seen[host]
        seen[host] += 1
        cross_hosts = [h for h in hosts if per_host[h] > local]
        out.append(Place(rank, len(members), local, per_host[host], cross_hosts.index(host),
                         len(cross_hosts), host))
    return out


class Rounds:
    """The membership state machine. `settings`: a Settings; `rng`: random.Random (or any
    object with uniform(a, b)) for the blacklist cooldown."""

    def __init__(self, settings, rng):
        self.s = settings
        self.generation = -1  # no generation placed yet
        self.resets = 0
        self.hosts = []  # [(host, slots)] from the last discovery, in its order
        self.workers = {}  # wid -> _Worker (every process ever started)
        self.members = []  # wids of the current generation, in rank order
        self.blacklist = _Blacklist(settings.cooldown, rng)
        self._starts = {}  # (host, slot) -> how many workers were started there
        self._round_since = None  # when the pending round's first ready (or trigger) came
        self._pending = False  # a round must be formed (a failure, removal, ready, add)
        self._short_since = None  # since when too few workers are available (min-np wait)
        self._finishing = False  # a member exited 0: no more rounds
        self._failure = None  # (rc, message) of the first failure while finishing
        self._hosts_flagged = -1  # the generation whose hosts_updated key is set
        self._done = False

    # ---- queries ---------------------------------------------------------------------------
    def place_of(self, wid):
        """The worker's place in the current generation, or None."""
        if wid not in self.members:
            return None
        return places_for([(m, self.workers[m].host) for m in self.members])[
            self.members.index(wid)]

    def ready_keys(self):
        """[(wid, key)]: the ready keys the driver should look for (running members)."""
        return [(w, ready_key(w, self.workers[w].n + 1)) for w in self.members
                if self.workers[w].state == RUNNING]

    def alive(self):
        """Wids of the processes the driver should still have running."""
        return [w for w, x in self.workers.items() if x.state != GONE]

    # ---- events ----------------------------------------------------------------------------
    def discovered(self, hosts, now):
        """The discovery's latest list [(host, slots)]. Workers on hosts no longer listed are
        terminated (their hosts are not blacklisted); new capacity signals hosts_updated."""
        if self._done:
            return []
        before = dict(self.hosts)
        self.hosts = list(hosts)
        after = dict(self.hosts)
        out = []
        for w in list(self.alive()):
            x = self.workers[w]
            if x.host not in after:
                out += self._drop(x, now, blacklist=False)
        grew = any(after[h] > before.get(h, 0) for h in after)
        if self.generation < 0:
            return out + self._first(now)
        if grew:
            out += self._flag_hosts_updated(now)
        return out + self._form(now)

    def exited(self, wid, rc, now):
        """A worker process ended with status `rc` (negative: killed by signal -rc)."""
        x = self.workers.get(wid)
        if x is None or x.state == GONE or self._done:
            return []
        x.state = GONE
        in_gen = wid in self.members
        if rc == 0:
            if in_gen:
                self._finishing = True
                return self._form(now)
            return []
        self.blacklist.add(x.host, now)
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        msg = f"worker {wid} on host {x.host} {how}"
        if self._finishing:
            self._failure = self._failure or (128 - rc if rc < 0 else rc, msg)
            return self._form(now)
        out = self._trigger(now, msg) if in_gen else []
        return out + self._form(now)

    def ready(self, wid, now):
        """The store holds ready_key(wid, n + 1): the worker waits for its next assignment."""
        x = self.workers.get(wid)
        if x is None or x.state != RUNNING or wid not in self.members or self._done:
            return []
        x.state = READY
        x.started = None
        if self._round_since is None:
            self._round_since = now
        self._pending = True
        return self._form(now)

    def tick(self, now):
        """Time passed: cooldowns end, ready and min-np timeouts run out."""
        if self._done:
            return []
        out = []
        if self.generation < 0:
            return self._first(now)
        listed = {h for h, _ in self.hosts}
        if any(h in listed for h in self.blacklist.ended(now)):
            out += self._flag_hosts_updated(now)
        return out + self._form(now)

    # ---- internals -------------------------------------------------------------------------
    def _trigger(self, now, why):
        """A member failed or was removed: survivors learn of it within the op timeout, so
        the ready timeout runs from now (no wait without bound if none comes). Members still
        connecting the generation (the lost one may have been counted in just before it went)
        learn of it from the abort key."""
        self._pending = True
        if self._round_since is None:
            self._round_since = now
        return [SetKey(abort_key(self.generation), why)]

    def _flag_hosts_updated(self, now):
        """Sets elastic/hosts_updated/<g> when the current generation can grow: a free slot
        on a usable host, below --max-np."""
        if self._finishing or self._hosts_flagged == self.generation:
            return []
        if self.s.max_np is not None and len(self.members) >= self.s.max_np:
            return []
        if not self._free_slots(now):
            return []
        self._hosts_flagged = self.generation
        return [SetKey(hosts_updated_key(self.generation), "1")]

    def _free_slots(self, now):
        """[(host, slot)] free on non-blacklisted listed hosts, in host then slot order."""
        used = {(x.host, x.slot) for x in self.workers.values() if x.state != GONE}
        out = []
        for h, slots in self.hosts:
            if self.blacklist.blocked(h, now):
                continue
            out += [(h, s) for s in range(slots) if (h, s) not in used]
        return out

    def _new_worker(self, host, slot):
        k = self._starts.get((host, slot), 0)
        self._starts[(host, slot)] = k + 1
        wid = f"{host}:{slot}" if k == 0 else f"{host}:{slot}.{k}"
        x = _Worker(wid, host, slot)
        self.workers[wid] = x
        return x

    def _first(self, now):
        """Generation 0 once at least min-np slots are available."""
        free = self._free_slots(now)
        want = len(free) if self.s.np is None else min(self.s.np, len(free))
        if self.s.max_np is not None:
            want = min(want, self.s.max_np)
        if want < self.s.min_np:
            return self._short(now, want)
        self._short_since = None
        new = [self._new_worker(h, s) for h, s in free[:want]]
        return self._assign([], new, now)

    def _short(self, now, have):
        """Too few workers: wait up to the elastic timeout, then end the job."""
        if self._short_since is None:
            self._short_since = now
            # Said once per wait: with every host blacklisted (all workers failed, e.g. the
            # program itself is broken) only new hosts from discovery can end the wait early.
            return [Note(f"{have} workers available, fewer than --min-np {self.s.min_np}: "
                         f"waiting up to --elastic-timeout {self.s.elastic_timeout:g} s for "
                         f"hosts (hosts: {self._describe_hosts(now)})")]
        if now - self._short_since < self.s.elastic_timeout:
            return []
        return self._end(1, f"only {have} workers available, fewer than --min-np "
                            f"{self.s.min_np}, for --elastic-timeout "
                            f"{self.s.elastic_timeout:g} s (hosts: "
                            f"{self._describe_hosts(now)})")

    def _describe_hosts(self, now):
        if not self.hosts:
            return "none discovered"
        return ", ".join(f"{h}:{n}" + (" blacklisted" if self.blacklist.blocked(h, now) else "")
                         for h, n in self.hosts)

    def _form(self, now):
        """Forms the next generation when the pending round can be: every running member is
        ready, or the ready timeout dropped the late ones."""
        if self._done:
            return []
        if self._finishing:
            return self._finish_check()
        if not self._pending:
            return []
        out = []
        running = [self.workers[w] for w in self.members if self.workers[w].state == RUNNING]
        if running:
            if self._round_since is None or now - self._round_since < self.s.ready_timeout:
                return []
            start = self.s.ready_timeout if self.s.start_timeout is None else self.s.start_timeout
            if any(x.started is not None and now - x.started < start for x in running):
                return []  # one is still starting: it may yet come
            for x in running:  # not ready in time: e.g. its network is cut
                out += self._drop(x, now, blacklist=True)
        survivors = [self.workers[w] for w in self.members if self.workers[w].state == READY]
        free = self._free_slots(now)
        room = len(free) if self.s.max_np is None else max(0, self.s.max_np - len(survivors))
        size = len(survivors) + min(room, len(free))
        if size < self.s.min_np:
            return out + self._short(now, size)
        if self.s.reset_limit is not None and self.resets >= self.s.reset_limit:
            return out + self._end(1, f"the reset limit ({self.s.reset_limit}) is reached: "
                                      f"generation {self.generation + 1} would be reset "
                                      f"{self.resets + 1}")
        self.resets += 1
        self._short_since = None
        new = [self._new_worker(h, s) for h, s in free[:size - len(survivors)]]
        return out + self._assign(survivors, new, now)

    def _assign(self, survivors, new, now):
        """The next generation: survivors (rank order kept) then new workers."""
        for x in new:
            x.started = now
        self.generation += 1
        self._pending = False
        self._round_since = None
        members = survivors + new
        self.members = [x.wid for x in members]
        out = []
        places = places_for([(x.wid, x.host) for x in members])
        for x, place in zip(members, places):
            if x in survivors:
                x.n += 1
            x.state = RUNNING
            out.append(SetKey(assign_key(x.wid, x.n), assignment(place, self.generation)))
        out += [Start(x.wid, x.host, x.slot) for x in new]
        return out

    def _drop(self, x, now, blacklist):
        """Ends worker `x` (host removed, or not ready in time) and forgets it."""
        x.state = GONE
        if blacklist:
            self.blacklist.add(x.host, now)
        out = [Terminate(x.wid)]
        if x.wid in self.members:
            why = (f"worker {x.wid} on host {x.host} was not ready in time" if blacklist
                   else f"host {x.host} of worker {x.wid} is no longer discovered")
            out += self._trigger(now, why)
        return out

    def _finish_check(self):
        """While finishing: ready workers are told to end; when no member runs, Finish."""
        out = []
        for w in self.members:
            x = self.workers[w]
            if x.state == READY:
                x.state = GONE
                out.append(SetKey(assign_key(w, x.n + 1),
                                  "end,the job is finishing: another worker already exited 0"))
                self._failure = self._failure or (
                    1, f"worker {w} asked for a new membership after another worker of "
                       f"generation {self.generation} had exited 0")
        if any(self.workers[w].state != GONE for w in self.members):
            return out
        self._done = True
        if self._failure:
            return out + [Finish(*self._failure)]
        return out + [Finish(0, "")]

    def _end(self, rc, reason):
        """Ends the job: waiting workers get `end,<reason>` (the driver gives them a moment to
        exit), running ones are terminated."""
        self._done = True
        out = []
        for w, x in self.workers.items():
            if x.state == READY:
                out.append(SetKey(assign_key(w, x.n + 1), f"end,{reason}"))
            elif x.state == RUNNING:
                out.append(Terminate(w))
            x.state = GONE
        return out + [Finish(rc, reason)]

"""Claims on runs, shared by every driver that may train them: one claim holder runs a run.

A claim is a small JSON file in the run's workdir, `<workdir>/.claims/<generation>`, naming
its owner (host, pid and the pid's start time, and the id of the driver that asked for the
run) and a heartbeat: the time the owner last said it is alive. The owner refreshes the
heartbeat while the run lives (`Claim.keep_alive`) and marks the claim released when the run
ends, whether it finished or failed.

Taking a claim is one `open(O_CREAT | O_EXCL)`: of any number of drivers and hosts that try at
once, exactly one creates the file. Exclusive create is atomic on local disks and on NFS (v3
and later), where `flock` is not: it is emulated, or lost when a client's lease lapses, and
absent on object-store mounts such as GCS-fuse.

Generations. A claim that is released, or stale, is free: its heartbeat is older than the
lease, or its owner was a process of this host that is gone (a killed driver or worker, whose
pid no longer runs or now names another process). Taking a free generation N means creating
generation N + 1, with the same exclusive create, so two drivers that both judge N stale
still cannot both win; and an owner learns that its claim was taken over (it stalled for longer
than the lease) from N + 1 existing. Only an owner writes its own generation (through a
rename), so no write can clobber another driver's claim. Generations are never deleted while
the run may be claimed again: they are a few hundred bytes each, and go with the workdir.

A claim is the first guard of a run; the workdir lock that train.py takes
(`acl_jax.provenance.workdir_lock`, flock on `<workdir>/.lock`) stays the second, so a run
whose claim was taken over while it still ran cannot write its workdir beside its successor.

Heartbeats compare times written by different hosts: their clocks should agree (NTP) to well
within the lease. A claim names its host by hostname, so the hosts (and containers) that share
the runs need hostnames of their own.
"""
import contextlib
import json
import os
import socket
import threading
import time
import uuid

LEASE_S = 600.0
CLAIMS = ".claims"


def new_driver_id() -> str:
  """A random id naming one driver (one process that hands runs out) in the claims it takes."""
  return uuid.uuid4().hex[:12]


def _start_time(pid: int) -> str:
  """When `pid` started (clock ticks after boot, from /proc), to tell a reused pid from the
  one a claim recorded; "" where /proc is not there."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      stat = f.read()
  except OSError:
    return ""
  # The command name (field 2) may hold spaces and brackets; the fields after it do not.
  fields = stat[stat.rfind(")") + 2:].split()
  return "" if fields[0] == "Z" else fields[19]  # a zombie is dead (its state is "Z")


def pid_alive(pid: int, start: str = "") -> bool:
  """Whether process `pid` of this host runs, and is the one that started at `start` (when
  given, from `_start_time`)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass  # it exists, owned by another user
  now = _start_time(pid)
  if os.path.isdir("/proc") and not now:
    return False  # gone since, or a zombie
  return not start or not now or now == start


def owner_here(driver: str) -> dict:
  """The owner fields of a claim taken by this process for `driver`."""
  return {"host": socket.gethostname(), "pid": os.getpid(),
          "pid_start": _start_time(os.getpid()), "driver": driver}


def read(path: str) -> dict | None:
  """A claim file's record; None when it is gone, empty or half-written (its creator was
  killed, or is still writing it)."""
  try:
    with open(path) as f:
      rec = json.load(f)
  except (OSError, ValueError):
    return None
  return rec if isinstance(rec, dict) else None


def is_free(path: str, rec: dict | None, lease_s: float, now: float | None = None) -> bool:
  """Whether the claim at `path` (its record `rec`) may be taken over: released, or stale (a
  heartbeat older than `lease_s`, or an owner process of this host that is gone). A file
  without a record counts as live for a lease after it was made: its owner is writing it."""
  now = time.time() if now is None else now
  if rec is None:
    try:
      return now - os.stat(path).st_mtime > lease_s
    except FileNotFoundError:
      return True
  if rec.get("released"):
    return True
  if now - float(rec.get("heartbeat", 0)) > lease_s:
    return True
  return (rec.get("host") == socket.gethostname()
          and not pid_alive(int(rec.get("pid", 0)), rec.get("pid_start", "")))


def _generations(folder: str) -> list[int]:
  try:
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())
  except FileNotFoundError:
    return []


def current(workdir: str) -> tuple[str, dict | None] | None:
  """(path, record) of the run's newest claim generation; None when it was never claimed.
  A listing behind the truth (NFS caches directories) only makes `try_claim` walk further."""
  gens = _generations(os.path.join(workdir, CLAIMS))
  if not gens:
    return None
  path = os.path.join(workdir, CLAIMS, str(gens[-1]))
  return path, read(path)


def holder(workdir: str, lease_s: float = LEASE_S) -> dict | None:
  """The record of the live claim on the run (another driver runs it); None when it is free."""
  cur = current(workdir)
  if cur is None or is_free(cur[0], cur[1], lease_s):
    return None
  return cur[1] or {"driver": "unknown (claim being written)"}


def _write_atomic(path: str, rec: dict) -> None:
  tmp = f"{path}.tmp.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}"
  with open(tmp, "w") as f:
    json.dump(rec, f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


class Claim:
  """A claim this process holds: `refresh` it (or hold `keep_alive`) while the run lives, and
  `release` it when the run ends."""

  def __init__(self, path: str, rec: dict, lease_s: float):
    self.path, self.rec, self.lease_s = path, rec, lease_s
    self.lost = threading.Event()
    self._lock = threading.Lock()

  def _successor(self) -> str:
    folder, name = os.path.split(self.path)
    return os.path.join(folder, str(int(name) + 1))

  def refresh(self) -> bool:
    """Renews the heartbeat; False (and `lost` set) once another driver took the claim over."""
    with self._lock:
      if self.lost.is_set() or os.path.exists(self._successor()):
        self.lost.set()
        return False
      self.rec["heartbeat"] = time.time()
      _write_atomic(self.path, self.rec)
      return True

  def release(self) -> None:
    """Marks the claim released (unless it was taken over): the run may be claimed again."""
    with self._lock:
      if self.lost.is_set() or os.path.exists(self._successor()):
        return
      self.rec.update(released=True, heartbeat=time.time())
      _write_atomic(self.path, self.rec)

  @contextlib.contextmanager
  def keep_alive(self, on_lost=None, every: float | None = None):
    """Refreshes the heartbeat every `every` seconds (a tenth of the lease) inside the block;
    calls `on_lost()` once if the claim is taken over meanwhile."""
    every = self.lease_s / 10 if every is None else every
    stop = threading.Event()

    def beat():
      while not stop.wait(every):
        if not self.refresh():
          if on_lost is not None:
            on_lost()
          return
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
      yield self
    finally:
      stop.set()
      thread.join()


def try_claim(workdir: str, driver: str, lease_s: float = LEASE_S, run: str = "") -> Claim | None:
  """Claims the run in `workdir` for this process and `driver`; None when another owner
  holds it (a live claim). `run` names the run in the claim, for whoever reads it."""
  folder = os.path.join(workdir, CLAIMS)
  os.makedirs(folder, exist_ok=True)
  gens = _generations(folder)
  gen = gens[-1] if gens else 0
  while True:
    path = os.path.join(folder, str(gen))
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      if not is_free(path, read(path), lease_s):
        return None
      gen += 1
      continue
    now = time.time()
    rec = {**owner_here(driver), "run": run, "claimed": now, "heartbeat": now}
    with os.fdopen(fd, "w") as f:
      json.dump(rec, f)
      f.flush()
      os.fsync(f.fileno())
    return Claim(path, rec, lease_s)

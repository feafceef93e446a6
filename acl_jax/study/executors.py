"""Executors: where a study's runs execute, each at most once across every driver.

An executor takes run specs (`RunSpec`: one command, the workdir it writes and what it needs)
and yields a `RunResult` for each as it ends, in the order they end:

  runner = LocalExecutor()                  # this machine, one run per core or accelerator
  runner = RayExecutor("auto")              # ray_executor.py: the nodes of a Ray cluster
  for res in runner.run(specs, finished=results_written):
    print(res.identity, res.status, res.returncode, res.wall_s, res.cpu_s, res.host)

A driver that decides what to run from what has ended (a study's gates) hands runs out one by
one instead: `runner.submit(spec, finished)`, then `runner.wait(timeout)` for the next result
(`runner.pending` counts those not yet taken), and `runner.close()` at the end.

A run may do more than its command, on the host that runs the command and under the same
claim: its `steps` (`Steps`) say whether the command must run, and what follows it (e.g. the
run's evaluations and its row in the study's record).

Every run is claimed before it starts (acl_jax/study/claims.py), by the process that runs it
(this one, or the Ray worker on the node), and the claim is released when it ends. A run
that is already finished (`finished(spec)`, asked before and again under the claim) or
claimed by a live owner is not started: its result says FINISHED or CLAIMED. So drivers on
several machines may hand out the same specs at once, and a driver killed midway leaves
claims that go stale; the next driver takes them over and resumes the runs.

A run's command is killed with the process that started it (Linux; acl_jax/study/procs.py),
so a killed driver or Ray worker leaves no run behind that would write its workdir beside a
successor's.
"""
import abc
import collections
import dataclasses
import functools
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from acl_jax import provenance
from acl_jax.study import claims
from acl_jax.study.procs import call, send
from acl_jax.study.slots import Slot, local_slots

# RunResult.status: the command ran (see returncode), or it did not and why.
RAN = "ran"
FINISHED = "finished"  # finished before (`finished(spec)`); nothing ran
CLAIMED = "claimed elsewhere"  # another live owner holds the run's claim
LOST = "claim lost"  # the run stalled past its lease, was taken over and killed
ERROR = "error"  # the command could not start, or the executor failed it
LATE = "not started: too late"  # it would have started after its `start_by`
# RunResult.detail of a run whose `Steps.before` said its command need not run.
NOT_NEEDED = "command not needed"

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run: a command, run once, that writes its workdir.

  Attributes:
    identity: the run's stable name; every driver gives the same run the same one.
    argv: the command.
    workdir: the folder the run writes, on storage every node sees; its claims live there.
    cwd: the folder the command runs in ("": the executor's).
    env: variables set for the command, over the node's environment.
    log: the file in the workdir the command's stdout and stderr are appended to ("": they
      stay on the executor's).
    cpus: cores the run needs (Ray schedules by them).
    gpus: GPUs the run needs (Ray schedules by them and sets CUDA_VISIBLE_DEVICES).
    resources: custom Ray resources, e.g. {"TPU": 4} (Ray sets TPU_VISIBLE_CHIPS).
    steps: what the run does around its command (`Steps`), under its claim; None: the
      command alone. Pickled to the node on Ray.
    start_by: the latest time (time.time()) the command may start, e.g. for a run that must
      end before a deadline; a run that waits longer (queued on a busy cluster) does not
      start and ends LATE. None: any time.
  """
  identity: str
  argv: tuple[str, ...]
  workdir: str
  cwd: str = ""
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)
  log: str = "console.log"
  cpus: float = 1.0
  gpus: float = 0.0
  resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
  steps: "Steps | None" = None
  start_by: float | None = None

  def __post_init__(self):
    object.__setattr__(self, "argv", tuple(self.argv))

  def __hash__(self):
    return hash(self.identity)


@dataclasses.dataclass(frozen=True)
class RunResult:
  """How a run ended: `status` (RAN, FINISHED, CLAIMED, LOST, ERROR, LATE); for a run that
  ran, its exit code, wall and CPU seconds (user + system, its whole process tree: what it
  costs whatever else shares the machine) and the host it ran on; `detail` says more (the
  claim's holder, an error)."""
  identity: str
  status: str
  returncode: int | None = None
  wall_s: float = 0.0
  cpu_s: float = 0.0
  host: str = ""
  detail: str = ""

  @property
  def ok(self) -> bool:
    """Whether the run is done: it ran and exited 0, or had finished before."""
    return self.status == FINISHED or (self.status == RAN and self.returncode == 0)


class Steps:
  """What a run does around its command, on the host that runs the command, while it holds
  the run's claim (so once across drivers). Subclass it; on Ray it must pickle."""

  def before(self, spec: RunSpec) -> bool:
    """Called before the command; False when the command need not run (its work is done,
    what follows it is not): `after` then gets a result with exit code 0 and no time."""
    del spec
    return True

  def after(self, spec: RunSpec, result: RunResult,
            call: Callable[..., tuple[int, float]]) -> RunResult:
    """Called once the command ran (status RAN, whatever its exit code); returns the run's
    result. `call(argv, stdout=...)` runs a further command as the run's own: in its cwd,
    environment and cores, killed with it; it returns (exit code, CPU seconds)."""
    del spec, call
    return result


def results_written(spec: RunSpec) -> bool:
  """The default `finished`: train.py finished the run (`provenance.run_finished`)."""
  return provenance.run_finished(spec.workdir)


def _in_workdir(name: str, spec: RunSpec) -> bool:
  return os.path.exists(os.path.join(spec.workdir, name))


def written(name: str) -> Callable[[RunSpec], bool]:
  """A `finished` for runs that are done once their workdir holds the file `name`
  (picklable, for Ray)."""
  return functools.partial(_in_workdir, name)


def run_once(spec: RunSpec, driver: str, finished: Callable[[RunSpec], bool],
             lease_s: float = claims.LEASE_S, slot_env: Mapping[str, str] | None = None,
             prefix: Iterable[str] = (),
             started: Callable[[subprocess.Popen], None] | None = None) -> RunResult:
  """Claims the run, runs it unless it is finished (with its `steps` around the command), and
  releases the claim: what every executor runs, on the host that runs the command.

  Args:
    spec: the run.
    driver: the id of the driver that asked for it (`claims.new_driver_id`).
    finished: whether a run is done; asked again once the claim is held, as the run's
      previous holder may have finished it meanwhile.
    lease_s: the claim's lease; the heartbeat is refreshed ten times in one.
    slot_env: variables of the executor's slot (its accelerators), under `spec.env`.
    prefix: put before the command (e.g. taskset).
    started: called with each process the run starts (the executor's `terminate` signals it).
  """
  host = socket.gethostname()
  if finished(spec):
    return RunResult(spec.identity, FINISHED, host=host)
  if spec.start_by is not None and time.time() > spec.start_by:
    return RunResult(spec.identity, LATE, host=host,
                     detail=f"{time.time() - spec.start_by:.0f} s after its latest start")
  os.makedirs(spec.workdir, exist_ok=True)
  claim = claims.try_claim(spec.workdir, driver, lease_s, run=spec.identity)
  if claim is None:
    return RunResult(spec.identity, CLAIMED, host=host,
                     detail=describe(claims.holder(spec.workdir, lease_s)))
  try:
    if finished(spec):
      return RunResult(spec.identity, FINISHED, host=host)
    env = {**os.environ, **(slot_env or {}), **spec.env}
    procs = []

    def on_start(proc):
      procs.append(proc)
      if started is not None:
        started(proc)

    def run_cmd(argv, **kw):
      return call([*prefix, *argv], on_start=on_start, cwd=spec.cwd or None, env=env, **kw)
    with claim.keep_alive(on_lost=lambda: [send(p) for p in procs]):
      if spec.steps is None or spec.steps.before(spec):
        res = _run_command(spec, run_cmd, host)
      else:
        res = RunResult(spec.identity, RAN, 0, host=host, detail=NOT_NEEDED)
      if claim.lost.is_set():
        return dataclasses.replace(res, status=LOST)
      if res.status == RAN and spec.steps is not None:
        res = spec.steps.after(spec, res, run_cmd)
    return dataclasses.replace(res, status=LOST) if claim.lost.is_set() else res
  finally:
    claim.release()


def _run_command(spec: RunSpec, run_cmd, host: str) -> RunResult:
  out = None
  if spec.log:
    out = open(os.path.join(spec.workdir, spec.log), "ab")  # pylint: disable=consider-using-with
  t0 = time.time()
  try:
    rc, cpu = run_cmd(spec.argv, stdout=out, stderr=subprocess.STDOUT if out else None)
  except OSError as e:
    return RunResult(spec.identity, ERROR, host=host, detail=f"{spec.argv[0]}: {e}")
  finally:
    if out is not None:
      out.close()
  return RunResult(spec.identity, RAN, rc, time.time() - t0, cpu, host)


def describe(rec: dict | None) -> str:
  """A claim's owner in words."""
  if not rec:
    return "free"
  return f"driver {rec.get('driver')} (pid {rec.get('pid')} on {rec.get('host')})"


class Executor(abc.ABC):
  """Runs run specs, each at most once across the drivers that share their workdirs.

  Attributes:
    lease_s: how long a claim lives without a heartbeat (`claims.is_free`).
    driver: this driver's id, in the claims it takes.
  """

  def __init__(self, lease_s: float = claims.LEASE_S, driver: str | None = None):
    self.lease_s = lease_s
    self.driver = driver or claims.new_driver_id()

  @abc.abstractmethod
  def submit(self, spec: RunSpec, finished: Callable[[RunSpec], bool] = results_written) -> None:
    """Hands `spec` out: it runs once there is room; `wait` gives its result.

    Args:
      spec: the run.
      finished: whether a run is done (it is then not run again); on Ray it runs on the
        nodes too, so it must pickle.
    """

  @abc.abstractmethod
  def wait(self, timeout: float | None = None) -> RunResult | None:
    """The result of the next submitted run to end; None when none is pending, or none ended
    within `timeout` seconds."""

  @property
  @abc.abstractmethod
  def pending(self) -> int:
    """How many submitted runs' results `wait` has not yet given."""

  @abc.abstractmethod
  def capacity(self, cpus: float = 1.0) -> int:
    """How many runs of `cpus` cores each can run at once."""

  def close(self) -> None:
    """Drops the results not yet taken; LocalExecutor starts no more of the runs submitted
    and waits for those running, Ray's tasks run on."""

  passes_sigterm = False  # whether `terminate` reaches the runs (else a driver just dies)

  def terminate(self) -> str:
    """Starts no more runs and sends SIGTERM to those running, which checkpoint and stop
    (train.py: acl_jax/train/preempt.py); their results still come from `wait`. Returns what
    it did, in words. Only where `passes_sigterm`."""
    raise NotImplementedError

  def run(self, specs: Iterable[RunSpec],
          finished: Callable[[RunSpec], bool] = results_written) -> Iterator[RunResult]:
    """Runs `specs`, yielding one result per spec as each ends (`submit` and `wait`)."""
    try:
      for spec in specs:
        self.submit(spec, finished)
      while self.pending:
        yield self.wait()
    finally:
      self.close()


class LocalExecutor(Executor):
  """Runs on this machine, one run per slot at a time, in subprocesses.

  Args:
    slots: the slots (`local_slots`), or how many to share this host's cores or
      accelerators between (default: one per accelerator, else per core). A run takes one
      slot whatever its cpus, gpus and resources, which only Ray schedules by.
    lease_s, driver: as Executor's.
  """

  def __init__(self, slots: int | list[Slot] | None = None, lease_s: float = claims.LEASE_S,
               driver: str | None = None):
    super().__init__(lease_s, driver)
    self.slots = slots if isinstance(slots, list) else local_slots(slots)
    self._lock = threading.Lock()
    self._todo = collections.deque()  # (spec, finished) not yet started
    self._free = list(self.slots)  # slots without a thread
    self._threads = []
    self._results = queue.Queue()
    self._pending = 0
    self._procs = []  # the processes the runs started (`terminate`)
    self._stopping = False

  @property
  def pending(self):
    return self._pending

  passes_sigterm = True

  def terminate(self):
    with self._lock:
      self._stopping = True
      dropped = len(self._todo)
      for _ in range(dropped):  # never started: their results say so
        spec, _ = self._todo.popleft()
        self._results.put(RunResult(spec.identity, LATE, host=socket.gethostname(),
                                    detail="not started: the sweep was asked to stop"))
      procs = list(self._procs)
    sent = sum(send(proc, signal.SIGTERM) for proc in procs)
    return f"SIGTERM sent to {sent} running process(es)"

  def capacity(self, cpus=1.0):
    return len(self.slots)

  def submit(self, spec, finished=results_written):
    self._pending += 1
    if self._stopping:
      self._results.put(RunResult(spec.identity, LATE, host=socket.gethostname(),
                                  detail="not started: the sweep was asked to stop"))
      return
    if finished(spec):
      self._results.put(RunResult(spec.identity, FINISHED, host=socket.gethostname()))
      return
    with self._lock:
      self._todo.append((spec, finished))
      if self._free:  # a slot's thread takes runs until none is left, then frees the slot
        thread = threading.Thread(target=self._work, args=(self._free.pop(),), daemon=True)
        self._threads.append(thread)
        thread.start()

  def _work(self, slot: Slot) -> None:
    prefix = ["taskset", "-c", ",".join(map(str, slot.cpus))] if slot.cpus else []
    while True:
      with self._lock:
        if not self._todo:
          self._free.append(slot)
          return
        spec, finished = self._todo.popleft()
      try:
        res = run_once(spec, self.driver, finished, self.lease_s, slot.env, prefix,
                       started=self._started)
      except Exception as e:  # pylint: disable=broad-except
        res = RunResult(spec.identity, ERROR, host=socket.gethostname(), detail=repr(e))
      self._results.put(res)

  def _started(self, proc):
    with self._lock:
      self._procs = [p for p in self._procs if p.returncode is None] + [proc]
      late = self._stopping  # started as `terminate` ran: it stops too
    if late:
      send(proc, signal.SIGTERM)

  def wait(self, timeout=None):
    if not self._pending:
      return None
    try:
      res = self._results.get(timeout=timeout)
    except queue.Empty:
      return None
    self._pending -= 1
    return res

  def close(self):
    with self._lock:
      self._todo.clear()
      threads, self._threads = self._threads, []
    for t in threads:
      t.join()
    self._results, self._pending = queue.Queue(), 0


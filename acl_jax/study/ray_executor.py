"""RayExecutor: a study's runs as Ray tasks on the nodes of a Ray cluster (`pip install
acl-jax[ray]`); `ray` is imported when the executor first connects."""
import collections
import socket
from collections.abc import Callable

from acl_jax import errors
from acl_jax.study import claims, slots
from acl_jax.study.executors import (CLAIMED, ERROR, FINISHED, REPO, Executor, RunResult,
                                     RunSpec, describe, results_written, run_once)


def run_pinned(spec: RunSpec, driver: str, finished: Callable[[RunSpec], bool],
               lease_s: float = claims.LEASE_S) -> RunResult:
  """`run_once` pinned to `spec.cpus` cores of its host (`slots.pinned_cores`): a Ray task's
  run sees as many cores as it asked for, as a LocalExecutor slot's does."""
  with slots.pinned_cores(spec.cpus) as prefix:
    return run_once(spec, driver, finished, lease_s, prefix=prefix)



def _refused_token(e: BaseException, ray) -> bool:
  """Whether `e`, or an exception it was raised from, is the cluster refusing this driver's
  token. Ray 2.60's ray.init raises a ConnectionError from a RuntimeError whose message holds
  the AuthenticationError's traceback as text."""
  while e is not None:
    if (isinstance(e, ray.exceptions.AuthenticationError)
        or "InvalidAuthToken" in str(e) or "AuthenticationError" in str(e)):
      return True
    e = e.__cause__ or e.__context__
  return False


class RayExecutor(Executor):
  """Runs on the nodes of a Ray cluster: each run is one Ray task that asks for the run's
  cpus, gpus and custom resources, and runs `run_once` on its node (claim, command under a
  heartbeat, release). Each run submitted becomes a task at once (Ray queues it until a
  node has room), and results are taken as the tasks end.

  The workdirs, and the code the commands and tasks run, must be at the same paths on every
  node (shared storage): by default the tasks import acl_jax from this checkout
  (`runtime_env`'s PYTHONPATH), and `finished` reads the workdirs from the nodes.

  Args:
    address: the cluster: None (a new one on this machine, for this driver, without Ray's
      dashboard), "auto" (the one `ray start` made on this machine), "host:port" or
      "ray://host:port" (Ray Client). None never joins a cluster found on this machine: a
      stopped one's address, left behind, would hang the connection.
    lease_s, driver: as Executor's.
    runtime_env: the tasks' Ray runtime environment when this executor connects; default
      {"env_vars": {"PYTHONPATH": <this checkout>}}. Ignored when Ray is already initialised.
    **init_kwargs: more ray.init arguments when this executor connects.
  """

  def __init__(self, address: str | None = None, lease_s: float = claims.LEASE_S,
               driver: str | None = None, runtime_env: dict | None = None, **init_kwargs):
    super().__init__(lease_s, driver)
    self.address = address
    self.runtime_env = ({"env_vars": {"PYTHONPATH": REPO}} if runtime_env is None
                        else runtime_env)
    self.init_kwargs = init_kwargs
    self._ready = collections.deque()  # results known without a task
    self._tasks = {}  # ref -> spec
    self._task = None

  def _ray(self):
    import ray  # pylint: disable=import-outside-toplevel
    if not ray.is_initialized():
      kwargs = dict(self.init_kwargs)
      if self.address is None:
        kwargs.setdefault("include_dashboard", False)
      try:
        ray.init(address=self.address or "local", runtime_env=self.runtime_env, **kwargs)
      except Exception as e:  # pylint: disable=broad-exception-caught
        if not _refused_token(e, ray):
          raise
        raise errors.UserError(
            f"The Ray cluster at {self.address or 'this machine'} asks for a token (Ray's "
            "token authentication, on by default for clusters that `ray start` makes since "
            "Ray 2.59) and this driver sent none or another: set RAY_AUTH_MODE=token here, "
            "with the cluster's token in ~/.ray/auth_token, RAY_AUTH_TOKEN or "
            "RAY_AUTH_TOKEN_PATH (`ray get-auth-token` prints it on the head node).") from e
    return ray

  @property
  def pending(self):
    return len(self._ready) + len(self._tasks)

  def capacity(self, cpus=1.0):
    return max(1, int(self._ray().cluster_resources().get("CPU", 1) // cpus))

  def submit(self, spec, finished=results_written):
    ray = self._ray()
    if finished(spec):
      self._ready.append(RunResult(spec.identity, FINISHED, host=socket.gethostname()))
      return
    held = claims.holder(spec.workdir, self.lease_s)
    if held is not None:  # saves a task; the task checks again when it claims the run
      self._ready.append(RunResult(spec.identity, CLAIMED, host=socket.gethostname(),
                                   detail=describe(held)))
      return
    # No retries: a run whose worker died is resumed by a later driver, once its claim has
    # gone stale, not by Ray while the claim still looks live.
    self._task = self._task or ray.remote(run_pinned)
    ref = self._task.options(
        num_cpus=spec.cpus, num_gpus=spec.gpus, max_retries=0, resources=dict(spec.resources),
        name=spec.identity).remote(spec, self.driver, finished, self.lease_s)
    self._tasks[ref] = spec

  def wait(self, timeout=None):
    if self._ready:
      return self._ready.popleft()
    if not self._tasks:
      return None
    ray = self._ray()
    done, _ = ray.wait(list(self._tasks), num_returns=1, timeout=timeout)
    if not done:
      return None
    spec = self._tasks.pop(done[0])
    try:
      return ray.get(done[0])
    except ray.exceptions.RayError as e:
      return RunResult(spec.identity, ERROR, detail=f"{type(e).__name__}: {e}")

  def close(self):
    # The tasks run on, under their claims: a task cancelled while its command runs would
    # release its claim and leave the command behind.
    self._ready.clear()
    self._tasks = {}

"""The slots of one host, where LocalExecutor runs one run at a time: one per CUDA device,
else one per TPU chip, else one per core, each with the variables that give a process its
accelerators and the cores it is pinned to."""
import contextlib
import dataclasses
import fcntl
import glob
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping


def cuda_devices() -> list[str]:
  """The CUDA devices this process may use: CUDA_VISIBLE_DEVICES when set, else those
  `nvidia-smi -L` lists."""
  vis = os.environ.get("CUDA_VISIBLE_DEVICES")
  if vis is not None:
    ids = [d.strip() for d in vis.split(",") if d.strip()]
    return [] if ids[:1] == ["-1"] else ids
  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30,
                         check=False).stdout
  except (OSError, subprocess.SubprocessError):
    return []
  return [str(i) for i, _ in enumerate(re.findall(r"^GPU \d+", out, re.M))]


def accelerator_name(platform: str, kind: str) -> str:
  """An accelerator as the records name it: its device kind, with the platform after it
  where the kind does not say it ("NVIDIA H200", "gpu": "NVIDIA H200 GPU"; "TPU v4", "tpu":
  "TPU v4")."""
  platform = platform.upper()
  return kind if platform in kind.upper() else f"{kind} {platform}".strip()


def cuda_device_name() -> str:
  """The first visible CUDA device's name as a run's record names it ("NVIDIA H200 GPU":
  `accelerator_name` of JAX's device kind, which is nvidia-smi's name), or "" without one."""
  gpus = cuda_devices()
  if not gpus:
    return ""
  try:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                          gpus[0]], capture_output=True, text=True, timeout=30,
                         check=False).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ""
  name = out.splitlines()[0].strip() if out else ""
  return accelerator_name("gpu", name) if name else ""


def tpu_chips() -> list[str]:
  """The TPU chips of this host: TPU_VISIBLE_CHIPS when set, else the /dev/accel<N> devices
  (character devices; some GPU drivers make /dev/accel a folder)."""
  vis = os.environ.get("TPU_VISIBLE_CHIPS")
  if vis:
    return [c.strip() for c in vis.split(",") if c.strip()]
  chips = [p for p in glob.glob("/dev/accel*") if not os.path.isdir(p)]
  return sorted((m.group(1) for p in chips if (m := re.search(r"accel(\d+)$", p))), key=int)


def tpu_env(chips: list[str], slot: int) -> dict[str, str]:
  """The variables that give one process `chips` of the host's TPU chips, beside processes on
  the others: the chips, their bounds (one or two chips: a slice of the host), and a mesh
  controller port of its own (as Ray and Cloud TPU's guides set them)."""
  env = {"TPU_VISIBLE_CHIPS": ",".join(chips), "TPU_HOST_BOUNDS": "1,1,1",
         "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{8476 + slot}",
         "TPU_MESH_CONTROLLER_PORT": str(8476 + slot)}
  if len(chips) in (1, 2):
    env["TPU_CHIPS_PER_HOST_BOUNDS"] = "1,1,1" if len(chips) == 1 else "1,2,1"
  return env


@dataclasses.dataclass(frozen=True)
class Slot:
  """Where LocalExecutor runs one run at a time: `env` gives it its accelerators, `cpus` the
  cores it is pinned to (taskset; () when unpinned)."""
  env: Mapping[str, str]
  cpus: tuple[int, ...]


def _split(items: list, n: int) -> list[list]:
  """`items` in `n` contiguous groups of equal size (the remainder left out); [] each when
  there are fewer items than groups."""
  per = len(items) // n
  return [items[i * per:(i + 1) * per] for i in range(n)]


def host_cores() -> list[int]:
  """The cores this process may run on (its affinity), in order."""
  return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(
      range(os.cpu_count() or 1))


def local_slots(n: int | None = None) -> list[Slot]:
  """This host's slots: one per CUDA device, else one per TPU chip, else one per core (`n`
  slots instead, sharing them out). Several slots split the cores between them, each pinned
  to its own. More slots than CUDA devices share them round-robin (a small model leaves most
  of a GPU idle): each of those runs then takes GPU memory as it needs it
  (XLA_PYTHON_CLIENT_PREALLOCATE=false) instead of most of the card up front. A TPU chip
  is one process's, so TPU slots cannot outnumber the chips."""
  cores = host_cores()
  gpus = cuda_devices()
  tpus = [] if gpus else tpu_chips()
  devices = gpus or tpus
  n = n or len(devices) or len(cores)
  if tpus and n > len(tpus):
    raise ValueError(f"{n} slots for {len(tpus)} TPU chips ({', '.join(tpus)}): a TPU slot "
                     "needs a chip of its own; ask for at most that many runs at a time.")
  if gpus and n > len(gpus):
    envs = [{"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)],
             "XLA_PYTHON_CLIENT_PREALLOCATE": "false"} for i in range(n)]
  else:
    groups = _split(devices, n) if devices else [[]] * n
    envs = ([{"CUDA_VISIBLE_DEVICES": ",".join(g)} for g in groups] if gpus
            else [tpu_env(g, i) for i, g in enumerate(groups)] if tpus else [{}] * n)
  pins = _split(cores, n) if n > 1 else [[]]
  return [Slot(env, tuple(pin)) for env, pin in zip(envs, pins)]


def core_locks() -> str:
  """The folder of this host's core locks: $ACL_JAX_CORE_LOCKS, else acl-jax-cores in the
  temporary folder. Processes that share one share the cores (the test suite has its own)."""
  return os.environ.get("ACL_JAX_CORE_LOCKS") or os.path.join(
      os.environ.get("TMPDIR", "/tmp"), "acl-jax-cores")


@contextlib.contextmanager
def pinned_cores(cpus: float, folder: str | None = None):
  """Cores of this host held for one run of `cpus` cores, as a command prefix: ["taskset",
  "-c", "<cores>"] while held, [] where no group is free (or the host has no taskset).

  A Ray task is scheduled by its core count but not given cores, and XLA:CPU sizes its
  thread pool, and so how it splits some reductions (the gate's dot products), by the cores
  a process may run on. Pinned like LocalExecutor's slots, a run sees the same cores, and
  trains to the same bits, under either executor. The host's cores are cut into groups of
  ceil(cpus); a run holds one by an flock on a file of this host's own (`folder`, default
  `core_locks()`), released when it ends or dies. Where every group is held (more runs
  than the host's groups, e.g. two clusters on one host), the run is not pinned and says so
  on stderr.
  """
  cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
  width = max(1, math.ceil(cpus))
  if not cores or width >= len(cores) or shutil.which("taskset") is None:
    yield []
    return
  folder = folder or core_locks()
  os.makedirs(folder, exist_ok=True)
  for group in _split(cores, len(cores) // width):
    path = os.path.join(folder, "-".join(map(str, group)) + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      os.close(fd)
      continue
    try:
      yield ["taskset", "-c", ",".join(map(str, group))]
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)
    return
  print(f"every group of {width} cores in {folder} is held: this run is not pinned, and may "
        "end a few bits from a pinned one", file=sys.stderr, flush=True)
  yield []


def niceness_for_autogroup(path: str = "/proc/self/autogroup") -> int | None:
  """Gives this process's autogroup its niceness, and returns it (None where nothing was
  changed).

  Linux with autogroup scheduling (`kernel.sched_autogroup_enabled=1`) shares the CPU between
  autogroups first and applies `nice` only within one. `setsid` starts a new autogroup, so a
  driver started with `nice -n 19 setsid ...` would still take half the cores from an
  interactive job, benchmark or test run. A `setsid` leader (its sid is its pid) with positive
  niceness gives its autogroup the same niceness. Any other process shares its terminal's
  autogroup and changes nothing; so does one where the file is missing or not writable."""
  n = os.nice(0)
  if n <= 0 or os.getsid(0) != os.getpid():
    return None
  try:
    with open(path, "w") as f:
      f.write(str(n))
  except OSError:
    return None
  return n

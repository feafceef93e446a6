r"""Fine-tunes a BERT-family classifier.

  python train.py --config configs/quickstart.py --workdir runs/quickstart
  python train.py --config configs/glue.py:rte,acl --workdir runs/rte_acl \
      --config.task.data_dir=../shared/data/glue --config.batch_size=16

Re-running the same command resumes from the workdir's latest checkpoint. Multi-host (one
process per host, as on a TPU pod): add --coordinator=HOST:PORT --num_processes=N
--process_id=I (or rely on the platform's auto-detection with --distributed).
"""
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from acl_jax import cli
from configs import common as _configs

# --help prints this docstring: with the config files and their words it shows the whole CLI.
__doc__ += "\n" + _configs.describe_configs() + "\n"

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, configs/FILE.py[:ARG] (listed above).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder: checkpoints, logs, results.")
_PRINT = flags.DEFINE_bool("print_config", False, "Print every config field, its value (after "
                           "--config.x overrides) and a one-line doc, then exit without "
                           "training.")
flags.register_multi_flags_validator(
    ["workdir", "print_config"], lambda f: bool(f["workdir"]) or f["print_config"],
    message="--workdir is required (the run folder), except with --print_config.")
_DIST = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize().")
_COORD = flags.DEFINE_string("coordinator", None, "Coordinator address HOST:PORT.")
_NPROC = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PID = flags.DEFINE_integer("process_id", None, "This process's id.")


def init_distributed():
  """Starts jax.distributed when asked; must run before any other JAX call."""
  import jax  # pylint: disable=import-outside-toplevel
  if not (_DIST.value or _COORD.value):
    if _NPROC.value is not None or _PID.value is not None:
      # Else every host would train alone on the full batch, all writing one workdir.
      raise app.UsageError(
          "--num_processes/--process_id were given without --coordinator=HOST:PORT (or "
          "--distributed for the platform's auto-detection), so no multi-host job would "
          "start; add one of them.")
    return
  if jax.default_backend() == "cpu" or _COORD.value:
    try:
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):
      pass
  jax.distributed.initialize(coordinator_address=_COORD.value, num_processes=_NPROC.value,
                             process_id=_PID.value)


def _closest_field(argv):
  """For an override of a config field that does not exist (e.g. --config.loss.lamda=0.3):
  the closest fields' names instead of ml_collections' traceback."""
  # Every config file builds on base_config(), so its fields are the ones to check against.
  for arg in argv[1:]:
    if arg.startswith("--config."):
      msg = _configs.unknown_field(_configs.base_config(), arg[len("--config."):].split("=")[0])
      if msg:
        return f"Flags parsing error: {msg}"
  return None


def train(config, workdir: str, heap, origin: dict | None = None) -> dict:
  """The training loop, the host heap's free memory handed back (`heap`, an
  `acl_jax.host_heap.Heap`) each time the loop turns from training to evaluating or saving
  and back, so that the step's kept temp block and their buffers are never resident at
  once."""
  from acl_jax.train import loop  # pylint: disable=import-outside-toplevel
  return loop.train_and_evaluate(config, workdir, origin, on_phase=lambda _: heap.trim())


@cli.user_errors
def main(argv):
  del argv
  config = cli.config_value(_CONFIG)
  if _PRINT.value:
    name = config_flags.get_config_filename(flags.FLAGS["config"])
    print(_configs.print_config(config, f"# {name}: every field, its value and what it "
                                "does; set one with --config.FIELD=VALUE"))
    return 0
  from acl_jax import compile_cache, host_heap, logs  # pylint: disable=import-outside-toplevel
  logs.setup()
  with host_heap.managed() as heap:  # before any JAX computation
    compile_cache.enable()  # before the first compile
    init_distributed()
    origin = {"command": [os.path.basename(sys.executable), *sys.argv],
              "config": config_flags.get_config_filename(flags.FLAGS["config"])}
    results = train(config, _WORKDIR.value, heap, origin)
  from acl_jax import provenance  # pylint: disable=import-outside-toplevel
  if provenance.is_main():
    for split, res in results.items():
      if isinstance(res, dict) and split != "train":
        # The metrics; the data hash and any warning stay in results.json (the warning was
        # logged above).
        print(f"[{split}] " + " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in res.items() if isinstance(v, (int, float))))
    # The data record (per split: counts, hash) stays in results.json and data.json.
    print("[train] " + " ".join(f"{k}={v}" for k, v in results["train"].items() if k != "data"))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main, flags_parser=lambda argv: cli.parse_flags(argv, _closest_field))

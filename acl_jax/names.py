"""Names: checked against what the library knows (registries, modes), read from pytree key
paths, and the hub's offline switches read from the environment.

Light (no jax), so configs and readers can use it.
"""
import os
from typing import Collection, Mapping, TypeVar

from acl_jax.errors import UserError

V = TypeVar("V")

# What huggingface_hub reads as true in its offline switches (HF_HUB_OFFLINE and friends).
_TRUE = ("1", "ON", "YES", "TRUE")


def check_known(name, known: Collection, what: str, note: str = ""):
  """`name` if it is one of `known`; else a UserError that lists the known names.

  Args:
    name: the value to check.
    known: the allowed values (a registry's keys, a tuple of modes).
    what: what the name names, as the user wrote it (e.g. "loss.name").
    note: appended to the message (e.g. how to turn the feature off).
  """
  if name not in known:
    names = sorted(known) if isinstance(known, (Mapping, set, frozenset)) else list(known)
    raise UserError(f"Unknown {what} {name!r}; known: {names}{note}.")
  return name


def lookup(registry: Mapping[str, V], name: str, what: str, note: str = "") -> V:
  """The entry `name` of `registry`, or `check_known`'s error."""
  return registry[check_known(name, registry, what, note)]


def path_names(path) -> list[str]:
  """A pytree key path's entries as strings: dict keys, attribute names and sequence indices
  alike, so a live TrainState (attributes) and its saved tree (dicts) name a leaf the same."""
  def name(entry):
    for attr in ("key", "name", "idx"):
      if hasattr(entry, attr):
        return str(getattr(entry, attr))
    return str(entry)
  return [name(entry) for entry in path]


def env_true(*variables: str) -> bool:
  """Whether any of the environment `variables` is set to a true value (1, on, yes, true;
  any case): one reading of the hub's offline switches for models and datasets alike."""
  return any(os.environ.get(v, "").strip().upper() in _TRUE for v in variables)
